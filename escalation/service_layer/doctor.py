"""Use case: ``escalation doctor`` -- the known failure symptoms, checked live
(docs/architecture.md, "Known failure symptoms and how each is prevented or detected").

Each check returns a :class:`Check` (``ok``, what was measured, what to do). Checks:
DOUBLE_ESCALATION, CLOCK_SKEW, STUCK_MEMBER, LOCK_CONTENTION, ZSET_DRIFT, REDIS_AHEAD,
DEAD_LETTERS, MAXMEMORY_POLICY, LADDER_FILES, PG_REPLICATION.
A check that cannot be measured (e.g. ``INFO`` and ``CONFIG`` disabled) is reported with
status ``unknown`` (not ``ok``, and not a failure: the exit code ignores it); a check that
passes with a risk worth knowing (asynchronous replication) has status ``WARN`` (not a
failure either).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.errors import ErrorCode, EscalationError, LadderProblem
from escalation.domain.escalation import Escalation, Status, parse_dispute_id
from escalation.ports import DEAD_DECISION, MemberState, ResyncMark

DEFAULT_MAX_SKEW_MS = 1000
CONTENTION_RATIO = 0.2


class DoctorStore(Protocol):
    """The audit-store reads the checks need (``PostgresAuditStore``)."""

    def duplicate_decisions(self) -> int:
        """Disputes decided twice out of one tier."""
        ...

    def counts(self) -> dict[str, dict[str, int]]:
        """``{"by_status": {status: n}, ...}``."""
        ...

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        """Projection states of ``ids`` (those that exist)."""
        ...


class DoctorRedis(Protocol):
    """The scheduler-state reads the checks need (``ReliabilityRedis``)."""

    def members_without_payload(self) -> list[str]:
        """Pending or ready members with no payload (STUCK_MEMBER)."""
        ...

    def scan_shards(self, count: int = 1000) -> Iterator[list[list[tuple[str, int]]]]:
        """Per shard, its scheduled members in chunks ``(member, due ms)``."""
        ...

    def dead_list(self, limit: int = 100) -> list[tuple[str, int, dict[str, Any]]]:
        """Dead letters, oldest first: ``(member, dead-lettered ms, record)``."""
        ...

    def ready_count(self) -> int:
        """Members waiting in the ready ZSETs."""
        ...

    def inspect(self, dispute_ids: list[str]) -> dict[str, MemberState]:
        """Payload seq (and more) of each member (REDIS_AHEAD)."""
        ...


class ServerProbe(Protocol):
    """Direct questions to the servers (adapter: ``adapters.probes.ServerProbe``)."""

    def clocks_ms(self) -> tuple[int, int]:
        """(Redis TIME, database clock), epoch milliseconds, read one after the other."""
        ...

    def maxmemory_policy(self) -> str | None:
        """Redis ``maxmemory-policy``, or None when ``INFO`` and ``CONFIG GET`` are refused."""
        ...

    def replication(self) -> dict[str, Any] | None:
        """PostgreSQL replication as seen from the database server: ``in_recovery``,
        ``synchronous_standby_names`` and ``standbys`` (``[(name, sync_state)]`` from
        ``pg_stat_replication``); None when it cannot be read."""
        ...


@dataclass(frozen=True)
class DoctorDeps:
    """What :func:`run_checks` reads (wired by ``bootstrap.run_doctor``).

    Attributes:
        store: audit-store reads. redis_side: scheduler-state reads. probe: server clocks and
        configuration. scheduler_stats: ``RedisScheduler.stats``. ladder_problems: invalid
        ladder files and edited files of applied versions (code and message). resync: the
        namespace's resync mark (REDIS_AHEAD; ADR 0014).
    """

    store: DoctorStore
    redis_side: DoctorRedis
    probe: ServerProbe
    scheduler_stats: Callable[[], Mapping[str, int | None]]
    ladder_problems: Callable[[], list[LadderProblem]]
    resync: ResyncMark | None = None


@dataclass(frozen=True)
class Check:
    """One symptom: ``name``, ``ok``, ``detail`` (what was measured), ``advice`` (what to do)."""

    name: str
    ok: bool
    detail: str
    advice: str = ""
    unknown: bool = False
    warn: bool = False

    @property
    def status(self) -> str:
        """``"ok"``, ``"FAIL"``, ``"unknown"`` (could not be measured; not a failure) or
        ``"WARN"`` (passes, with a risk to know about; not a failure)."""
        if self.unknown:
            return "unknown"
        return ("WARN" if self.warn else "ok") if self.ok else "FAIL"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (with ``status``)."""
        return {**asdict(self), "status": self.status}


def _double(store: DoctorStore) -> Check:
    n = int(store.duplicate_decisions())
    return Check("DOUBLE_ESCALATION", n == 0, f"{n} dispute(s) decided twice out of one tier",
                 "" if n == 0 else "run `escalation audit verify`; inspect the trails of the "
                 "listed disputes; check that every worker runs this version (atomic claim)")


def _skew(probe: ServerProbe, host_ms: Callable[[], int], max_ms: int) -> Check:
    t0 = host_ms()
    redis_ms, db_ms = probe.clocks_ms()
    t1 = host_ms()
    mid = (t0 + t1) // 2
    rtt = t1 - t0
    worst = max(abs(mid - redis_ms), abs(mid - db_ms), abs(redis_ms - db_ms))
    ok = worst <= max_ms + rtt
    return Check("CLOCK_SKEW", ok,
                 f"host-redis {mid - redis_ms} ms, host-db {mid - db_ms} ms, "
                 f"redis-db {redis_ms - db_ms} ms (round trip {rtt} ms, limit {max_ms} ms)",
                 "" if ok else "sync the clocks with NTP/chrony; due times use Redis TIME only, "
                 "but ledger timestamps and reports compare them with the database clock")


def _stuck(rel: DoctorRedis) -> Check:
    stuck = rel.members_without_payload()
    return Check("STUCK_MEMBER", not stuck, f"{len(stuck)} member(s) without payload"
                 + (f", e.g. {stuck[:3]}" if stuck else ""),
                 "" if not stuck else "run `escalation reconcile` (workers also repair them "
                 "when they come due)")


def _contention(stats: Mapping[str, int | None]) -> Check:
    claimed = int(stats.get("claimed") or 0)
    contended = int(stats.get("lock_contended") or 0)
    not_owner = int(stats.get("not_owner") or 0)
    ratio = contended / max(claimed, 1)
    ok = not_owner == 0 and ratio <= CONTENTION_RATIO
    return Check("LOCK_CONTENTION", ok,
                 f"claimed {claimed}, lock_contended {contended} ({ratio:.0%}), "
                 f"not_owner (lease expired mid-flight) {not_owner}",
                 "" if ok else "not_owner > 0: batches outlive lock_ttl_s -- raise lock_ttl_s "
                 "or lower batch_size; high contention: fewer workers or more shards")


def _dead_letters(members: list[str]) -> Check:
    """Dead letters waiting for an operator (``members``): an escalation there is pending in
    PostgreSQL but fires no more (its SLA clock runs on), a notification there was never
    delivered."""
    decisions = sum(1 for m in members if m.startswith(DEAD_DECISION))
    notes = len(members) - decisions
    ok = not members
    return Check("DEAD_LETTERS", ok,
                 f"dead-lettered escalations {decisions}, undelivered notifications {notes}",
                 "" if ok else "`escalation dead list` shows each one's reason; fix the cause "
                 "(e.g. restore a released ladder file, the webhook), then `escalation dead "
                 "retry --all [--kind decision|notify] [--match TEXT]`, or `dead purge` one")


def _drift(store: DoctorStore, rel: DoctorRedis, dead_members: list[str],
           ahead: list[str] | None = None) -> Check:
    """ZSET_DRIFT; the members whose payload seq is above the ledger's go to ``ahead``
    (REDIS_AHEAD)."""
    counts = store.counts()["by_status"]
    pg_pending = int(counts.get(Status.PENDING.value, 0))
    zset = 0
    bad: list[str] = []
    for chunks in rel.scan_shards():  # per shard: pending and ready (ADR 0006) members
        seen: set[str] = set()
        for raw in chunks:
            chunk = [(m, sc) for m, sc in raw if m not in seen]
            seen.update(m for m, _ in chunk)
            zset += len(chunk)
            ids = {}
            for m, _ in chunk:
                try:
                    ids[m] = parse_dispute_id(m)
                except EscalationError:
                    bad.append(m)
            known = store.get_many(list(ids.values()))
            payloads = rel.inspect(list(ids)) if ahead is not None else {}
            for m, uid in ids.items():
                esc = known.get(uid)
                if esc is None or esc.status is not Status.PENDING:
                    bad.append(m)
                got = payloads.get(m)
                if (ahead is not None and got is not None and esc is not None
                        and got.payload_seq is not None and got.payload_seq > esc.seq):
                    ahead.append(m)
    dead = sum(1 for m in dead_members if m.startswith(DEAD_DECISION))
    ok = not bad and zset + dead == pg_pending
    return Check("ZSET_DRIFT", ok,
                 f"PostgreSQL pending {pg_pending}, Redis ZSET {zset} (of which ready "
                 f"{rel.ready_count()}), dead-lettered "
                 f"decisions {dead}, members not pending in PostgreSQL {len(bad)}",
                 "" if ok else "run `escalation reconcile --dry-run` to list the differences, "
                 "then `escalation reconcile`")


def _maxmemory(probe: ServerProbe) -> Check:
    found = probe.maxmemory_policy()
    if found is None:
        return Check("MAXMEMORY_POLICY", True, "unknown (INFO and CONFIG GET refused)",
                     "make sure the server uses maxmemory-policy noeviction", unknown=True)
    policy = found
    ok = policy == "noeviction"
    return Check("MAXMEMORY_POLICY", ok, f"maxmemory-policy {policy}",
                 "" if ok else "set maxmemory-policy noeviction: evicted keys silently lose "
                 "schedule state (reconcile repairs it, but only after the fact)")


def run_checks(deps: DoctorDeps, *, host_ms: Callable[[], int] | None = None,
               max_skew_ms: int = DEFAULT_MAX_SKEW_MS) -> list[Check]:
    """Run every check. Returns the checks in order.

    Args:
        deps: the deployment's reads (``bootstrap.run_doctor`` wires them from an App).
        host_ms: host clock in epoch ms (default ``time.time_ns() // 1e6``; tests inject one).
        max_skew_ms: largest tolerated clock difference.
    """
    clock = host_ms or (lambda: time.time_ns() // 1_000_000)
    dead = [m for m, _, _ in deps.redis_side.dead_list(100_000)]  # read once, for two checks
    ahead: list[str] = []
    drift = _drift(deps.store, deps.redis_side, dead, ahead)
    return [_double(deps.store), _skew(deps.probe, clock, max_skew_ms),
            _stuck(deps.redis_side), _contention(deps.scheduler_stats()),
            drift, _redis_ahead(deps.resync, ahead), _dead_letters(dead),
            _maxmemory(deps.probe), _ladder_files(deps.ladder_problems()),
            _replication(deps.probe)]


def _redis_ahead(resync: ResyncMark | None, ahead: list[str]) -> Check:
    """REDIS_AHEAD: the namespace's resync mark, and the scheduled members whose Redis
    payload is ahead of the ledger (a restore to an earlier point, a failover that lost
    commits, a new database; ADR 0014)."""
    mark = resync.resync() if resync is not None else None
    ok = mark is None and not ahead
    said = ("resync mark not set" if mark is None else
            f"resync mark set ({mark.get('reason')}: {mark.get('detail')})")
    return Check("REDIS_AHEAD", ok,
                 f"{said}; {len(ahead)} scheduled member(s) ahead of the ledger"
                 + (f", e.g. {ahead[:3]}" if ahead else ""),
                 "" if ok else "Redis holds decisions the ledger lacks and workers refuse to "
                 "fire this namespace: run `escalation reconcile` (resets Redis to the "
                 "ledger, records a SCHEDULE_RESET row per lost decision and lists them; "
                 "docs/operations.md, 'Restoring the database')")


def _replication(probe: ServerProbe) -> Check:
    """PG_REPLICATION: a standby that is not synchronous may miss the last commits when it
    is promoted (decisions Redis applied and notified would then be missing from the
    ledger). A warning, not a failure; docs/operations.md says what zero loss needs."""
    seen = probe.replication()
    if seen is None:
        return Check("PG_REPLICATION", True, "unknown (pg_stat_replication not readable)",
                     "check that every standby is synchronous", unknown=True)
    standbys = list(seen.get("standbys") or [])
    names = str(seen.get("synchronous_standby_names") or "")
    if seen.get("in_recovery"):
        return Check("PG_REPLICATION", False, "connected to a standby in recovery "
                     "(read only)", "point ESCALATION_DATABASE_URL at the primary "
                     "(target_session_attrs=read-write)")
    if not standbys:
        return Check("PG_REPLICATION", True, "no streaming standby connected "
                     f"(synchronous_standby_names {names!r})")
    not_sync = [f"{n} ({st})" for n, st in standbys if st not in ("sync", "quorum")]
    ok_detail = f"{len(standbys)} standby(s): " + ", ".join(
        f"{n} ({st})" for n, st in standbys) + f"; synchronous_standby_names {names!r}"
    if not not_sync and names:
        return Check("PG_REPLICATION", True, ok_detail)
    return Check("PG_REPLICATION", True, ok_detail,
                 "asynchronous replication: a failover to such a standby loses the commits it "
                 "had not received (Redis then runs ahead of the ledger). Set "
                 "synchronous_standby_names and synchronous_commit = on (or remote_apply) "
                 "for zero loss (docs/operations.md, 'PostgreSQL replication')", warn=True)


def _ladder_files(errors: list[LadderProblem]) -> Check:
    """Invalid ladder files, and released versions whose file is missing, invalid or edited
    after release (code ``RELEASE_BROKEN``): the escalations pinned to a broken release are
    dead-lettered by the workers until the released file is restored."""
    broken = [e for e in errors if e.code is ErrorCode.RELEASE_BROKEN]
    advice = ""
    if broken:
        advice = ("restore each released file from version control (a released file is never "
                  "edited: put a change in a new version and release it), then `escalation "
                  "dead retry` the escalations dead-lettered meanwhile")
    elif errors:
        advice = ("fix the file (see `escalation ladder check`); an invalid file is never "
                  "released, so enqueue and workers ignore it")
    return Check("LADDER_FILES", not errors,
                 f"{len(broken)} broken release(s), {len(errors) - len(broken)} invalid "
                 f"ladder file(s)" + (f": {errors[0]}" if errors else ""), advice)


"""Use case: ``escalation doctor`` -- the seed's troubleshooting symptoms, checked live
(issue 7 point 5; seed 000 "Troubleshooting").

Each check returns a :class:`Check` (``ok``, what was measured, what to do). Checks:
DOUBLE_ESCALATION, CLOCK_SKEW, STUCK_MEMBER, LOCK_CONTENTION, ZSET_DRIFT, MAXMEMORY_POLICY.
A check that cannot be measured (e.g. ``CONFIG`` disabled) is reported ``ok`` with
``unknown`` in its detail, never as a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis
import sqlalchemy as sa

from escalation.adapters.redis_reliability import DEAD_DECISION, ReliabilityRedis
from escalation.domain.errors import RELEASE_BROKEN, EscalationError
from escalation.domain.escalation import Status, parse_dispute_id

DEFAULT_MAX_SKEW_MS = 1000
CONTENTION_RATIO = 0.2


@dataclass(frozen=True)
class Check:
    """One symptom: ``name``, ``ok``, ``detail`` (what was measured), ``advice`` (what to do)."""

    name: str
    ok: bool
    detail: str
    advice: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _double(app: Any) -> Check:
    n = int(app.store.duplicate_decisions())
    return Check("DOUBLE_ESCALATION", n == 0, f"{n} dispute(s) decided twice out of one tier",
                 "" if n == 0 else "run `escalation audit verify`; inspect the trails of the "
                 "listed disputes; check that every worker runs this version (atomic claim)")


def _skew(app: Any, host_ms: Callable[[], int], max_ms: int) -> Check:
    t0 = host_ms()
    rs, rus = app.redis.time()
    redis_ms = int(rs) * 1000 + int(rus) // 1000
    with app.engine.connect() as conn:
        db = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    t1 = host_ms()
    db_ms = int(db.timestamp() * 1000)
    mid = (t0 + t1) // 2
    rtt = t1 - t0
    worst = max(abs(mid - redis_ms), abs(mid - db_ms), abs(redis_ms - db_ms))
    ok = worst <= max_ms + rtt
    return Check("CLOCK_SKEW", ok,
                 f"host-redis {mid - redis_ms} ms, host-db {mid - db_ms} ms, "
                 f"redis-db {redis_ms - db_ms} ms (round trip {rtt} ms, limit {max_ms} ms)",
                 "" if ok else "sync the clocks with NTP/chrony; due times use Redis TIME only, "
                 "but ledger timestamps and reports compare them with the database clock")


def _stuck(rel: ReliabilityRedis) -> Check:
    stuck = rel.members_without_payload()
    return Check("STUCK_MEMBER", not stuck, f"{len(stuck)} member(s) without payload"
                 + (f", e.g. {stuck[:3]}" if stuck else ""),
                 "" if not stuck else "run `escalation reconcile` (workers also repair them "
                 "when they come due)")


def _contention(app: Any) -> Check:
    stats = app.scheduler.stats()
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


def _drift(app: Any, rel: ReliabilityRedis) -> Check:
    counts = app.store.counts()["by_status"]
    pg_pending = int(counts.get(Status.PENDING.value, 0))
    zset = 0
    bad: list[str] = []
    for keys in rel.shard_keys():
        seen: set[str] = set()
        for raw in rel.scan_members(keys):  # pending and ready (issue 4 C) members
            chunk = [(m, sc) for m, sc in raw if m not in seen]
            seen.update(m for m, _ in chunk)
            zset += len(chunk)
            ids = {}
            for m, _ in chunk:
                try:
                    ids[m] = parse_dispute_id(m)
                except EscalationError:
                    bad.append(m)
            known = app.store.get_many(list(ids.values()))
            for m, uid in ids.items():
                esc = known.get(uid)
                if esc is None or esc.status is not Status.PENDING:
                    bad.append(m)
    dead = sum(1 for m, _, _ in rel.dead_list(100_000) if m.startswith(DEAD_DECISION))
    ok = not bad and zset + dead == pg_pending
    return Check("ZSET_DRIFT", ok,
                 f"PostgreSQL pending {pg_pending}, Redis ZSET {zset} (of which ready "
                 f"{rel.ready_count()}), dead-lettered "
                 f"decisions {dead}, members not pending in PostgreSQL {len(bad)}",
                 "" if ok else "run `escalation reconcile --dry-run` to list the differences, "
                 "then `escalation reconcile`")


def _maxmemory(client: redis.Redis) -> Check:
    try:
        policy = str(client.config_get("maxmemory-policy").get("maxmemory-policy", "unknown"))
    except redis.ResponseError:
        return Check("MAXMEMORY_POLICY", True, "unknown (CONFIG GET refused)",
                     "make sure the server uses maxmemory-policy noeviction")
    ok = policy == "noeviction"
    return Check("MAXMEMORY_POLICY", ok, f"maxmemory-policy {policy}",
                 "" if ok else "set maxmemory-policy noeviction: evicted keys silently lose "
                 "schedule state (reconcile repairs it, but only after the fact)")


def run_doctor(app: Any, *, host_ms: Callable[[], int] | None = None,
               max_skew_ms: int = DEFAULT_MAX_SKEW_MS) -> list[Check]:
    """Run every check against the live deployment of ``app``. Returns the checks in order.

    Args:
        host_ms: host clock in epoch ms (default ``time.time_ns() // 1e6``; tests inject one).
        max_skew_ms: largest tolerated clock difference.
    """
    rel = ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards,
                           aging_ms=app.settings.priority_aging_s * 1000)
    clock = host_ms or (lambda: time.time_ns() // 1_000_000)
    return [_double(app), _skew(app, clock, max_skew_ms), _stuck(rel), _contention(app),
            _drift(app, rel), _maxmemory(app.redis), _ladder_files(app)]


def _ladder_files(app: Any) -> Check:
    """Invalid ladder files, and released versions whose file is missing, invalid or edited
    after release (``ReleasedLadders.errors``): the escalations pinned to a broken release
    are dead-lettered by the workers until the released file is restored."""
    try:
        errors = _ladder_problems(app)
    except Exception as exc:  # doctor reports, never crashes
        errors = [f"ladder files could not be checked: {exc}"]
    broken = [e for e in errors if e.startswith(RELEASE_BROKEN)]
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


def _ladder_problems(app: Any) -> list[str]:
    """Broken releases (re-read now), then every other `ladder check` problem."""
    from escalation.adapters.ladder_history import LadderHistoryStore
    from escalation.service_layer.ladder_migration import check

    ladders = app.ladders
    if hasattr(ladders, "refresh"):
        ladders.refresh()
    broken = list(ladders.problems()) if hasattr(ladders, "problems") else []
    named = {e.split(": ", 2)[1] for e in broken if e.count(": ") >= 2}  # their files
    others = [e for e in check(app.settings.ladders_dir, LadderHistoryStore(app.engine))
              if not e.startswith(RELEASE_BROKEN) and e.split(": ", 1)[0] not in named]
    return broken + others

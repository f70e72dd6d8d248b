"""Shared checks for the fault-injection suite: the invariants every run asserts.

Invariants (docs/fault-injection.md), for the escalations ``ids`` enqueued at tier ``standard`` and
already due:

1. nothing lost: every one has a decision row (PROMOTED_*/TERMINAL_ESCALATION) from
   ``standard``;
2. exactly once in effect: exactly one such row per (dispute, from tier);
3. gapless: each dispute's ledger seqs are 1..last_seq with last_seq = the projection's
   ``last_seq``; every chain verifies (``store.verify``);
4. notifications: every decision row (dispute, seq) has at least one review-stream entry,
   all of that (dispute, seq)'s entries carry one idempotency key (``<dispute>:<seq>``), and
   no entry names a (dispute, seq) without its decision row (no apply without its record);
5. Redis agrees with PostgreSQL: each pending payload's seq equals the projection's last_seq.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from tests.e2e.helpers import start_worker, wait_for_first_log_line, worker_output

DECISIONS_SQL = sa.text(
    "SELECT dispute_id, seq, from_tier, match_decision FROM escalation_audit "
    "WHERE dispute_id = ANY(:ids) AND (match_decision LIKE 'PROMOTED_%' "
    "OR match_decision = 'TERMINAL_ESCALATION')")
SEQS_SQL = sa.text(
    "SELECT a.dispute_id, count(*), min(a.seq), max(a.seq), s.last_seq "
    "FROM escalation_audit a JOIN escalation_state s USING (dispute_id) "
    "WHERE a.dispute_id = ANY(:ids) GROUP BY a.dispute_id, s.last_seq")


@dataclass
class Verdict:
    """Result of :func:`check`: counts and the violations found (empty lists = all good)."""

    total: int
    decided: int = 0
    lost: list[UUID] = field(default_factory=list)
    doubled: list[tuple[UUID, str]] = field(default_factory=list)
    gaps: list[UUID] = field(default_factory=list)
    broken_chains: list[tuple[UUID, int]] = field(default_factory=list)
    unnotified: list[tuple[str, int]] = field(default_factory=list)
    key_conflicts: list[tuple[str, int]] = field(default_factory=list)
    orphan_notes: list[tuple[str, int]] = field(default_factory=list)
    redis_drift: list[str] = field(default_factory=list)
    notes: int = 0

    def problems(self) -> dict[str, Any]:
        """Non-empty violation lists, truncated to 5 items each (for assertion messages)."""
        out: dict[str, Any] = {}
        for name in ("lost", "doubled", "gaps", "broken_chains", "unnotified", "key_conflicts",
                     "orphan_notes", "redis_drift"):
            items = getattr(self, name)
            if items:
                out[name] = (len(items), items[:5])
        return out


def decided_count(engine: sa.Engine, ids: list[UUID]) -> int:
    """How many of ``ids`` have at least one decision row out of tier ``standard``."""
    with engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(DISTINCT dispute_id) FROM escalation_audit WHERE dispute_id = ANY(:ids)"
            " AND from_tier = 'standard' AND (match_decision LIKE 'PROMOTED_%' "
            "OR match_decision = 'TERMINAL_ESCALATION')"), {"ids": ids}).scalar_one())


def settled(app: Any, ids: list[UUID]) -> bool:
    """All ``ids`` decided in PostgreSQL and every Redis payload at PostgreSQL's last_seq."""
    if decided_count(app.engine, ids) != len(ids):
        return False
    with app.engine.connect() as conn:
        last = dict(conn.execute(sa.text(
            "SELECT dispute_id, last_seq FROM escalation_state WHERE dispute_id = ANY(:ids)"),
            {"ids": ids}).all())
    pipe = app.redis.pipeline(transaction=False)
    for d in ids:
        pipe.hget(app.scheduler.keys_for(d).payload(d), "seq")
    return all(s is None or int(s) == last[d] for d, s in zip(ids, pipe.execute(), strict=True))


def review_entries(app: Any) -> list[dict[str, str]]:
    """Every entry of every shard's review stream of ``app``'s namespace."""
    out: list[dict[str, str]] = []
    for keys in app.scheduler.shard_keys():
        for _id, fields in app.redis.xrange(keys.review, "-", "+"):
            out.append(fields)
    return out


def check(app: Any, ids: list[UUID], *, notes: Iterable[dict[str, str]] | None = None) -> Verdict:
    """Evaluate the invariants (module docstring) for ``ids``; never raises on a violation."""
    v = Verdict(total=len(ids))
    with app.engine.connect() as conn:
        decisions = conn.execute(DECISIONS_SQL, {"ids": ids}).all()
        seqs = conn.execute(SEQS_SQL, {"ids": ids}).all()
    per: dict[tuple[UUID, str], int] = defaultdict(int)
    decided_at: set[tuple[str, int]] = set()
    for did, seq, from_tier, _md in decisions:
        per[(did, from_tier)] += 1
        decided_at.add((str(did), int(seq)))
    v.decided = sum(1 for d in ids if per.get((d, "standard")))
    v.lost = [d for d in ids if not per.get((d, "standard"))]
    v.doubled = [k for k, c in per.items() if c > 1]
    seen = {row[0] for row in seqs}
    v.gaps = [d for d, n, lo, hi, last in seqs if not (lo == 1 and n == hi == last)]
    v.gaps += [d for d in ids if d not in seen]
    wanted = set(ids)
    v.broken_chains = [b for b in app.store.verify() if b[0] in wanted]

    keys: dict[tuple[str, int], set[str]] = defaultdict(set)
    entries = list(notes) if notes is not None else review_entries(app)
    id_strs = {str(d) for d in ids}
    for e in entries:
        if e.get("dispute_id") in id_strs:
            keys[(e["dispute_id"], int(e["seq"]))].add(e.get("idempotency_key", ""))
            v.notes += 1
    v.unnotified = sorted(k for k in decided_at if k not in keys)
    v.key_conflicts = sorted(k for k, ks in keys.items() if ks != {f"{k[0]}:{k[1]}"})
    v.orphan_notes = sorted(k for k in keys if k not in decided_at)

    last = {str(d): int(last) for d, _n, _lo, _hi, last in seqs}
    for d in ids:
        p = app.scheduler.payload(d)
        if p is not None and int(p["seq"]) != last.get(str(d), -1):
            v.redis_drift.append(f"{d}: redis seq {p['seq']} vs pg {last.get(str(d))}")
    return v


def assert_exactly_once(app: Any, ids: list[UUID], *, notifications: bool = True) -> Verdict:
    """Assert every invariant of the module docstring; returns the verdict for reporting.

    ``notifications=False`` skips invariant 4's "at least once" part only (used where the
    test documents a known gap); key conflicts and orphan entries are always checked.
    """
    v = check(app, ids)
    problems = v.problems()
    if not notifications:
        problems.pop("unnotified", None)
    assert not problems, f"{v.decided}/{v.total} decided; violations: {problems}"
    assert v.decided == v.total
    return v


def wait_until(pred: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> bool:
    """Poll ``pred`` until true or ``timeout_s`` passes; returns the last result."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval_s)
    return pred()


def worker_env(redis_url: str, database_url: str, namespace: str,
               **extra: str) -> dict[str, str]:
    """Environment for a worker subprocess (inherits PATH etc., drops other ESCALATION_*).

    DEBUG level: the fault tests read the per-decision events, which INFO leaves out.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="DEBUG", **extra)
    return env


WORKER_ARGS = ("--lock-ttl-s", "5", "--poll-interval-s", "1")


def spawn(env: dict[str, str], worker_id: str, batch_size: int = 20) -> subprocess.Popen[bytes]:
    """Start one worker process (lease 5 s, poll 1 s)."""
    return start_worker(env, *WORKER_ARGS, "--batch-size", str(batch_size),
                        "--worker-id", worker_id)


def stop(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 30) -> list[int | None]:
    """SIGTERM (SIGCONT first, in case it is frozen) and wait; SIGKILL what does not exit.

    A worker still starting (no log line yet) is given up to ``timeout_s`` to reach its
    signal handlers first."""
    codes: list[int | None] = []
    for p in procs:
        wait_for_first_log_line(p, timeout_s)
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
        try:
            codes.append(p.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait(timeout=10))
    return codes


def output(proc: subprocess.Popen[bytes]) -> str:
    """Everything the worker wrote (structured JSON log lines)."""
    return worker_output(proc)

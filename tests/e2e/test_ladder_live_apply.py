"""``ladder apply`` on a live system: 50,000 pending escalations migrated while 3 worker
PROCESSES fire continuously (docs/ladder-migrations.md, "Apply on a live system").

The escalations are enqueued on v1 with due times spread at about 1,000 per second, and a
tail of 5,000 falls due from 5 s to 65 s after the enqueue ends, so the workers promote
continuously before, during and after the apply, however long the enqueue took. v2
(``team_lead`` inserted) is released and planned while they fire; the plan hash names the
change, so the apply -- run once, after a worker has promoted something -- must complete on
the first try.

Afterwards: the run is done and accounted for every escalation (planned = migrated, the
ones a worker decided between page read and batch lock re-planned); per dispute the ledger
seqs are gapless, there is exactly one LADDER_MIGRATED row and no decision row after it
carries the old version; every decision row's ``to_tier`` is the next tier of its own
version; every escalation is pending on v2 in PostgreSQL and in Redis with the same seq.

``ESCALATION_LIVE_APPLY_N`` sizes it down (default 50,000); the assertions are the same.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.e2e.helpers import start_worker, worker_output
from tests.integration.ladder_support import MigEnv

N = int(os.environ.get("ESCALATION_LIVE_APPLY_N", "50000"))
RATE = 1000  # escalations falling due per second
WORKERS = 3
CHUNK = 5000  # Redis pipeline size of the final check
TAIL = min(5000, N // 10)  # enqueued last, due after the enqueue: see _enqueue_spread
TAIL_GROUPS = 50
TAIL_LEAD_S, TAIL_SPAN_S = 5.0, 60.0
DECISIONS = ("PROMOTED", "TERMINAL")


def _wait_for(predicate: Any, timeout_s: float, what: Any) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.1)


def _decisions_between(env: MigEnv, ids: list[Any], t0: Any, t1: Any) -> int:
    with env.app.engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(*) FROM escalation_audit WHERE dispute_id = ANY(:ids) AND event = "
            "ANY(:ev) AND decided_at BETWEEN :t0 AND :t1"),
            {"ids": ids, "ev": list(DECISIONS), "t0": t0, "t1": t1}).scalar_one())


def _ledger(env: MigEnv, ids: list[Any]) -> dict[Any, list[Any]]:
    with env.app.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT dispute_id, seq, event, ladder_version, from_tier, to_tier, actor "
            "FROM escalation_audit WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq"),
            {"ids": ids}).all()
    chains: dict[Any, list[Any]] = defaultdict(list)
    for r in rows:
        chains[r.dispute_id].append(r)
    return chains


def _enqueue_spread(env: MigEnv, start_in_s: float) -> list[Any]:
    """N escalations: N - TAIL due from ``start_in_s`` on at RATE per second, then a tail
    enqueued last and due TAIL_LEAD_S..TAIL_LEAD_S + TAIL_SPAN_S after the enqueue ends.

    The main spread assumes the enqueue keeps pace (~3,000/s); on a loaded machine it may
    not, and everything would fall due before the apply starts (no decision during it).
    The tail keeps escalations falling due through the plan and the apply whatever the
    enqueue took."""
    body = N - TAIL
    base = env.app.scheduler.time() + timedelta(seconds=start_in_s)
    ids: list[Any] = []
    for lo in range(0, body, RATE):  # one request group per second of due times
        at = base + timedelta(seconds=lo / RATE)
        ids += env.enqueue("standard", due_at=at, n=min(RATE, body - lo))
    tail_base = env.app.scheduler.time() + timedelta(seconds=TAIL_LEAD_S)
    step = TAIL_SPAN_S / TAIL_GROUPS
    for g in range(TAIL_GROUPS):
        n = TAIL // TAIL_GROUPS + (TAIL % TAIL_GROUPS if g == TAIL_GROUPS - 1 else 0)
        ids += env.enqueue("standard", due_at=tail_base + timedelta(seconds=g * step), n=n)
    return ids


def _assert_chains(env: MigEnv, ids: list[Any]) -> tuple[int, int]:
    v1, v2 = env.catalog.get(env.name, 1), env.catalog.get(env.name, 2)
    chains = _ledger(env, ids)
    assert set(chains) == set(ids)  # none lost from the ledger
    on_old = on_new = 0
    for did, chain in chains.items():
        assert [r.seq for r in chain] == list(range(1, len(chain) + 1)), did  # gapless
        events = [r.event for r in chain]
        assert events.count("LADDER_MIGRATED") == 1, (did, events)
        migrated_at = events.index("LADDER_MIGRATED")
        assert chain[migrated_at].actor == "live-admin@test"
        for pos, r in enumerate(chain):
            if r.event not in DECISIONS:
                continue
            assert r.ladder_version == (2 if pos > migrated_at else 1), (did, events)
            ladder = v1 if r.ladder_version == 1 else v2
            nxt = ladder.next_tier(r.from_tier)  # decided against the row's own version
            assert nxt is not None and nxt.id == r.to_tier, (did, r)
            on_old, on_new = on_old + (pos < migrated_at), on_new + (pos > migrated_at)
    return on_old, on_new


def _assert_redis_agrees(env: MigEnv, ids: list[Any]) -> None:
    states = env.app.store.get_many(ids)
    assert len(states) == len(ids)
    for lo in range(0, len(ids), CHUNK):
        part = ids[lo:lo + CHUNK]
        pipe = env.app.redis.pipeline(transaction=False)
        for did in part:
            pipe.hmget(env.app.scheduler.keys_for(did).payload(did), "l", "seq")  # ladder field
        for did, (ladder_field, seq) in zip(part, pipe.execute(), strict=True):
            state = states[did]
            assert state.status.value == "pending" and state.ladder_version == 2, did
            assert ladder_field == f"{env.name}@2", did
            assert seq is not None and int(seq) == state.seq, did


@pytest.mark.slow
def test_apply_50k_while_three_workers_fire_completes_first_try_and_never_decides_old(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = MigEnv.make(app, tmp_path)
    t_enqueue = time.monotonic()
    ids = _enqueue_spread(env, start_in_s=N / 3000 + 5)  # ~ after the enqueue itself
    assert len(set(ids)) == N
    print(f"enqueued {N} in {time.monotonic() - t_enqueue:.1f} s")

    worker_env = dict(cli_env, ESCALATION_LADDERS_DIR=str(env.dir),
                      ESCALATION_DEFAULT_LADDER=env.name)
    common = ["--batch-size", "100", "--lock-ttl-s", "5", "--poll-interval-s", "1"]
    workers = [start_worker(worker_env, *common, "--worker-id", f"live{i}")
               for i in range(WORKERS)]
    try:
        _wait_for(lambda: any("escalation.promoted" in worker_output(p) for p in workers),
                  180, lambda: "a worker to promote: " + worker_output(workers[0])[-3000:])
        env.add("inserted")  # v2 released while the workers fire
        plan = env.plan()
        assert not plan.blocked
        time.sleep(2)  # decisions happen between plan and apply, as on a real system
        t0 = app.scheduler.time()
        report = env.apply(plan.plan_hash, actor="live-admin@test", reason="CHG-LIVE",
                           batch_size=500, lock_wait_s=15)  # once: it must not be refused
        t1 = app.scheduler.time()
        fired = _decisions_between(env, ids, t0, t1)
        # keep firing a little after the apply: decisions on v2 from now on
        time.sleep(2)
    finally:
        for p in workers:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=120) for p in workers]
    outputs = [worker_output(p)[-2000:] for p in workers]
    assert codes == [0] * WORKERS, outputs
    secs = (t1 - t0).total_seconds()
    print(f"apply of {N} in {secs:.1f} s ({N / secs:,.0f}/s) while the workers decided "
          f"{fired} ({fired / secs:,.0f}/s); {report.summary()}; load "
          f"{os.getloadavg()[0]:.1f}")
    assert fired > 0  # the workers really fired during the apply
    assert report.planned == N and report.migrated == N
    assert report.blocked == [] and report.unchanged == 0
    [run] = env.history.history(env.name)
    assert (run.status, run.migrated, run.reason) == ("done", N, "CHG-LIVE")
    on_old, on_new = _assert_chains(env, ids)
    print(f"decisions before their LADDER_MIGRATED row (v1): {on_old}, after (v2): {on_new}")
    _assert_redis_agrees(env, ids)

"""``ladder apply`` of 10,000 pending escalations while 3 worker PROCESSES fire
(docs/ladder-migrations.md, "Apply on a live system").

Due times are spread so promotions keep happening during the apply: a third is already due,
a third falls due over the next seconds (while the apply runs), a third is due hours later.
The workers are started by the apply's test hook right after its first batch is recorded
(after the apply re-checked the plan hash, so no promotion can make the approved plan drift),
and the apply goes on only once a worker has promoted something: the remaining batches race
real promotions on the old ladder.

Afterwards: every pending escalation is on the new version (PostgreSQL and Redis), none is
lost, none is promoted twice (one decision row per (dispute, from tier, ladder version)), none
is promoted against the old ladder after its LADDER_MIGRATED row, and ledger sequence numbers
are gapless per dispute.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.e2e.helpers import start_worker, worker_output
from tests.integration.ladder_support import MigEnv

N = 10_000
WORKERS = 3
DECISIONS = ("PROMOTED", "TERMINAL")


def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _still_in_standard(env: MigEnv, ids: list[Any]) -> int:
    with env.app.engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(*) FROM escalation_state WHERE dispute_id = ANY(:ids) "
            "AND tier = 'standard'"), {"ids": ids}).scalar_one())


def _ledger(env: MigEnv, ids: list[Any]) -> dict[Any, list[Any]]:
    with env.app.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT dispute_id, seq, event, ladder_version, from_tier, to_tier "
            "FROM escalation_audit WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq"),
            {"ids": ids}).all()
    chains: dict[Any, list[Any]] = defaultdict(list)
    for r in rows:
        chains[r.dispute_id].append(r)
    return chains


@pytest.mark.slow
def test_apply_10k_while_three_worker_processes_fire_loses_nothing_and_never_double_promotes(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = MigEnv.make(app, tmp_path)
    now = app.scheduler.time()
    third = N // 3
    due_now = env.enqueue("standard", due_at=now - timedelta(seconds=1), n=third)
    # falls due while the apply runs: spread over 2..14 s after enqueue (as one request per
    # second-slice, so the workers see a steady trickle rather than one burst)
    during: list[Any] = []
    slices = 24
    for s in range(slices):
        size = third // slices + (1 if s < third % slices else 0)
        during += env.enqueue("standard", due_at=now + timedelta(seconds=2 + s * 0.5), n=size)
    later = env.enqueue("standard", due_at=now + timedelta(hours=6), n=N - 2 * third)
    ids = [*due_now, *during, *later]
    assert len(set(ids)) == N

    env.add("inserted")  # v2: team_lead inserted between standard and senior
    plan = env.plan()
    assert len(plan.items) == N and not plan.blocked

    worker_env = dict(cli_env, ESCALATION_LADDERS_DIR=str(env.dir),
                      ESCALATION_DEFAULT_LADDER=env.name)
    common = ["--batch-size", "50", "--lock-ttl-s", "5", "--poll-interval-s", "1"]
    workers: list[subprocess.Popen[bytes]] = []

    def hook(stage: str, index: int) -> None:
        if (stage, index) == ("after_record", 0):
            workers.extend(start_worker(worker_env, *common, "--worker-id", f"lw{i}")
                           for i in range(WORKERS))
            _wait_for(lambda: any("escalation.promoted" in worker_output(p) for p in workers),
                      60, "a worker to promote while the apply runs")

    try:
        report = env.apply(plan.plan_hash, batch_size=250, hook=hook, lock_wait_s=15)
        # the workers keep firing until everything due (the first two thirds) is promoted
        _wait_for(lambda: _still_in_standard(env, [*due_now, *during]) == 0, 90,
                  "the due escalations to be promoted")
    finally:
        for p in workers:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in workers]
    outputs = [worker_output(p) for p in workers]
    print(f"migrated {report.migrated}, replanned {report.replanned}, "
          f"not_owner {report.not_owner}, left to workers {len(report.left_to_workers)}")
    assert codes == [0] * WORKERS, outputs

    # the apply accounted for every escalation; some raced a worker's decision
    assert report.migrated == N and report.blocked == [] and report.left_to_workers == []
    [run] = env.history.history(env.name)
    assert (run.status, run.migrated, run.planned) == ("done", N, N)

    v1, v2 = env.catalog.get(env.name, 1), env.catalog.get(env.name, 2)
    chains = _ledger(env, ids)
    assert set(chains) == set(ids)  # none lost from the ledger
    for did, chain in chains.items():
        assert [r.seq for r in chain] == list(range(1, len(chain) + 1)), did  # gapless
        events = [r.event for r in chain]
        assert events[0] == "ENQUEUED" and events.count("LADDER_MIGRATED") == 1, (did, events)
        decisions = [(r.from_tier, r.ladder_version) for r in chain if r.event in DECISIONS]
        assert len(decisions) == len(set(decisions)), (did, events)  # never promoted twice
        migrated_at = events.index("LADDER_MIGRATED")
        for pos, r in enumerate(chain):
            if r.event not in DECISIONS:
                continue
            if pos > migrated_at:  # never on the old ladder after its migration
                assert r.ladder_version == 2, (did, events)
            ladder = v1 if r.ladder_version == 1 else v2
            nxt = ladder.next_tier(r.from_tier)  # decided against the row's own version
            assert nxt is not None and nxt.id == r.to_tier, (did, r)

    due_ids = {*due_now, *during}
    for did in ids:
        promotions = sum(r.event in DECISIONS for r in chains[did])
        assert promotions == (1 if did in due_ids else 0), did

    # every escalation is still pending, on v2, in PostgreSQL and in Redis, seqs agreeing
    states = app.store.get_many(ids)
    assert len(states) == N
    pipe = app.redis.pipeline(transaction=False)
    for did in ids:
        keys = app.scheduler.keys_for(did)
        pipe.hmget(keys.payload(did), "l", "seq")  # ladder field, seq
        pipe.zscore(keys.pending, str(did))
    replies = pipe.execute()
    for i, did in enumerate(ids):
        state = states[did]
        assert state.status.value == "pending" and state.ladder_version == 2, did
        ladder_field, seq = replies[2 * i]
        assert ladder_field == f"{env.name}@2", did
        assert seq is not None and int(seq) == state.seq, did
        assert replies[2 * i + 1] is not None, did  # still scheduled
    with_old_promotion = sum(
        any(r.event in DECISIONS and r.ladder_version == 1 for r in chains[d]) for d in ids)
    with_new_promotion = sum(
        any(r.event in DECISIONS and r.ladder_version == 2 for r in chains[d]) for d in ids)
    print(f"promoted on v1 (before their migration): {with_old_promotion}, "
          f"on v2: {with_new_promotion}")
    assert with_old_promotion + with_new_promotion == len(due_ids)

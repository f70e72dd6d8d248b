"""Scenario ``reconcile``: the cost of one incremental reconcile run at a large backlog.

Method (``python -m escalation.bench.reconcile --n 1000000``):

1. ``n`` pending escalations (due a day ahead) written through ``enqueue_many`` in batches
   (ledger + projection + Redis, the product's own path); the build rate is printed.
   Then ``ANALYZE`` (what autovacuum does after a bulk load: the planner's row estimates).
2. The reconcile state is seeded with a watermark at the current horizon (what a first,
   full run leaves; a full run is not timed here -- its rate is the one in
   docs/performance.md).
3. ``idle``: an incremental run with nothing changed since the watermark: the window read of
   the ledger plus one sweep slice (``period`` seconds per lap, 300 s since the previous
   slice: ``300 / period`` of the id space and of each scheduled ZSET).
4. ``changed``: ``changes`` new escalations enqueued, and the Redis payload and member of a
   tenth of them deleted; then one incremental run (the window read, every check on each
   changed dispute, the repairs, the sweep slice).
5. ``slice``: the sweep slice alone (changed = 0 again), repeated ``slices`` times.

Per run: wall seconds, Redis commands sent by this process (counted at the client:
one per command, each command of a pipeline counted), PostgreSQL rows read (the bench
database's ``pg_stat_user_tables`` sequential + index tuples, read after the pool is closed
so every backend has flushed its counters), and the run's own counts (changed disputes,
sweep rows and members, repairs). Printed as a table, JSON and one SUMMARY line.
"""

from __future__ import annotations

import argparse
import hashlib
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from redis.connection import AbstractConnection

from escalation.bench.common import Target, load, new_namespace, report
from escalation.bootstrap import (
    App,
    core_ports_for,
    namespace_binding_for,
    reconcile_run_for,
    reliability_for,
)
from escalation.composition_bench import (
    analyze_ledger,
    close_database_connections,
    drop_scheduled,
    ledger_horizon,
    reconcile_state_for,
)
from escalation.domain.reconcile_sweep import ReconcileState
from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many
from escalation.service_layer.reconcile import AheadRepair
from escalation.service_layer.reconcile_incremental import IncrementalReconcile

BATCH = 5000


class _Commands:
    """Redis commands this process sends (patched into redis-py's connection class)."""

    count = 0


@contextmanager
def _counting() -> Iterator[type[_Commands]]:
    one, many = AbstractConnection.pack_command, AbstractConnection.pack_commands

    def pack_command(self: Any, *args: Any) -> Any:
        _Commands.count += 1
        return one(self, *args)  # type: ignore[no-untyped-call]

    def pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        _Commands.count += len(commands)
        return many(self, commands)  # type: ignore[no-untyped-call]

    AbstractConnection.pack_command = pack_command  # type: ignore[method-assign]
    AbstractConnection.pack_commands = pack_commands  # type: ignore[method-assign]
    try:
        yield _Commands
    finally:
        AbstractConnection.pack_command = one  # type: ignore[method-assign]
        AbstractConnection.pack_commands = many  # type: ignore[method-assign]


def _rows_read(tgt: Target) -> int:
    engine = tgt.engine()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            return int(conn.execute(sa.text(
                "SELECT COALESCE(sum(COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)), 0)"
                " FROM pg_stat_user_tables")).scalar_one())
    finally:
        engine.dispose()


def _build(app: App, n: int, keep: list[uuid.UUID] | None = None) -> float:
    """Enqueue ``n`` pending escalations; their ids appended to ``keep`` when given."""
    due = app.scheduler.time() + timedelta(days=1)
    ports = core_ports_for(app)
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        reqs = []
        for i in range(start, min(n, start + BATCH)):
            did = uuid.uuid4()
            if keep is not None:
                keep.append(did)
            reqs.append(EnqueueRequest(dispute_id=did, materiality=f"{i % 5000}.25",
                                       source_hash=hashlib.sha256(did.bytes).hexdigest(),
                                       due_at=due + timedelta(milliseconds=i)))
        enqueue_many(EnqueueMany(reqs, app.actor, app.settings.default_ladder), ports)
    return time.perf_counter() - t0


def _measured(tgt: Target, app: App, label: str, period_s: int) -> dict[str, Any]:
    close_database_connections(app)
    rows0 = _rows_read(tgt)
    rel = reliability_for(app)
    ahead = AheadRepair(mark=namespace_binding_for(app), stream=rel)
    with _counting() as counter:
        before = counter.count
        t0 = time.perf_counter()
        run = reconcile_run_for(app, IncrementalReconcile(period_s, overlap_s=0),
                                ahead=ahead, rel=rel)
        seconds = time.perf_counter() - t0
        commands = counter.count - before
    close_database_connections(app)  # every backend flushes its table counters on exit
    time.sleep(0.5)
    rep = run.report
    return {"run": label, "mode": run.mode, "seconds": round(seconds, 3),
            "redis_commands": commands, "pg_rows_read": _rows_read(tgt) - rows0,
            "changed": run.changed, "sweep_rows": run.sweep_rows,
            "sweep_members": run.sweep_members, "repaired": rep.count(repaired=True),
            "errors": len(rep.errors)}


def run(tgt: Target, n: int, changes: int = 1000, slices: int = 3,
        period_s: int = 21_600) -> dict[str, Any]:
    """Build ``n`` pending, then measure the incremental runs (module doc)."""
    app = tgt.app(new_namespace())
    build_s = _build(app, n)
    analyze_ledger(app)  # what autovacuum does after a bulk load
    store = reconcile_state_for(app)
    horizon = ledger_horizon(app)
    store.save(ReconcileState(horizon, store.database_identity(),
                              sweep_at_ms=store.now_ms() - 300_000))
    rows = [_measured(tgt, app, "idle", period_s)]
    fresh: list[uuid.UUID] = []
    _build(app, changes, fresh)
    for did in fresh[: changes // 10]:  # a tenth of the changed ones lose their Redis entry
        drop_scheduled(app, did)
    state = store.load()
    if state is not None:
        store.save(ReconcileState(state.watermark, state.database, state.sweep_cursor,
                                  store.now_ms() - 300_000, state.lap_started_ms,
                                  state.member_cursors, state.laps))
    rows.append(_measured(tgt, app, "changed", period_s))
    for i in range(slices):
        state = store.load()
        if state is not None:
            store.save(ReconcileState(state.watermark, state.database, state.sweep_cursor,
                                      store.now_ms() - 300_000, state.lap_started_ms,
                                      state.member_cursors, state.laps))
        rows.append(_measured(tgt, app, f"slice{i + 1}", period_s))
    runs_per_lap = period_s / 300
    slice_s = sorted(r["seconds"] for r in rows[2:])[len(rows[2:]) // 2] if slices else None
    tgt.cleanup_namespace(app.settings.namespace)
    return {"scenario": "reconcile", "load": load(), "n": n, "changes": changes,
            "period_s": period_s, "build_s": round(build_s, 1),
            "build_per_s": round(n / build_s, 1), "runs": rows,
            "runs_per_lap": runs_per_lap, "slice_s_median": slice_s}


def main(argv: list[str] | None = None) -> None:
    """``python -m escalation.bench.reconcile [--n N] [--changes C] [--slices K]
    [--period-s P]``: run the scenario on a bench database and namespace of its own."""
    ap = argparse.ArgumentParser(prog="python -m escalation.bench.reconcile")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--changes", type=int, default=1000)
    ap.add_argument("--slices", type=int, default=3)
    ap.add_argument("--period-s", type=int, default=21_600)
    args = ap.parse_args(argv)
    tgt = Target.open()
    try:
        result = run(tgt, args.n, args.changes, args.slices, args.period_s)
    finally:
        tgt.close()
    idle, changed = result["runs"][0], result["runs"][1]
    report(result, result["runs"],
           f"{result['n']:,} pending: incremental run with {result['changes']} changed "
           f"{changed['seconds']} s ({changed['redis_commands']} Redis commands, "
           f"{changed['pg_rows_read']:,} PostgreSQL rows read); idle run {idle['seconds']} s; "
           f"sweep slice median {result['slice_s_median']} s "
           f"(~{idle['sweep_rows']:,} rows), {int(result['runs_per_lap'])} slices per "
           f"{result['period_s'] // 3600} h lap")


if __name__ == "__main__":
    main()

"""CPU per escalation of one burst worker on the firing path (docs/performance.md).

N escalations (default 20,000) are enqueued through the service layer, all already due, in a
fresh namespace (Redis keys UNLINKed at the end, never FLUSHDB) and a scratch database of the
bench (created, migrated, dropped). Then ``python -m escalation worker --burst --batch-size B``
(log level INFO) drains them, and the figure is that process's utime + stime
(``RUSAGE_CHILDREN``) minus the same for a burst worker on an empty namespace (interpreter
start-up and wiring), divided by N. Also printed: the redis-server and PostgreSQL backend
CPU over the drain (``/proc/<pid>/stat``; redis-server only when it is a private one:
``--private-redis``, default on). CPU time is far less sensitive to the machine's load than a
rate, but still moves with cache pressure: compare runs made one after the other.

Usage: python tests/benchmarks/worker_cpu.py [--n 20000] [--batch-size 500] [--repeat 1]
Servers: $ESCALATION_DATABASE_URL (else the embedded PostgreSQL).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

from escalation.bench.common import Target, load, new_namespace
from escalation.bench.compare import PrivateRedis, cpu_seconds
from escalation.bench.drain import ENQUEUE_CHUNK, _requests
from escalation.service_layer.enqueue import enqueue_many


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _burst(tgt: Target, ns: str, batch: int, profile: str | None = None) -> tuple[float, float]:
    """Run one burst worker (under ``py-spy record -f raw -o PROFILE`` when given: its CPU
    then includes py-spy's); returns (CPU seconds, wall seconds)."""
    env = tgt.worker_env(ns, f"{ns}-w0", batch_size=batch, log_level="INFO")
    cmd = [sys.executable, "-m", "escalation", "worker", "--burst"]
    if profile:
        cmd = ["py-spy", "record", "-r", "250", "-f", "raw", "-o", profile, "--", *cmd]
    before, t0 = _children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed:\n{proc.stderr[-2000:]}")
    return _children_cpu() - before, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--py-spy", metavar="OUT", help="profile the drain (raw folded stacks)")
    args = ap.parse_args()
    srv = PrivateRedis.start()
    try:
        tgt = Target.open(os.environ.get("ESCALATION_BENCH_DATABASE_URL"), redis_url=srv.url)
        try:
            for _ in range(args.repeat):
                empty = new_namespace()
                base_cpu, _ = _burst(tgt, empty, args.batch_size)
                ns = new_namespace()
                app = tgt.app(ns)
                due_ms = int(app.scheduler.time().timestamp() * 1000) - 1000
                reqs = _requests(args.n, due_ms)
                for i in range(0, args.n, ENQUEUE_CHUNK):
                    enqueue_many(reqs[i:i + ENQUEUE_CHUNK], scheduler=app.scheduler,
                                 store=app.store, ladders=app.ladders, calendars=app.calendars,
                                 default_ladder=app.settings.default_ladder, actor=app.actor)
                start_load = load()
                redis_before = cpu_seconds(srv.proc.pid) or 0.0
                cpu, wall = _burst(tgt, ns, args.batch_size, args.py_spy)
                redis_cpu = (cpu_seconds(srv.proc.pid) or 0.0) - redis_before
                per = (cpu - base_cpu) / args.n * 1e6
                print(f"worker_cpu: N={args.n} B={args.batch_size}: worker {per:.0f} us/esc "
                      f"(burst {cpu:.2f} s - start-up {base_cpu:.2f} s), redis-server "
                      f"{redis_cpu / args.n * 1e6:.0f} us/esc (incl. start-up polls), wall "
                      f"{wall:.1f} s | load {' '.join(map(str, start_load))}", flush=True)
                tgt.cleanup_namespace(ns)
                tgt.cleanup_namespace(empty)
        finally:
            tgt.close()
    finally:
        srv.stop()


if __name__ == "__main__":
    main()

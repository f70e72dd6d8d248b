"""CPU per escalation on the firing path, one step at a time (docs/performance.md).

One run = :func:`escalation.bench.compare.product_round` with W workers (default 1): the
workers start and idle, N escalations (default 20,000) are enqueued through the service layer
due at one instant, and the CPU (``/proc/<pid>/stat`` utime + stime) of the worker
processes, of a private redis-server and of the PostgreSQL backends of the bench's scratch
database is summed from the end of the enqueue to the end of the drain (ledger complete),
then divided by N. Interpreter start-up and the enqueue are outside the window. CPU time is
far less sensitive to the machine's load than a rate, but still moves with cache pressure:
compare runs made one after the other (``--repeat``), e.g. against a worktree of the base
commit (``PYTHONPATH=<base worktree>``).

Usage: python tests/benchmarks/worker_cpu.py [--n 20000] [--workers 1] [--batch-size 500]
       [--repeat 3]
Servers: $ESCALATION_DATABASE_URL (else the embedded PostgreSQL); Redis is private.
"""

from __future__ import annotations

import argparse
import statistics

from escalation.bench.common import Target
from escalation.bench.compare import PrivateRedis, ProductRound, product_round


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    srv = PrivateRedis.start()
    per: list[float] = []
    try:
        tgt = Target.open(redis_url=srv.url)
        try:
            for _ in range(args.repeat):
                r = product_round(ProductRound(args.n, args.workers, args.batch_size, None,
                                               60.0 + args.n / 100), tgt)
                cpu = r["cpu_s"]
                per.append(r["cpu_us_per_item"])
                print(f"worker_cpu: N={args.n} W={args.workers} B={args.batch_size}: "
                      f"{r['cpu_us_per_item']:.0f} us/esc total = worker "
                      f"{cpu['workers'] / args.n * 1e6:.0f} + redis "
                      f"{cpu['redis'] / args.n * 1e6:.0f} + postgres "
                      f"{cpu['postgres'] / args.n * 1e6:.0f}; {r['rate_per_s']:,.0f}/s, ledger "
                      f"{'PASS' if r['ledger_ok'] else 'FAIL'} | load "
                      f"{' '.join(map(str, r['load']))}", flush=True)
        finally:
            tgt.close()
    finally:
        srv.stop()
    print(f"worker_cpu: median {statistics.median(per):.0f} us/esc over {len(per)} runs")


if __name__ == "__main__":
    main()

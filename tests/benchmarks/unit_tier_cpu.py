"""Unit tier CPU benchmark: the CPU seconds of ``pytest tests/unit``, printed with the load.

The unit tier's target is under 10 s of CPU (user + system, the pytest process and every
child it starts), so that it runs in seconds on a developer's machine and in CI
(tests/unit/conftest.py). Each round runs ``python -m pytest tests/unit -q -p no:randomly``
in a fresh process and reads its CPU from ``resource.RUSAGE_CHILDREN``; the wall time and the
load average before and after are printed beside it. With bytecode caches warm (the default:
``PYTHONDONTWRITEBYTECODE`` removed from the child's environment, one warm-up run first) pytest
reuses its rewritten test modules, as on a developer's machine after the first run;
``--cold`` runs as a fresh checkout does: the checkout's ``__pycache__`` folders (under
``escalation/`` and ``tests/``) are removed before each run and ``PYTHONDONTWRITEBYTECODE=1``
writes none, so every project and test module is compiled (and rewritten) each run; the
installed libraries keep the bytecode pip compiled at install.

    python tests/benchmarks/unit_tier_cpu.py [--rounds 3] [--cold]

Exit 0 always: a figure, not a test (docs/testing.md, "The unit tier").
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 10.0


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def remove_checkout_caches() -> None:
    """Remove the ``__pycache__`` folders of the checkout's package and tests (ignored by git,
    rebuilt by any later run that may write bytecode)."""
    for top in ("escalation", "tests"):
        for cache in (ROOT / top).rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)


def run_once(env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, pytest's last line) of one unit-tier run.

    Raises:
        RuntimeError: the tier failed (its output's tail is in the message).
    """
    before, start = _child_cpu(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/unit", "-q", "-p", "no:randomly"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - start, _child_cpu() - before
    if proc.returncode != 0:
        raise RuntimeError(f"the unit tier failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return cpu, wall, proc.stdout.strip().splitlines()[-1]


def main() -> None:
    """Run the unit tier ``--rounds`` times and print CPU and wall per round, min and median."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true",
                        help="as a fresh checkout: no project bytecode cache; no warm-up run")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.cold:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        run_once(env)  # writes the bytecode and pytest's rewritten-module caches
    load = os.getloadavg()
    print(f"cores {os.cpu_count()}, load average before {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}, rounds {args.rounds}, bytecode caches "
          + ("cold (the checkout's removed before each run, none written)" if args.cold
             else "warm"))
    cpus: list[float] = []
    for i in range(args.rounds):
        if args.cold:
            remove_checkout_caches()
        cpu, wall, summary = run_once(env)
        cpus.append(cpu)
        print(f"round {i + 1}: CPU {cpu:.2f} s, wall {wall:.2f} s ({summary})")
    low, mid = min(cpus), statistics.median(cpus)
    verdict = "met" if mid < TARGET_S else "NOT met"
    load = os.getloadavg()
    print(f"CPU min {low:.2f} s, median {mid:.2f} s; target < {TARGET_S:.0f} s: {verdict}; "
          f"load average after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()

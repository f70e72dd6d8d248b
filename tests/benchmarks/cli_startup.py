"""CLI start-up benchmark: the import time of each command's modules, and ``escalation
--help`` wall time, printing figures with the machine's load.

Each profile is the set of modules a command imports before it does any work (the CLI
itself, then what the command imports lazily when it runs: the settings, the wiring in
``bootstrap`` that builds the App, the command's use case). For each, ``python -X importtime
-c "import ..."`` runs ``--rounds`` times in a fresh interpreter; the import time is the sum
of the top-level cumulative times it reports (wall time; the interpreter's own start is not
in it). Beside it, the import's CPU seconds: the child's user + system time
(``resource.RUSAGE_CHILDREN``) minus that of ``python -c pass``. Min and median are printed,
with the load average before and after (``os.getloadavg``): on a loaded 2-core machine the
wall figures grow with the load (waiting for a core), the CPU figures much less.

The children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from their
environment) after one warm-up import of each profile, as an installed package runs (pip
compiles the ``.pyc`` files at install). ``--no-warm-up`` keeps the caller's environment
(with ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__`` yet, every ``escalation`` module
is compiled from source on each run: about a fifth more).

    python tests/benchmarks/cli_startup.py [--rounds 7] [--target-s 0.5] [--no-warm-up]

Exit 0 always: a figure, not a test (docs/performance.md "Current figures").
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

CLI = "escalation.entrypoints.cli"
# what every database command imports when it runs: its settings (cli_common._settings)
# and the wiring that builds the App (bootstrap.build: Redis, SQLAlchemy, psycopg, ...,
# and the audit store build() imports); `db upgrade` builds no App
BASE = (CLI, "escalation.settings", "escalation.bootstrap")
DB = (*BASE, "escalation.adapters.audit_store")
PROFILES: dict[str, tuple[str, ...]] = {
    "--help": (CLI,),
    "status": (*DB, "escalation.service_layer.status"),
    "enqueue": (*DB, "escalation.service_layer.enqueue", "escalation.service_layer.disputes",
                "escalation.service_layer.warnings"),
    "import": (*DB, "escalation.service_layer.importer", "escalation.entrypoints.progress_bars"),
    "worker --burst": (*DB, "escalation.entrypoints.worker"),
    "notify --burst": (*DB, "escalation.service_layer.notify", "escalation.adapters.webhook"),
    "audit show": (*DB, "escalation.service_layer.audit_export",
                   "escalation.entrypoints.render"),
    "report sla": (*DB, "escalation.service_layer.sla_report",
                   "escalation.adapters.report_queries"),
    "db upgrade": (*BASE, "escalation.composition_cli", "alembic.command", "alembic.script"),
}


def child_env(warm: bool) -> dict[str, str]:
    """The children's environment: the caller's, without ``PYTHONDONTWRITEBYTECODE`` when
    ``warm`` (bytecode caches written and read, as in an installed package)."""
    env = dict(os.environ)
    if warm:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bare_cpu_seconds(env: dict[str, str]) -> float:
    """CPU seconds of ``python -c pass`` (the interpreter's start, subtracted below)."""
    before = _child_cpu()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    return _child_cpu() - before


def import_seconds(modules: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of the import of ``modules`` in a fresh interpreter: wall from
    ``-X importtime`` (the sum of the top-level entries' cumulative microseconds), CPU as
    the child's user + system time (the interpreter's start included)."""
    before = _child_cpu()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import " + ", ".join(modules)],
        capture_output=True, text=True, check=True, env=env)
    cpu = _child_cpu() - before
    total = 0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if not name.startswith("  "):  # top level: one space after the bar
            total += int(cumulative)
    return total / 1e6, cpu


def help_wall_seconds(env: dict[str, str]) -> float:
    """Wall seconds of ``escalation --help`` (interpreter start included)."""
    exe = shutil.which("escalation") or ""
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "escalation", "--help"]
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    """Measure every profile and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--target-s", type=float, default=0.5)
    parser.add_argument("--no-warm-up", dest="warm", action="store_false",
                        help="keep the caller's PYTHONDONTWRITEBYTECODE; no warm-up import")
    args = parser.parse_args()
    env = child_env(args.warm)
    if args.warm:  # one import of each profile writes the bytecode caches
        for modules in PROFILES.values():
            subprocess.run([sys.executable, "-c", "import " + ", ".join(modules)],
                           check=True, env=env)
    load_before = os.getloadavg()
    print(f"cores {os.cpu_count()}, load average before {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}, rounds {args.rounds}, bytecode "
          + ("caches warm" if args.warm else
             f"as the caller's (PYTHONDONTWRITEBYTECODE="
             f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})"))
    bare = min(bare_cpu_seconds(env) for _ in range(args.rounds))
    print(f"python -c pass: {bare:.3f} s CPU (subtracted from the CPU figures)")
    print(f"{'command':<16} {'wall min s':>10} {'median s':>9} {'CPU min s':>10} "
          f"{'median s':>9}  target {args.target_s} s of import")
    for name, modules in PROFILES.items():
        runs = [import_seconds(modules, env) for _ in range(args.rounds)]
        walls = sorted(w for w, _ in runs)
        cpus = sorted(max(c - bare, 0.0) for _, c in runs)
        low, mid = walls[0], statistics.median(walls)
        cpu_low, cpu_mid = cpus[0], statistics.median(cpus)
        verdict = ("met" if mid <= args.target_s else
                   "wall min met" if low <= args.target_s else
                   "CPU met (wall over: load)" if cpu_mid <= args.target_s else "NOT met")
        print(f"{name:<16} {low:>10.3f} {mid:>9.3f} {cpu_low:>10.3f} {cpu_mid:>9.3f}  "
              f"{verdict}")
    walls = sorted(help_wall_seconds(env) for _ in range(args.rounds))
    print(f"escalation --help wall: min {walls[0]:.3f} s, median "
          f"{statistics.median(walls):.3f} s (interpreter start included)")
    after = os.getloadavg()
    print(f"load average after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")


if __name__ == "__main__":
    main()

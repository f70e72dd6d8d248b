"""Scenario ``idle``: Redis commands per second issued by idle workers, counted server-side.

Method: a private ``redis-server`` (loopback, a free port, no persistence; see
:class:`escalation.bench.compare.PrivateRedis`) that only this run connects to: W ``escalation
worker`` processes on an empty namespace, and this bench's one client, which sends nothing
between its two ``INFO commandstats`` calls. After a settle time (workers started, their
start-up commands done), the figure is the ``INFO commandstats`` delta over ``seconds``,
minus the bench's own first ``INFO`` (counted in the second reading): every other command on
that server is a worker's, commands run inside Lua scripts included (Redis counts them in
commandstats too). Nothing else of ours, and no other user of the machine, can add to the
count, so no per-client attribution is needed (the former MONITOR attribution lost blocking
commands when another client shared the server). ``--shared-redis`` measures on the
configured server instead: then the delta includes every other client and is an upper bound.

``by_command``: the delta by command (e.g. ZRANGE + BLPOP per poll: the empty claim and the
wait; TIME: the clock re-sync, at most one per 60 s per worker; SET/EVALSHA: the leader
lease; anything else: maintenance).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from escalation.bench.common import Target, WorkerProc, load, new_namespace, wait_started


def _commandstats(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


@dataclass(frozen=True, slots=True)
class IdleRound:
    """One idle measurement (the command of :func:`run`).

    ``seconds``: the measured window, s; ``poll_interval_s``: the workers' poll interval,
    s; ``settle_s``: wait after the workers start, s; ``workers``: idle worker processes;
    ``private``: True when the target's Redis is a server of this run alone (the figure is
    then exact); False on a shared server (an upper bound).
    """

    seconds: float = 10.0
    poll_interval_s: float = 5.0
    settle_s: float = 2.0
    workers: int = 1
    private: bool = True


def run(tgt: Target, cmd: IdleRound) -> dict[str, Any]:
    """Measure ``cmd.workers`` idle workers for ``cmd.seconds``. Returns commands per second
    per worker.

    Raises:
        RuntimeError: a worker did not start.
    """
    seconds, poll_interval_s, settle_s = cmd.seconds, cmd.poll_interval_s, cmd.settle_s
    workers, private = cmd.workers, cmd.private
    ns = new_namespace()
    procs = [WorkerProc.start(tgt.worker_env(ns, f"{ns}-w{i}", poll_interval_s=poll_interval_s,
                                             log_level="INFO"), f"{ns}-w{i}")
             for i in range(workers)]
    client = tgt.redis()
    start_load = load()
    try:
        wait_started(procs)
        time.sleep(settle_s)
        before = _commandstats(client)
        t0 = time.monotonic()
        time.sleep(seconds)
        after = _commandstats(client)
        elapsed = time.monotonic() - t0
        if any(p.proc.poll() is not None for p in procs):
            raise RuntimeError("idle: a worker exited during the window")
    finally:
        for p in procs:
            p.close()
        client.close()
        tgt.cleanup_namespace(ns)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta["info"] = delta.get("info", 0) - 1  # the bench's first INFO
    delta = {k: v for k, v in sorted(delta.items()) if v > 0}
    total = sum(delta.values())
    return {
        "scenario": "idle", "seconds": round(elapsed, 2), "poll_interval_s": poll_interval_s,
        "workers": workers, "private_redis": private, "commands": total,
        "cmds_per_s_per_worker": round(total / elapsed / workers, 3),
        "time_calls_per_min_per_worker": round(delta.get("time", 0) / elapsed * 60 / workers,
                                               2),
        "by_command": delta, "load": start_load,
    }

"""Scenario ``idle``: Redis commands per second issued by one idle worker.

Method: one ``escalation worker`` on an empty namespace, its Redis connections named
``<worker id>`` (``client_name`` in the URL). After a settle time, two counts over
``seconds``:

* ``worker_cmds_per_s`` (exact): a MONITOR connection counts the commands whose client
  address belongs to one of the worker's connections (``CLIENT LIST`` by name);
* ``server_cmds_per_s``: the INFO commandstats delta of the whole server (the issue's
  method), minus the bench's own INFO calls. It includes every other client of the server
  (other tests, other workers) and the commands run inside Lua scripts, so it is an upper
  bound on a shared server and equal to the worker's figure on a quiet one.

``by_command`` breaks the worker's commands down (e.g. ZRANGE + TIME per poll: the empty
claim; BLPOP: the wait; anything else is maintenance / leader work).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import redis

from escalation.bench.common import Target, WorkerProc, load, new_namespace, wait_started


def _commandstats(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _worker_addrs(client: Any, name: str) -> set[str]:
    return {c["addr"] for c in client.client_list() if c.get("name") == name}


def run(  # noqa: PLR0915 - one linear measurement
    tgt: Target, seconds: float = 10.0, poll_interval_s: float = 5.0,
        settle_s: float = 2.0) -> dict[str, Any]:
    """Measure one idle worker for ``seconds``. Returns worker/server commands per second.

    Raises:
        RuntimeError: the worker did not start.
    """
    ns = new_namespace()
    wid = f"{ns}-w0"
    env = tgt.worker_env(ns, wid, poll_interval_s=poll_interval_s)
    sep = "&" if "?" in tgt.redis_url else "?"
    env["ESCALATION_REDIS_URL"] = f"{tgt.redis_url}{sep}client_name={wid}"
    worker = WorkerProc.start(env, wid)
    client = tgt.redis()
    seen: Counter[str] = Counter()
    stop = threading.Event()
    addrs: set[str] = set()
    start_load = load()

    owner = {"worker": False}

    def watch() -> None:
        with client.monitor() as mon:  # type: ignore[no-untyped-call]  # redis-py unannotated
            ready.set()
            while not stop.is_set():
                try:
                    cmd = mon.next_command()
                except (redis.RedisError, OSError):
                    return
                name = str(cmd["command"]).split(" ", 1)[0].upper()
                if cmd.get("client_type") == "lua" or cmd.get("client_address") == "lua":
                    # a script's inner commands follow its EVALSHA line (single-threaded
                    # server): count them for the worker when the script was the worker's
                    if owner["worker"]:
                        seen[f"lua:{name}"] += 1
                    continue
                addr = f"{cmd['client_address']}:{cmd['client_port']}"
                owner["worker"] = addr in addrs
                if owner["worker"]:
                    seen[name] += 1

    ready = threading.Event()
    try:
        wait_started([worker])
        time.sleep(settle_s)
        addrs |= _worker_addrs(client, wid)
        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        ready.wait(5)
        before = _commandstats(client)
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))
            addrs |= _worker_addrs(client, wid)
        after = _commandstats(client)
        elapsed = time.monotonic() - t0
        stop.set()
        client.ping()  # unblocks the monitor reader
        thread.join(5)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        delta["info"] = delta.get("info", 0) - 1  # our own second INFO
        delta["client|list"] = delta.get("client|list", 0) - int(seconds / 0.5 + 1)
        delta = {k: v for k, v in delta.items() if v > 0}
        server_total = sum(delta.values())
        worker_total = sum(seen.values())
    finally:
        worker.close()
        client.close()
        tgt.cleanup_namespace(ns)
    return {
        "scenario": "idle", "seconds": round(elapsed, 2), "poll_interval_s": poll_interval_s,
        "worker_cmds": worker_total,
        "worker_cmds_per_s": round(worker_total / elapsed, 3),
        "by_command": dict(seen),
        "server_cmds_per_s": round(server_total / elapsed, 3),
        "server_by_command": delta,
        "load": start_load,
    }

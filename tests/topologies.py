"""Local Redis test topologies on loopback, from real ``redis-server`` processes.

* ``cluster``: a Redis Cluster of 6 processes (3 primaries + 3 replicas) on ports
  ``7000-7005``, created with ``redis-cli --cluster create ... --cluster-replicas 1``.
* ``sentinel``: one primary (``7100``), one replica (``7101``) and three sentinels
  (``26379-26381``) monitoring the primary under the name ``escalation`` (quorum 2), with a
  short ``down-after-milliseconds`` and ``failover-timeout`` so failover tests finish fast.

Every process runs with ``--save "" --appendonly no`` and keeps its config, log and pid file
under ``$ESCALATION_TOPOLOGY_DIR`` (default ``/tmp/escalation-topologies``). Both commands
are idempotent: ``start`` leaves a healthy running topology alone (and repairs a partly
started one by restarting it); ``stop`` stops only the processes whose pid files it wrote.
The Sentinel set is healthy only when its replica is in sync with the primary the sentinels
name (:func:`sentinel_healthy`; a restarted node is not, until it is demoted and resynced).

Usage (a developer, or ``.ci/run``)::

    python tests/topologies.py start [cluster|sentinel|all]   # prints the URLs
    python tests/topologies.py stop  [cluster|sentinel|all]
    python tests/topologies.py urls  [cluster|sentinel|all]

URLs (see docs/operations.md for the schemes)::

    redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002/
    redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/escalation/0

Tests get them from :func:`topology_test_url` (``ESCALATION_TEST_CLUSTER_URL`` /
``ESCALATION_TEST_SENTINEL_URL`` when set, else these defaults, started on demand): the
``--redis-topology`` option of tests/conftest.py and the failover tests in tests/topology/.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

CLUSTER_PORTS = tuple(range(7000, 7006))
SENTINEL_DATA_PORTS = (7100, 7101)
SENTINEL_PORTS = (26379, 26380, 26381)
SENTINEL_NAME = "escalation"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
HOST = "127.0.0.1"


def base_dir() -> Path:
    """Directory for the topology's configs, logs and pid files."""
    return Path(os.environ.get("ESCALATION_TOPOLOGY_DIR", "/tmp/escalation-topologies"))


def cluster_url() -> str:
    """``redis+cluster://`` URL of the cluster (the three initial primaries as seeds)."""
    return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in CLUSTER_PORTS[:3]) + "/"


def sentinel_url(db: int = 0) -> str:
    """``redis+sentinel://`` URL of the sentinel set, service ``escalation``, DB ``db``."""
    hosts = ",".join(f"{HOST}:{p}" for p in SENTINEL_PORTS)
    return f"redis+sentinel://{hosts}/{SENTINEL_NAME}/{db}"


# --------------------------------------------------------------------------- helpers


def _cli(port: int, *args: str, timeout: float = 10) -> str:
    out = subprocess.run(["redis-cli", "-h", HOST, "-p", str(port), *args],
                         capture_output=True, text=True, timeout=timeout, check=False)
    return out.stdout.strip()


def _answers(port: int) -> bool:
    try:
        return _cli(port, "ping", timeout=3) == "PONG"
    except subprocess.TimeoutExpired:
        return False


def _wait(cond: object, limit_s: float, what: str) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if callable(cond) and cond():
            return
        time.sleep(0.2)
    raise SystemExit(f"topologies: timed out waiting for {what}")


def _pidfile(port: int) -> Path:
    return base_dir() / f"{port}.pid"


def _spawn(port: int, extra: list[str], *, sentinel: bool = False) -> None:
    folder = base_dir() / str(port)
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / ("sentinel.conf" if sentinel else "redis.conf")
    lines = [f"port {port}", f"bind {HOST}", f"dir {folder}", "daemonize yes",
             f"pidfile {_pidfile(port)}", f"logfile {folder / 'server.log'}"]
    if not sentinel:
        lines += ['save ""', "appendonly no"]
    conf.write_text("\n".join(lines + extra) + "\n")
    cmd = ["redis-server", str(conf)] + (["--sentinel"] if sentinel else [])
    subprocess.run(cmd, check=True, timeout=30)


def _kill(port: int) -> None:
    pidfile = _pidfile(port)
    if not pidfile.exists():
        return
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, ValueError):
        pass
    pidfile.unlink(missing_ok=True)
    shutil.rmtree(base_dir() / str(port), ignore_errors=True)


def pid_of(port: int) -> int | None:
    """Pid of the process started on ``port`` (from its pid file), or None."""
    try:
        return int(_pidfile(port).read_text().strip())
    except (OSError, ValueError):
        return None


def crash(port: int) -> None:
    """SIGKILL the process on ``port`` (a failover test's "primary host dies")."""
    pid = pid_of(port)
    if pid is None:
        raise SystemExit(f"topologies: no pid file for port {port}")
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while time.monotonic() < end and _answers(port):
        time.sleep(0.05)


def restart(port: int) -> None:
    """Start the process on ``port`` again from its config file (a crashed cluster node
    rejoins as a replica of its promoted replica; a crashed Sentinel primary is turned into
    a replica of the new primary by the sentinels)."""
    folder = base_dir() / str(port)
    conf = folder / ("sentinel.conf" if port in SENTINEL_PORTS else "redis.conf")
    cmd = ["redis-server", str(conf)] + (["--sentinel"] if port in SENTINEL_PORTS else [])
    subprocess.run(cmd, check=True, timeout=30)
    _wait(lambda: _answers(port), 30, f"port {port} to answer again")


def replication(port: int) -> dict[str, str]:
    """``INFO replication`` of ``port`` as a dict (empty when the port does not answer)."""
    out: dict[str, str] = {}
    for line in _cli(port, "info", "replication", timeout=3).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def role(port: int) -> str:
    """``master``/``slave`` from ``INFO replication`` (empty when the port does not answer)."""
    return replication(port).get("role", "")


def in_sync_replica_of(replica: int, primary: int) -> bool:
    """True when ``replica`` replicates ``primary`` with its link up and no full sync in
    progress: it holds the primary's data, not an empty or stale data set of its own."""
    info = replication(replica)
    return (info.get("role") == "slave" and info.get("master_port") == str(primary)
            and info.get("master_link_status") == "up"
            and info.get("master_sync_in_progress") == "0")


# --------------------------------------------------------------------------- cluster


def cluster_healthy() -> bool:
    """True when every cluster port answers and ``CLUSTER INFO`` says ok with 6 nodes."""
    if not all(_answers(p) for p in CLUSTER_PORTS):
        return False
    info = _cli(CLUSTER_PORTS[0], "cluster", "info")
    return "cluster_state:ok" in info and "cluster_known_nodes:6" in info


def start_cluster() -> None:
    """Start (or keep) the 6-process cluster; create it with ``redis-cli --cluster create``."""
    if cluster_healthy():
        return
    stop_cluster()
    busy = [p for p in CLUSTER_PORTS if _answers(p)]
    if busy:
        raise SystemExit(f"topologies: ports {busy} answer but are not ours; stop them first")
    for port in CLUSTER_PORTS:
        _spawn(port, ["cluster-enabled yes", f"cluster-config-file nodes-{port}.conf",
                      "cluster-node-timeout 2000", "cluster-replica-validity-factor 0",
                      "appendonly no"])
    _wait(lambda: all(_answers(p) for p in CLUSTER_PORTS), 30, "cluster processes")
    subprocess.run(["redis-cli", "--cluster", "create",
                    *(f"{HOST}:{p}" for p in CLUSTER_PORTS),
                    "--cluster-replicas", "1", "--cluster-yes"],
                   check=True, timeout=60, capture_output=True)
    _wait(cluster_healthy, 60, "cluster_state:ok")


def cluster_primary_of(key: str) -> int:
    """Port of the primary that currently owns ``key``'s slot."""
    slot = int(_cli(CLUSTER_PORTS[0], "cluster", "keyslot", key) or
               _cli(CLUSTER_PORTS[1], "cluster", "keyslot", key))
    for port in CLUSTER_PORTS:
        if not _answers(port):
            continue
        for line in _cli(port, "cluster", "nodes").splitlines():
            parts = line.split()
            if "master" not in parts[2] or "fail" in parts[2]:
                continue
            for rng in parts[8:]:
                lo, _, hi = rng.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    return int(parts[1].split("@")[0].rsplit(":", 1)[1])
        break
    raise SystemExit(f"topologies: no primary owns slot {slot}")


def stop_cluster() -> None:
    """Stop the cluster processes started by :func:`start_cluster` (by pid file)."""
    for port in CLUSTER_PORTS:
        _kill(port)


# --------------------------------------------------------------------------- sentinel


def sentinel_healthy() -> bool:
    """True when primary, replica and three sentinels answer, the sentinels agree on a
    primary with one replica, that primary says ``master`` and the other data node is an
    in-sync replica of it (:func:`in_sync_replica_of`).

    The sentinels' own view is not enough: they list a crashed primary as a replica from the
    moment of the failover, so when it is restarted (empty: no persistence; or with the stale
    RDB of its last full sync) it counts as "one replica" at once, although it is a
    *primary* of its own for the ~10 s until a sentinel demotes it, then a replica in full
    resync (5 s diskless-sync delay, then the transfer). Promoted in that window -- a failover
    test started right after the previous one's heal --, it would serve its empty or stale
    data set as the new primary.
    """
    if not all(_answers(p) for p in (*SENTINEL_DATA_PORTS, *SENTINEL_PORTS)):
        return False
    reply = _cli(SENTINEL_PORTS[0], "sentinel", "master", SENTINEL_NAME)
    if not ("num-other-sentinels\n2" in reply and "num-slaves\n1" in reply):
        return False
    try:
        primary = sentinel_primary_port()
    except SystemExit:
        return False
    if primary not in SENTINEL_DATA_PORTS or role(primary) != "master":
        return False
    return all(in_sync_replica_of(p, primary) for p in SENTINEL_DATA_PORTS if p != primary)


def start_sentinel() -> None:
    """Start (or keep) primary 7100, replica 7101 and sentinels 26379-26381."""
    if sentinel_healthy():
        return
    if all(_answers(p) for p in (*SENTINEL_DATA_PORTS, *SENTINEL_PORTS)):
        try:  # e.g. a restarted primary the sentinels are about to demote and resync
            _wait(sentinel_healthy, 30, "the sentinel set to settle")
            return
        except SystemExit:
            pass
    stop_sentinel()
    busy = [p for p in (*SENTINEL_DATA_PORTS, *SENTINEL_PORTS) if _answers(p)]
    if busy:
        raise SystemExit(f"topologies: ports {busy} answer but are not ours; stop them first")
    primary, replica = SENTINEL_DATA_PORTS
    _spawn(primary, [])
    _spawn(replica, [f"replicaof {HOST} {primary}"])
    for port in SENTINEL_PORTS:
        _spawn(port, [f"sentinel monitor {SENTINEL_NAME} {HOST} {primary} 2",
                      f"sentinel down-after-milliseconds {SENTINEL_NAME} {DOWN_AFTER_MS}",
                      f"sentinel failover-timeout {SENTINEL_NAME} {FAILOVER_TIMEOUT_MS}",
                      f"sentinel parallel-syncs {SENTINEL_NAME} 1"], sentinel=True)
    _wait(sentinel_healthy, 60, "sentinels to see the primary, the replica and each other")


def sentinel_primary_port() -> int:
    """Port of the current primary as the sentinels report it."""
    for port in SENTINEL_PORTS:
        reply = _cli(port, "sentinel", "get-master-addr-by-name", SENTINEL_NAME, timeout=3)
        lines = reply.splitlines()
        if len(lines) == 2 and lines[1].isdigit():
            return int(lines[1])
    raise SystemExit("topologies: no sentinel names a primary")


def sentinel_replica_flags(port: int) -> str:
    """The sentinels' ``flags`` for the replica on ``port`` (e.g. ``slave``,
    ``s_down,slave``), or "" when no sentinel lists it."""
    lines = _cli(SENTINEL_PORTS[0], "sentinel", "replicas", SENTINEL_NAME, timeout=3).splitlines()
    records: list[dict[str, str]] = [{}]
    for key, value in zip(lines[::2], lines[1::2], strict=False):
        if key == "name" and records[-1]:
            records.append({})
        records[-1][key] = value
    for rec in records:
        if rec.get("port") == str(port):
            return rec.get("flags", "")
    return ""


def stop_sentinel() -> None:
    """Stop the sentinel set's processes started by :func:`start_sentinel` (by pid file)."""
    for port in (*SENTINEL_PORTS, *SENTINEL_DATA_PORTS):
        _kill(port)


def topology_test_url(kind: str, db: int = 9) -> str:
    """URL of the local ``cluster`` or ``sentinel`` topology for tests (DB ``db`` for
    sentinel): ``ESCALATION_TEST_CLUSTER_URL`` / ``ESCALATION_TEST_SENTINEL_URL`` when set,
    else the defaults above, started here (idempotent) when they are not healthy."""
    env = os.environ.get(f"ESCALATION_TEST_{kind.upper()}_URL")
    if env:
        return env
    if kind == "cluster":
        start_cluster()
        return cluster_url()
    start_sentinel()
    return sentinel_url(db)


# --------------------------------------------------------------------------- CLI

_START = {"cluster": start_cluster, "sentinel": start_sentinel}
_STOP = {"cluster": stop_cluster, "sentinel": stop_sentinel}
_URL = {"cluster": cluster_url, "sentinel": sentinel_url}


def main(argv: list[str]) -> int:
    """``start|stop|urls [cluster|sentinel|all]``; exit 2 on bad usage."""
    if len(argv) not in (1, 2) or argv[0] not in ("start", "stop", "urls"):
        print(__doc__.split("Usage")[1].split("URLs")[0].strip(), file=sys.stderr)
        return 2
    which = argv[1] if len(argv) == 2 else "all"
    if which not in ("cluster", "sentinel", "all"):
        print(f"topologies: unknown topology {which!r} (cluster, sentinel, all)", file=sys.stderr)
        return 2
    names = ["cluster", "sentinel"] if which == "all" else [which]
    if argv[0] != "urls" and shutil.which("redis-server") is None:
        print("topologies: redis-server is not installed", file=sys.stderr)
        return 1
    for name in names:
        if argv[0] == "start":
            _START[name]()
        elif argv[0] == "stop":
            _STOP[name]()
            continue
        print(f"{name}={_URL[name]()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

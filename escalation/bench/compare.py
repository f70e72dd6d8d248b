"""Scenario ``compare``: the product's drain beside BullMQ's, in the same run.

Method (docs/performance.md, "Method"; the first figures: CHANGELOG.md, "Side by side with BullMQ"):

* One private ``redis-server`` (loopback, free port, no persistence, default config) started
  for the run and stopped at the end, so its CPU and command counts are this benchmark's
  alone; both systems use it, one after the other. PostgreSQL is the configured (or
  embedded) server with a database of the run's own (see :mod:`escalation.bench.common`).
* BullMQ: ``npm install bullmq ioredis`` into a scratch directory at run time (nothing of BullMQ is
  kept in the repository), then ``node bullmq_side.mjs`` (this package's script): one
  producer adds N jobs all due at one instant D (``addBulk`` with delays; D = now + 3 s +
  1 ms per job unless ``--lead-s``, ``removeOnComplete``), W worker processes
  (``--concurrency`` each) complete them with an empty processor, or with ``--bullmq-job
  escalate`` one that moves each job to the next tier's delayed queue and appends a
  review-stream entry, as an escalation's apply does; lag = host time at the
  ``completed`` event - D.
* Product: W ``escalation worker`` processes (batch ``--batch-size``, log level INFO as in
  production: no per-decision log line), N escalations enqueued through the service layer
  due at D; done when the ``applied`` counter reaches N (polled every 5 ms) and then the
  ledger holds N PROMOTED rows of this run (polled every 20 ms); lag = the
  ledger row's ``recorded_at`` - D (the durable decision; apply follows it by one Redis
  round trip). Afterwards the ledger must hold exactly N PROMOTED rows for N disputes.
* Rounds are interleaved (product first in odd rounds, BullMQ first in even ones), so a
  change of the machine's load hits both sides alike; the ratio of one round is the figure
  that holds on a busy machine.
* Throughput = N / (last completion - D). CPU per escalation = the sum over the worker
  processes, the private redis-server and (product) the PostgreSQL backends connected to
  the run's database, of utime + stime from ``/proc/<pid>/stat`` between the end of the
  enqueue (workers already started and idle) and the end of the drain, divided by N. A
  backend that appears during the window counts from its start; one that exits during it
  is lost (``pg_backends_lost``). PostgreSQL's shared background processes (WAL writer,
  checkpointer) are not counted: the server is shared with other users of the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from escalation.bench.common import (
    Target,
    WorkerProc,
    load,
    new_namespace,
    percentile,
    wait_started,
)
from escalation.bench.drain import ENQUEUE_CHUNK, _applied, _enqueue_rate, _requests
from escalation.service_layer.enqueue import enqueue_many

CLK_TCK = os.sysconf("SC_CLK_TCK")
BULLMQ_SCRIPT = "bullmq_side.mjs"


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of process ``pid`` (all its threads) in seconds; None when it is gone.

    Source: fields 14 and 15 of ``/proc/<pid>/stat`` (proc(5)), in clock ticks.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _cpu_map(pids: set[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        value = cpu_seconds(pid)
        if value is not None:
            out[pid] = value
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateRedis:
    """A ``redis-server`` of this run: loopback only, no persistence, in a scratch dir."""

    proc: subprocess.Popen[bytes]
    port: int
    workdir: str

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, executable: str = "redis-server") -> PrivateRedis:
        """Start it and wait for PING (10 s).

        Raises:
            RuntimeError: no redis-server executable, or it did not answer.
        """
        exe = shutil.which(executable) or shutil.which("valkey-server")
        if exe is None:
            raise RuntimeError("compare: no redis-server (or valkey-server) on PATH")
        workdir = tempfile.mkdtemp(prefix="esc-compare-redis-")
        port = _free_port()
        proc = subprocess.Popen(  # noqa: S603 - fixed argv, the machine's redis-server
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = cls(proc, port, workdir)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with contextlib.suppress(redis.RedisError):
                if redis.Redis(port=port, socket_timeout=1).ping():
                    return server
            time.sleep(0.05)
        server.stop()
        raise RuntimeError("compare: private redis-server did not answer within 10 s")

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 10 s) and remove the scratch dir."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def bullmq_dir(version: str | None = None) -> Iterator[Path]:
    """A scratch directory with ``npm install bullmq[@version] ioredis`` done (BullMQ 6 loads
    ioredis as an optional peer) and our script copied.

    Raises:
        RuntimeError: node/npm missing or the install failed (with npm's output tail).
    """
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        raise RuntimeError("compare: node and npm are needed for the BullMQ side")
    tmp = Path(tempfile.mkdtemp(prefix="esc-compare-bullmq-"))
    try:
        (tmp / "package.json").write_text('{"name": "esc-compare", "private": true}\n')
        spec = f"bullmq@{version}" if version else "bullmq"
        proc = subprocess.run(  # noqa: S603 - fixed argv: npm install of one package
            [npm, "install", "--no-audit", "--no-fund", spec, "ioredis"], cwd=tmp,
                              capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"compare: npm install {spec} failed:\n{proc.stderr[-2000:]}")
        script = resources.files("escalation.bench").joinpath(BULLMQ_SCRIPT)
        (tmp / BULLMQ_SCRIPT).write_text(script.read_text())
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bullmq_version(workdir: Path) -> str:
    """The installed BullMQ version (its package.json)."""
    meta = json.loads((workdir / "node_modules" / "bullmq" / "package.json").read_text())
    return str(meta["version"])


def _summary(n: int, due_ms: int, lags: list[float], last_ms: int | None,
             cpu_s: float, parts: dict[str, float]) -> dict[str, Any]:
    span_ms = (last_ms - due_ms) if last_ms is not None else None
    return {
        "rate_per_s": round(n / (span_ms / 1000), 1) if span_ms and span_ms > 0 else None,
        "span_ms": span_ms,
        "lag_ms": {"p50": percentile(lags, 50), "p99": percentile(lags, 99),
                   "max": max(lags) if lags else None},
        "cpu_us_per_item": round(cpu_s / n * 1e6, 1),
        "cpu_s": {k: round(v, 2) for k, v in parts.items()},
    }


def _sum_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def _node(workdir: Path, *args: str) -> list[str]:
    node = shutil.which("node") or "node"
    return [node, str(workdir / BULLMQ_SCRIPT), *args]


def _start_bullmq_workers(workdir: Path, url: str, prefix: str, queue: str,
                          concurrency: int, outs: list[Path],
                          job: str = "empty") -> list[subprocess.Popen[bytes]]:
    procs = [subprocess.Popen(  # noqa: S603 - our script, fixed argv
        _node(workdir, "worker", url, prefix, queue, str(concurrency), str(out), job),
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for out in outs]
    for p in procs:
        line = p.stdout.readline() if p.stdout else b""
        if b"ready" not in line:
            err = p.stderr.read()[-1000:] if p.stderr else b""
            raise RuntimeError(f"compare: BullMQ worker did not start: {err!r}")
    return procs


def _bullmq_left(client: redis.Redis, prefix: str, queue: str) -> int:
    """Jobs not yet completed: delayed + wait + active + prioritized + paused."""
    pipe = client.pipeline(transaction=False)
    for kind in ("delayed", "prioritized"):
        pipe.zcard(f"{prefix}:{queue}:{kind}")
    for kind in ("wait", "active", "paused"):
        pipe.llen(f"{prefix}:{queue}:{kind}")
    return sum(int(x) for x in pipe.execute())


def _collect(procs: list[subprocess.Popen[bytes]], outs: list[Path]) -> tuple[
        list[float], int | None]:
    """SIGTERM each node worker; read its lags and last completion time."""
    lags: list[float] = []
    last: int | None = None
    for p, out in zip(procs, outs, strict=True):
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        data = json.loads(out.read_text())
        if data.get("failed"):
            raise RuntimeError(f"compare: {data['failed']} BullMQ job(s) failed, first: "
                               f"{data.get('first_error')}")
        lags.extend(float(x) for x in data["lags"])
        if data["count"]:
            last = max(last or 0, int(data["last_ms"]))
    return lags, last


def bullmq_round(workdir: Path, redis_srv: PrivateRedis, n: int, workers: int,
                 concurrency: int, lead_s: float, timeout_s: float,
                 job: str = "empty") -> dict[str, Any]:
    """One BullMQ drain of ``n`` jobs due at one instant with ``workers`` node processes.

    ``job``: ``"empty"`` (an empty processor) or ``"escalate"`` (the processor adds the job
    to the next tier's delayed queue and appends a review-stream entry, as a product
    escalation's apply does; see ``bullmq_side.mjs``). The drain is over when the first
    queue is empty; the next tier's delayed jobs stay until the round's keys are deleted.

    Raises:
        RuntimeError: a worker or the producer failed; TimeoutError: not drained in time.
    """
    prefix = new_namespace() + "-bull"
    queue = "escalations"
    client = redis.Redis(port=redis_srv.port, decode_responses=True)
    outs = [workdir / f"{prefix}-w{i}.json" for i in range(workers)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs = _start_bullmq_workers(workdir, redis_srv.url, prefix, queue, concurrency, outs,
                                      job)
        start_load = load()
        sec, usec = client.time()
        due_ms = int(sec) * 1000 + int(usec) // 1000 + int(lead_s * 1000)
        prod = subprocess.run(  # noqa: S603 - our script, fixed argv
            _node(workdir, "produce", redis_srv.url, prefix, queue, str(n), str(due_ms)),
            cwd=workdir, capture_output=True, text=True, timeout=timeout_s, check=False)
        if prod.returncode != 0:
            raise RuntimeError(f"compare: BullMQ producer failed: {prod.stderr[-1000:]}")
        done_ms = int(json.loads(prod.stdout.strip().splitlines()[-1])["done_ms"])
        pids = {p.pid for p in procs}
        before = _cpu_map(pids | {redis_srv.proc.pid})
        end = time.monotonic() + lead_s + timeout_s
        while _bullmq_left(client, prefix, queue) > 0:
            if time.monotonic() > end:
                raise TimeoutError("compare: BullMQ queue not drained in time")
            time.sleep(0.005)
        after = _cpu_map(pids | {redis_srv.proc.pid})
        lags, last = _collect(procs, outs)
        worker_cpu = sum(after[p] - before.get(p, 0.0) for p in pids if p in after)
        redis_cpu = after.get(redis_srv.proc.pid, 0.0) - before.get(redis_srv.proc.pid, 0.0)
        result = _summary(n, due_ms, lags, last, worker_cpu + redis_cpu,
                          {"workers": worker_cpu, "redis": redis_cpu})
        if job == "escalate":
            result["next_tier_jobs"] = int(client.zcard(f"{prefix}:{queue}-senior:delayed"))
            result["review_entries"] = int(client.xlen(f"{prefix}:{queue}:review"))
        result.update({"system": "bullmq", "job": job, "completed": len(lags),
                       "on_time_start": done_ms < due_ms, "load": start_load})
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        with contextlib.suppress(redis.RedisError):
            batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for i in range(0, len(batch), 500):
                client.unlink(*batch[i:i + 500])
        client.close()


def _promoted(conn: sa.Connection, namespace: str) -> int:
    """PROMOTED ledger rows written by this run's workers (autocommit read)."""
    value = conn.execute(sa.text(
        "SELECT count(*) FROM escalation_audit WHERE event = 'PROMOTED' AND actor LIKE :pfx"),
        {"pfx": f"{namespace}-w%"}).scalar_one()
    conn.commit()  # a fresh snapshot for the next read
    return int(value)


def _pg_backends(conn: sa.Connection) -> set[int]:
    rows = conn.execute(sa.text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()")).all()
    conn.commit()
    return {int(r[0]) for r in rows}


def product_round(tgt: Target, n: int, workers: int, batch_size: int,
                  lead_s: float | None, timeout_s: float) -> dict[str, Any]:
    """One product drain (see the module docstring); figures as :func:`bullmq_round`'s.

    Raises:
        RuntimeError: a worker failed; TimeoutError: not drained in time.
    """
    ns = new_namespace()
    app = tgt.app(ns)
    client = tgt.redis()
    lead = lead_s if lead_s is not None else 2.0 + 1.5 * n / _enqueue_rate(app)
    procs = [WorkerProc.start(tgt.worker_env(ns, f"{ns}-w{i}", batch_size=batch_size,
                                             poll_interval_s=5, log_level="INFO"),
                              f"{ns}-w{i}")
        for i in range(workers)]
    engine = tgt.engine()
    redis_pid = int(client.info("server")["process_id"])
    try:
        wait_started(procs)  # started and idle before the due instant is chosen
        start_load = load()
        due_ms = int(app.scheduler.time().timestamp() * 1000) + int(lead * 1000)
        reqs = _requests(n, due_ms)
        for start in range(0, n, ENQUEUE_CHUNK):
            enqueue_many(reqs[start : start + ENQUEUE_CHUNK], scheduler=app.scheduler,
                         store=app.store, ladders=app.ladders, calendars=app.calendars,
                         default_ladder=app.settings.default_ladder, actor=app.actor)
        enq_done_ms = int(app.scheduler.time().timestamp() * 1000)
        worker_pids = {p.proc.pid for p in procs}
        with engine.connect() as conn:
            pg_before_set = _pg_backends(conn)
            before = _cpu_map(worker_pids | pg_before_set | {redis_pid})
            end = time.monotonic() + lead + timeout_s
            while _applied(client, ns) < n:
                if time.monotonic() > end:
                    raise TimeoutError(f"compare: only {_applied(client, ns)} of {n} applied")
                if any(p.proc.poll() is not None for p in procs):
                    raise RuntimeError("compare: a worker exited early")
                time.sleep(0.005)
            # ``applied`` also counts re-applied stale claims (a lease that ran out under load
            # lets a second worker claim a member the first one then records): done is when
            # the ledger holds n decisions
            while _promoted(conn, ns) < n:
                if time.monotonic() > end:
                    raise TimeoutError(f"compare: only {_promoted(conn, ns)} of {n} recorded")
                time.sleep(0.02)
            last_ms = int(time.time() * 1000)
            pg_after_set = _pg_backends(conn)
            after = _cpu_map(worker_pids | pg_after_set | {redis_pid})
            pg_after_set = {p for p in pg_after_set if p in after}
        for p in procs:
            p.stop()
        worker_cpu = _sum_delta(before, {p: after[p] for p in worker_pids if p in after})
        pg_cpu = _sum_delta(before, {p: after[p] for p in pg_after_set})
        redis_cpu = after.get(redis_pid, 0.0) - before.get(redis_pid, 0.0)
        lags, ledger_rows, distinct = _ledger_lags(engine, ns, due_ms)
        result = _summary(n, due_ms, lags, last_ms, worker_cpu + pg_cpu + redis_cpu,
                          {"workers": worker_cpu, "redis": redis_cpu, "postgres": pg_cpu})
        result.update({
            "system": "escalation", "batch_size": batch_size, "lead_s": round(lead, 2),
            "on_time_start": enq_done_ms < due_ms, "ledger_rows": ledger_rows,
            "ledger_ok": ledger_rows == n and distinct == n,
            "pg_backends_lost": len(pg_before_set - pg_after_set), "load": start_load,
        })
        return result
    finally:
        for p in procs:
            p.close()
        engine.dispose()
        client.close()
        tgt.cleanup_namespace(ns)


def _ledger_lags(engine: sa.Engine, namespace: str, due_ms: int) -> tuple[list[float], int, int]:
    """recorded_at - due (ms) of this run's PROMOTED rows; row count; distinct disputes."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT dispute_id, (extract(epoch FROM recorded_at) * 1000)::bigint "
                    "FROM escalation_audit WHERE event = 'PROMOTED' AND actor LIKE :pfx"),
            {"pfx": f"{namespace}-w%"},
        ).all()
    lags = [float(int(r[1]) - due_ms) for r in rows]
    return lags, len(rows), len({r[0] for r in rows})


def run(tgt: Target, redis_srv: PrivateRedis, workdir: Path, n: int, workers: int,
        rounds: int, batch_size: int, concurrency: int,
        lead_s: float | None = None, bullmq_job: str = "empty") -> dict[str, Any]:
    """Interleaved rounds of both systems; returns every round and the median ratio.

    ``bullmq_job``: what BullMQ's processor does (:func:`bullmq_round`'s ``job``).

    Returns:
        ``{"scenario": "compare", "bullmq_version", "n", "workers", "rounds": [{"escalation":
        {...}, "bullmq": {...}, "ratio": product/bullmq throughput}], "median": {...},
        "ok": every product ledger check passed, "load"}``.
    """
    timeout = 60.0 + n / 200
    out_rounds: list[dict[str, Any]] = []
    for i in range(rounds):
        order = ("escalation", "bullmq") if i % 2 == 0 else ("bullmq", "escalation")
        got: dict[str, Any] = {}
        for system in order:
            if system == "escalation":
                got[system] = product_round(tgt, n, workers, batch_size, lead_s, timeout)
            else:
                got[system] = bullmq_round(workdir, redis_srv, n, workers, concurrency,
                                           lead_s if lead_s is not None else 5.0, timeout,
                                           bullmq_job)
        p, b = got["escalation"]["rate_per_s"], got["bullmq"]["rate_per_s"]
        got["ratio"] = round(p / b, 3) if p and b else None
        got["order"] = list(order)
        out_rounds.append(got)

    def med(system: str, key: str) -> float | None:
        vals = [r[system][key] for r in out_rounds if r[system][key] is not None]
        return round(statistics.median(vals), 1) if vals else None

    ratios = [r["ratio"] for r in out_rounds if r["ratio"] is not None]
    median = {
        "escalation_rate": med("escalation", "rate_per_s"),
        "bullmq_rate": med("bullmq", "rate_per_s"),
        "escalation_cpu_us": med("escalation", "cpu_us_per_item"),
        "bullmq_cpu_us": med("bullmq", "cpu_us_per_item"),
        "ratio": round(statistics.median(ratios), 3) if ratios else None,
    }
    return {"scenario": "compare", "bullmq_version": bullmq_version(workdir), "n": n,
            "workers": workers, "batch_size": batch_size, "concurrency": concurrency,
            "bullmq_job": bullmq_job,
            "rounds": out_rounds, "median": median,
            "ok": all(r["escalation"]["ledger_ok"] for r in out_rounds), "load": load()}


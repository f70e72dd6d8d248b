"""Scenario ``compare``: the product's drain beside BullMQ's, in the same run.

Method (docs/performance.md, "Method"; current figures: docs/performance.md, "Drain beside BullMQ"):

* One private ``redis-server`` (loopback, free port, no persistence, default config) started
  for the run and stopped at the end, so its CPU and command counts are this benchmark's
  alone; both systems use it, one after the other. PostgreSQL is the configured (or
  embedded) server with a database of the run's own (see :mod:`escalation.bench.common`).
* BullMQ: ``npm install bullmq ioredis pg`` into a scratch directory at run time (nothing of
  BullMQ is kept in the repository), then ``node bullmq_side.mjs`` (this package's script):
  one producer adds N jobs all due at one instant D (``addBulk`` with delays; D = now + 5 s
  unless ``--lead-s``, ``removeOnComplete``), W worker processes (``--concurrency`` each)
  complete them; lag = host time at the ``completed`` event - D. What the processor does is
  the job (``--bullmq-job``, one or more per round):

  - ``audit``: the user's real alternative to the product. The processor writes one audit
    row per job into a table of its own (:data:`AUDIT_TABLE_DDL`: a bigserial key, the job,
    the dispute, the decision and its times, one index on the dispute) with one INSERT per
    job through a ``pg`` Pool (``--bullmq-pg-pool`` connections per worker process, opened
    before the due instant), autocommit, as a BullMQ user would write it. The table lives in
    a scratch database of BullMQ's own (``escbench_<hex>_bullmq`` on the same PostgreSQL
    server, created for the run and dropped at its end, or kept under the name given by
    ``--keep-audit-database``); it is created before each round and dropped after it (kept
    with a kept database), once the bench has checked it holds exactly one row per job
    (``audit_rows``, ``audit_distinct_jobs``). It does not also move the job to the next
    tier: that is the ``escalate`` job's work, so ``audit`` is a lower bound on what the
    alternative costs.
  - ``empty``: an empty processor (no work at all: a ceiling for BullMQ).
  - ``escalate``: the processor moves each job to the next tier's delayed queue and appends
    a review-stream entry, as an escalation's apply does (Redis only, no record).
* Product: W ``escalation worker`` processes (batch ``--batch-size``, log level INFO as in
  production: no per-decision log line), N escalations enqueued through the service layer
  due at D; done when the ``applied`` counter reaches N (polled every 5 ms) and then the
  ledger holds N PROMOTED rows of this run (polled every 20 ms); lag = the
  ledger row's ``recorded_at`` - D (the durable decision; apply follows it by one Redis
  round trip). Afterwards the ledger must hold exactly N PROMOTED rows for N disputes.
* Rounds are interleaved: the product first then each BullMQ job in the order given in odd
  rounds, the reverse in even ones, so a change of the machine's load hits every side alike
  and the first job given (the headline, ``audit`` by default) always runs next to the
  product; the ratio of one round (product rate / BullMQ rate, per job) is the figure that
  holds on a busy machine.
* Throughput = N / (last completion - D). CPU per escalation = the sum over the worker
  processes, the private redis-server and (product) the PostgreSQL backends connected to
  the run's database, of utime + stime from ``/proc/<pid>/stat`` between the end of the
  enqueue (workers already started and idle) and the end of the drain, divided by N;
  BullMQ's ``audit`` job counts the PostgreSQL backends of its own database the same way. A
  backend that appears during the window counts from its start; one that exits during it
  is lost (``pg_backends_lost``). PostgreSQL's shared background processes (WAL writer,
  checkpointer) are not counted: the server is shared with other users of the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
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
from escalation.bootstrap import core_ports_for
from escalation.domain.errors import InvalidInput
from escalation.service_layer.enqueue import EnqueueMany, enqueue_many

CLK_TCK = os.sysconf("SC_CLK_TCK")
BULLMQ_SCRIPT = "bullmq_side.mjs"
BULLMQ_JOBS = ("audit", "empty", "escalate")
"""What BullMQ's processor can do (``--bullmq-job``); see the module docstring."""
PG_POOL_DEFAULT = 10
"""Connections of the ``audit`` job's ``pg`` Pool per worker process: pg's default ``max``."""
AUDIT_TABLE_DDL = (
    "CREATE TABLE {table} ("
    " id bigserial PRIMARY KEY,"
    " job_id text NOT NULL,"
    " dispute_id text NOT NULL,"
    " event text NOT NULL,"
    " from_tier text,"
    " to_tier text,"
    " due_at timestamptz NOT NULL,"
    " recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
    " worker text NOT NULL,"
    " details jsonb NOT NULL DEFAULT '{{}}')",
    "CREATE INDEX ix_{table}_dispute ON {table} (dispute_id)",
)
"""The audit table a BullMQ user would keep: one row per decision, looked up by dispute."""


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


@dataclass
class AuditDatabase:
    """BullMQ's scratch database for the ``audit`` job: created on the bench's PostgreSQL
    server for one run and dropped at its end, or kept with its tables (:func:`audit_database`).

    Attributes:
        url: SQLAlchemy (psycopg) URL of the database.
        scratch: a small engine on it (BullMQ's database, not the App's): tables, row
            counts and the backends' pids.
        kept: the database and its audit tables outlive the run.
    """

    url: str
    scratch: sa.Engine
    kept: bool = False

    @property
    def name(self) -> str:
        """The database's name (``escbench_<hex>_bullmq`` unless kept under a given name)."""
        return str(sa.make_url(self.url).database)

    @property
    def node_url(self) -> str:
        """The same database as a ``postgresql://`` URL for node's ``pg`` (password kept)."""
        return sa.make_url(self.url).set(drivername="postgresql").render_as_string(
            hide_password=False)

    def create_table(self, table: str) -> None:
        """CREATE the audit table ``table`` (:data:`AUDIT_TABLE_DDL`) and its index."""
        with self.scratch.begin() as conn:
            for ddl in AUDIT_TABLE_DDL:
                conn.exec_driver_sql(ddl.format(table=table))

    def drop_table(self, table: str) -> None:
        """DROP the audit table ``table`` if it exists (kept: left as it is)."""
        if self.kept:
            return
        with self.scratch.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


@contextlib.contextmanager
def audit_database(admin_url: str, keep: str | None = None) -> Iterator[AuditDatabase]:
    """Create ``escbench_<hex>_bullmq`` on the server of ``admin_url``, yield it, drop it.

    ``keep``: create it under this name instead and keep it, with every round's audit table
    (refused when the database exists: a bench never writes into a database it did not
    create).

    Raises:
        InvalidInput: ``keep`` is not a plain lower-case name, or the server refused CREATE
        DATABASE (it exists, or no privilege).
    """
    name = keep or f"escbench_{uuid.uuid4().hex[:8]}_bullmq"
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise InvalidInput(f"--keep-audit-database: {name!r} is not a plain lower-case "
                           "database name", field="--keep-audit-database")
    admin = sa.create_engine(sa.make_url(admin_url), isolation_level="AUTOCOMMIT")
    try:
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        except sa.exc.ProgrammingError as exc:
            raise InvalidInput(
                f"cannot create BullMQ's audit database {name!r}: "
                f"{str(exc.orig).strip().splitlines()[0]}",
                field="--keep-audit-database" if keep else None) from None
        url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        db = AuditDatabase(url, sa.create_engine(url, pool_size=1, max_overflow=0),
                           kept=keep is not None)
        try:
            yield db
        finally:
            db.scratch.dispose()
            if not db.kept:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@contextlib.contextmanager
def bullmq_dir(version: str | None = None) -> Iterator[Path]:
    """A scratch directory with ``npm install bullmq[@version] ioredis pg`` done (BullMQ 6
    loads ioredis as an optional peer; ``pg`` is the ``audit`` job's client) and our script
    copied.

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
            [npm, "install", "--no-audit", "--no-fund", spec, "ioredis", "pg"], cwd=tmp,
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
             parts: dict[str, float]) -> dict[str, Any]:
    """The figures of one drain; its CPU is the sum of ``parts`` (seconds per side)."""
    cpu_s = sum(parts.values())
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


@dataclass
class _AuditSide:
    """The ``audit`` job's PostgreSQL side of one round: its table and a connection that
    lists the backends of its database (its own excluded)."""

    db: AuditDatabase
    table: str
    pool: int
    conn: sa.Connection

    def backends(self) -> set[int]:
        """Pids of the backends connected to the audit database now."""
        return _pg_backends(self.conn)


@contextlib.contextmanager
def _audit_side(db: AuditDatabase, table: str, pool: int) -> Iterator[_AuditSide]:
    """Create ``table`` in ``db``, yield the round's side, then drop the table (unless
    ``db`` is kept)."""
    try:
        db.create_table(table)
        with db.scratch.connect() as conn:
            yield _AuditSide(db, table, pool, conn)
    finally:
        db.drop_table(table)


@dataclass(frozen=True)
class _BullQueue:
    """One round's BullMQ queue: the node side's directory, the Redis URL, the round's key
    prefix and the queue's name."""

    workdir: Path
    url: str
    prefix: str
    queue: str

    def argv(self, command: str, *args: str) -> list[str]:
        """The node command line of ``bullmq_side.mjs`` ``command`` on this queue."""
        return _node(self.workdir, command, self.url, self.prefix, self.queue, *args)


def _start_bullmq_workers(bq: _BullQueue, concurrency: int, outs: list[Path],
                          job: str = "empty", audit: _AuditSide | None = None,
                          ) -> list[subprocess.Popen[bytes]]:
    """Start one node worker per ``outs`` file; wait for each one's ``ready`` line.

    ``audit``: the ``audit`` job's table and pool size; the database URL goes in the
    environment (``BENCH_PG_URL``), not the argv.

    Raises:
        RuntimeError: a worker did not start (every worker started is killed).
    """
    extra: list[str] = []
    env = dict(os.environ)
    if audit is not None:
        extra = [audit.table, str(audit.pool)]
        env["BENCH_PG_URL"] = audit.db.node_url
    procs = [subprocess.Popen(  # noqa: S603 - our script, fixed argv
        bq.argv("worker", str(concurrency), str(out), job, *extra),
        cwd=bq.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for out in outs]
    for p in procs:
        line = p.stdout.readline() if p.stdout else b""
        if b"ready" not in line:
            _kill(procs)
            err = p.stderr.read()[-1000:] if p.stderr else b""
            raise RuntimeError(f"compare: BullMQ worker did not start: {err!r}")
    return procs


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every process of ``procs`` still running and reap it."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _bullmq_left(client: redis.Redis, prefix: str, queue: str) -> int:
    """Jobs not yet completed: delayed + wait + active + prioritized + paused."""
    pipe = client.pipeline(transaction=False)
    for kind in ("delayed", "prioritized"):
        pipe.zcard(f"{prefix}:{queue}:{kind}")
    for kind in ("wait", "active", "paused"):
        pipe.llen(f"{prefix}:{queue}:{kind}")
    return sum(int(x) for x in pipe.execute())


def _wait_drained(client: redis.Redis, prefix: str, queue: str,
                  procs: list[subprocess.Popen[bytes]], seconds: float) -> None:
    """Poll (5 ms) until no job of ``queue`` is left.

    Raises:
        TimeoutError: not drained within ``seconds``; RuntimeError: a worker exited.
    """
    end = time.monotonic() + seconds
    while _bullmq_left(client, prefix, queue) > 0:
        if time.monotonic() > end:
            raise TimeoutError("compare: BullMQ queue not drained in time")
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("compare: a BullMQ worker exited early")
        time.sleep(0.005)


def _unlink_prefix(client: redis.Redis, prefix: str) -> None:
    """UNLINK every key under ``prefix:`` (batches of 500) and close ``client``."""
    with contextlib.suppress(redis.RedisError):
        batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(batch), 500):
            client.unlink(*batch[i:i + 500])
    client.close()


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


def _produce(bq: _BullQueue, n: int, due_ms: int, timeout_s: float) -> int:
    """Run the producer: ``n`` jobs due at ``due_ms``. Returns when it was done (epoch ms).

    Raises:
        RuntimeError: the producer failed.
    """
    prod = subprocess.run(  # noqa: S603 - our script, fixed argv
        bq.argv("produce", str(n), str(due_ms)),
        cwd=bq.workdir, capture_output=True, text=True, timeout=timeout_s, check=False)
    if prod.returncode != 0:
        raise RuntimeError(f"compare: BullMQ producer failed: {prod.stderr[-1000:]}")
    return int(json.loads(prod.stdout.strip().splitlines()[-1])["done_ms"])


@dataclass(frozen=True)
class BullmqRound:
    """One BullMQ drain (:func:`bullmq_round`): ``n`` jobs due ``lead_s`` seconds from now
    at one instant, ``workers`` node processes of ``concurrency`` each, drained within
    ``timeout_s`` seconds after that instant; ``job`` the processor (:data:`BULLMQ_JOBS`);
    ``pg_pool``: connections of the ``audit`` job's ``pg`` Pool per process."""

    n: int
    workers: int
    concurrency: int
    lead_s: float
    timeout_s: float
    job: str = "empty"
    pg_pool: int = PG_POOL_DEFAULT


@dataclass(frozen=True)
class ProductRound:
    """One product drain (:func:`product_round`): ``n`` escalations due at one instant,
    ``workers`` worker processes claiming ``batch_size`` at a time; ``lead_s`` seconds from
    now to the due instant (None: 2 + 1.5x the measured enqueue time); drained within
    ``timeout_s`` seconds after it."""

    n: int
    workers: int
    batch_size: int
    lead_s: float | None
    timeout_s: float


def bullmq_round(cmd: BullmqRound, workdir: Path, redis_srv: PrivateRedis,
                 audit_db: AuditDatabase | None = None) -> dict[str, Any]:
    """One BullMQ drain of ``cmd.n`` jobs due at one instant with ``cmd.workers`` node
    processes (the node side in ``workdir``, its queue on ``redis_srv``).

    ``cmd.job``: ``"empty"`` (an empty processor), ``"escalate"`` (the processor adds the job
    to the next tier's delayed queue and appends a review-stream entry, as a product
    escalation's apply does) or ``"audit"`` (one INSERT of an audit row per job into a table
    of ``audit_db`` through a ``pg`` Pool of ``pg_pool`` connections per process; the
    table is created here and dropped at the end, and the CPU of ``audit_db``'s backends is
    counted); see ``bullmq_side.mjs``. The drain is over when the first queue is empty; the
    next tier's delayed jobs stay until the round's keys are deleted.

    Raises:
        ValueError: ``audit`` without ``audit_db``; RuntimeError: a worker or the producer
        failed; TimeoutError: not drained in time.
    """
    n, job, lead_s, timeout_s, pg_pool = cmd.n, cmd.job, cmd.lead_s, cmd.timeout_s, cmd.pg_pool
    if job == "audit" and audit_db is None:
        raise ValueError("bullmq_round: the audit job needs audit_db")
    prefix = new_namespace() + "-bull"
    queue = "escalations"
    bq = _BullQueue(workdir, redis_srv.url, prefix, queue)
    client = redis.Redis(port=redis_srv.port, decode_responses=True)
    outs = [workdir / f"{prefix}-w{i}.json" for i in range(cmd.workers)]
    redis_pid = redis_srv.proc.pid
    with contextlib.ExitStack() as stack:
        stack.callback(_unlink_prefix, client, prefix)
        audit = (stack.enter_context(_audit_side(
            audit_db, f"bullmq_audit_{prefix.split('-')[1]}", pg_pool))
            if audit_db is not None and job == "audit" else None)
        procs = _start_bullmq_workers(bq, cmd.concurrency, outs, job, audit)
        stack.callback(_kill, procs)
        start_load = load()
        sec, usec = client.time()
        due_ms = int(sec) * 1000 + int(usec) // 1000 + int(lead_s * 1000)
        done_ms = _produce(bq, n, due_ms, timeout_s)
        pids = {p.pid for p in procs}
        pg_before_set = audit.backends() if audit else set()
        before = _cpu_map(pids | pg_before_set | {redis_pid})
        _wait_drained(client, prefix, queue, procs, lead_s + timeout_s)
        pg_after_set = audit.backends() if audit else set()
        after = _cpu_map(pids | pg_after_set | {redis_pid})
        lags, last = _collect(procs, outs)
        parts = {"workers": _sum_delta(before, {p: after[p] for p in pids if p in after}),
                 "redis": after.get(redis_pid, 0.0) - before.get(redis_pid, 0.0)}
        if audit:
            pg_after_set = {p for p in pg_after_set if p in after}
            parts["postgres"] = _sum_delta(before, {p: after[p] for p in pg_after_set})
        result = _summary(n, due_ms, lags, last, parts)
        if audit:
            audit.conn.commit()
            rows, jobs = audit.conn.execute(sa.text(
                f"SELECT count(*), count(DISTINCT job_id) FROM {audit.table}")).one()
            audit.conn.commit()
            result.update({"audit_table": audit.table, "audit_rows": int(rows),
                           "audit_distinct_jobs": int(jobs),
                           "audit_ok": rows == jobs == n, "pg_pool": pg_pool,
                           "pg_backends": len(pg_after_set),
                           "pg_backends_lost": len(pg_before_set - pg_after_set)})
        if job == "escalate":
            result["next_tier_jobs"] = int(client.zcard(f"{prefix}:{queue}-senior:delayed"))
            result["review_entries"] = int(client.xlen(f"{prefix}:{queue}:review"))
        result.update({"system": "bullmq", "job": job, "completed": len(lags),
                       "on_time_start": done_ms < due_ms, "load": start_load})
        return result


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


def product_round(cmd: ProductRound, tgt: Target) -> dict[str, Any]:
    """One product drain (see the module docstring) on ``tgt``; figures as
    :func:`bullmq_round`'s.

    Raises:
        RuntimeError: a worker failed; TimeoutError: not drained in time.
    """
    n, workers, batch_size, lead_s, timeout_s = (cmd.n, cmd.workers, cmd.batch_size,
                                                 cmd.lead_s, cmd.timeout_s)
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
            enqueue_many(
                EnqueueMany(requests=reqs[start : start + ENQUEUE_CHUNK], actor=app.actor,
                            default_ladder=app.settings.default_ladder),
                core_ports_for(app),
            )
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
        result = _summary(n, due_ms, lags, last_ms,
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


@dataclass(frozen=True)
class CompareOptions:
    """What one ``escalation bench compare`` run measures.

    Attributes:
        n: escalations (and jobs per BullMQ job) due at one instant, per round.
        workers: worker processes on each side.
        rounds: interleaved rounds; each runs the product and every job of ``bullmq_jobs``.
        batch_size: the product's batch size (1-500).
        concurrency: BullMQ's concurrency per worker process.
        lead_s: seconds from now to the due instant (None: product 2 + 1.5x the measured
            enqueue time, BullMQ 5 s).
        bullmq_jobs: BullMQ processors (:data:`BULLMQ_JOBS`), the headline first.
        pg_pool: connections of the ``audit`` job's ``pg`` Pool per worker process.
        keep_audit_database: keep BullMQ's audit database under this name, with every
            round's table (None: a scratch database, dropped at the end).
    """

    n: int
    workers: int
    rounds: int
    batch_size: int
    concurrency: int
    lead_s: float | None = None
    bullmq_jobs: tuple[str, ...] = ("audit", "empty")
    pg_pool: int = PG_POOL_DEFAULT
    keep_audit_database: str | None = None


def round_order(index: int, jobs: tuple[str, ...]) -> list[str]:
    """Sides of round ``index`` (0-based) in run order: ``escalation`` then ``bullmq:<job>``
    in the order given for even indexes, the reverse for odd ones (the first job always runs
    next to the product)."""
    order = ["escalation", *(f"bullmq:{job}" for job in jobs)]
    return order if index % 2 == 0 else order[::-1]


def run(tgt: Target, redis_srv: PrivateRedis, workdir: Path,
        opts: CompareOptions) -> dict[str, Any]:
    """Interleaved rounds of the product and each BullMQ job; every round and the medians.

    Returns:
        ``{"scenario": "compare", "bullmq_version", "n", "workers", "bullmq_jobs", "rounds":
        [{"escalation": {...}, "bullmq": {job: {...}}, "ratio": {job: product/BullMQ
        throughput}, "order": [...]}], "median": {"escalation_rate", "escalation_cpu_us",
        "bullmq": {job: {"rate", "cpu_us", "ratio", "ratio_min"}}}, "ok": every product
        ledger check and every audit-table check passed, "audit_ok", "audit_database" (its
        name; dropped by now unless kept), "load"}``.
    """
    timeout = 60.0 + opts.n / 200
    bull_lead = opts.lead_s if opts.lead_s is not None else 5.0
    out_rounds: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        audit_db = (stack.enter_context(audit_database(tgt.admin_url,
                                                           opts.keep_audit_database))
                    if "audit" in opts.bullmq_jobs else None)
        audit_db_name = audit_db.name if audit_db else None
        for i in range(opts.rounds):
            order = round_order(i, opts.bullmq_jobs)
            got: dict[str, Any] = {"bullmq": {}}
            for side in order:
                if side == "escalation":
                    got[side] = product_round(ProductRound(
                        opts.n, opts.workers, opts.batch_size, opts.lead_s, timeout), tgt)
                else:
                    job = side.split(":", 1)[1]
                    got["bullmq"][job] = bullmq_round(BullmqRound(
                        opts.n, opts.workers, opts.concurrency, bull_lead, timeout, job,
                        opts.pg_pool), workdir, redis_srv, audit_db)
            p = got["escalation"]["rate_per_s"]
            got["ratio"] = {job: (round(p / b["rate_per_s"], 3) if p and b["rate_per_s"]
                                  else None) for job, b in got["bullmq"].items()}
            got["order"] = order
            out_rounds.append(got)

    def med(values: list[float | None], digits: int = 1) -> float | None:
        vals = [v for v in values if v is not None]
        return round(statistics.median(vals), digits) if vals else None

    median: dict[str, Any] = {
        "escalation_rate": med([r["escalation"]["rate_per_s"] for r in out_rounds]),
        "escalation_cpu_us": med([r["escalation"]["cpu_us_per_item"] for r in out_rounds]),
        "bullmq": {},
    }
    for job in opts.bullmq_jobs:
        ratios = [r["ratio"][job] for r in out_rounds if r["ratio"][job] is not None]
        median["bullmq"][job] = {
            "rate": med([r["bullmq"][job]["rate_per_s"] for r in out_rounds]),
            "cpu_us": med([r["bullmq"][job]["cpu_us_per_item"] for r in out_rounds]),
            "ratio": med(ratios, 3), "ratio_min": min(ratios) if ratios else None,
        }
    audit_ok = (all(r["bullmq"]["audit"]["audit_ok"] for r in out_rounds)
                if "audit" in opts.bullmq_jobs else None)
    return {"scenario": "compare", "bullmq_version": bullmq_version(workdir), "n": opts.n,
            "workers": opts.workers, "batch_size": opts.batch_size,
            "concurrency": opts.concurrency, "bullmq_jobs": list(opts.bullmq_jobs),
            "pg_pool": opts.pg_pool, "rounds": out_rounds, "median": median,
            "ok": all(r["escalation"]["ledger_ok"] for r in out_rounds) and audit_ok is not False,
            "audit_ok": audit_ok, "audit_database": audit_db_name, "load": load()}

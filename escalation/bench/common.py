"""Shared machinery of ``escalation bench``: an isolated target, worker processes, figures.

Isolation (never touches anyone else's data):

* Redis: a fresh namespace ``bench-<hex>`` per run; its keys (all carrying the hash tag
  ``{bench-<hex>:<shard>}``) are deleted at the end with ``SCAN`` + ``UNLINK`` in batches.
  Never FLUSHDB.
* PostgreSQL: a database ``escbench_<hex>`` created on the configured server (or on the
  server of ``--database-url``, which only names the server and credentials), migrated to
  head and dropped at the end. A benchmark never writes into a database it did not create:
  the ledger is append-only, so rows written there could never be removed, and its pending
  escalations would be fired by the next worker. If the server refuses CREATE DATABASE the
  run is refused (one line, exit 2).
* Embedded servers: when the bench had to start the embedded Valkey/PostgreSQL (no
  configured URLs, neither running before), it stops them at the end.

Figures are plain dicts (JSON-ready): every scenario returns ``{"scenario": ..., "load":
[1, 5, 15 min load averages], ...}``; :func:`report` prints a table, the JSON and one
``SUMMARY <scenario>: ...`` line ready to paste into docs/performance.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import redis
import sqlalchemy as sa

from escalation import composition_bench as cb
from escalation.bootstrap import App, build, resolve_urls
from escalation.composition_cli import upgrade_database_url
from escalation.domain.errors import InvalidInput
from escalation.settings import Settings, get_settings

UNLINK_BATCH = 500


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return float(ordered[rank - 1])


def load() -> list[float]:
    """1/5/15-minute load averages (``uptime``), rounded: the noise context of a figure."""
    return [round(x, 2) for x in os.getloadavg()]


def new_namespace() -> str:
    """A fresh namespace ``bench-<8 hex>`` (matches the settings pattern)."""
    return f"bench-{uuid.uuid4().hex[:8]}"


def delete_namespace(client: redis.Redis, namespace: str) -> int:
    """UNLINK every key of ``namespace`` (SCAN by hash tag, batches of 500). Returns count."""
    batch: list[str] = []
    total = 0
    for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
        batch.append(str(key))
        if len(batch) >= UNLINK_BATCH:
            total += int(client.unlink(*batch))
            batch = []
    if batch:
        total += int(client.unlink(*batch))
    return total


@dataclass
class Target:
    """Where a bench run writes: server URLs plus its own database (maybe created here).

    Attributes:
        redis_url: Redis URL (configured, else the embedded server).
        database_url: the bench database (SQLAlchemy psycopg URL).
        created_db: name of the database this run created (dropped by :meth:`close`).
    """

    redis_url: str
    database_url: str
    admin_url: str
    created_db: str | None = None
    started_home: Path | None = None
    apps: list[App] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, database_url: str | None = None, redis_url: str | None = None,
             keep_database: str | None = None) -> Target:
        """Resolve servers like the CLI does; create + migrate a bench database unless given.

        ``keep_database``: create the bench database under this name instead of a random one
        and keep it after the run (refused when it exists: a bench never writes into a
        database it did not create).

        Raises:
            EscalationError subclasses when no server can be reached / started;
            SchemaNotAtHead when a given ``database_url`` is not at the Alembic head.
        """
        base = get_settings(redis_url=redis_url,
                            database_url=cb.database_url(database_url) if database_url else None)
        started: Path | None = None
        if not (base.redis_url and base.database_url):
            from escalation.composition_cli import embedded_status

            before = embedded_status(base.home)
            if not before["valkey"]["running"] and not before["postgres"]["running"]:
                started = base.home
        urls = resolve_urls(base)
        name = keep_database or f"escbench_{uuid.uuid4().hex[:8]}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise InvalidInput(f"--keep-database: {name!r} is not a plain lower-case "
                               "database name")
        admin = sa.make_url(urls.database_url)
        engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        except sa.exc.ProgrammingError as exc:
            _stop_started(started)
            raise InvalidInput(
                f"cannot create a bench database on {admin.render_as_string()}: "
                f"{str(exc.orig).strip().splitlines()[0]}; a benchmark never writes into a "
                "database it did not create") from None
        finally:
            engine.dispose()
        tgt = cls(urls.redis_url, "", urls.database_url, created_db=name, started_home=started)
        try:
            url = admin.set(database=name).render_as_string(hide_password=False)
            tgt.database_url = url
            upgrade_database_url(url)
        except BaseException:
            tgt.close()
            raise
        if keep_database:
            tgt.created_db = None  # kept: close() leaves it
        return tgt

    def settings(self, namespace: str, **overrides: Any) -> Settings:
        """Settings for one bench namespace on this target."""
        return get_settings(redis_url=self.redis_url, database_url=self.database_url,
                            namespace=namespace, **overrides)

    def app(self, namespace: str | None = None, **overrides: Any) -> App:
        """A wired App on a fresh (or given) namespace; closed and cleaned by :meth:`close`."""
        ns = namespace or new_namespace()
        if ns not in self.namespaces:
            self.namespaces.append(ns)
        built = build(self.settings(ns, **overrides), actor=f"{ns}-client")
        self.apps.append(built)
        return built

    def redis(self) -> redis.Redis:
        """A client (decode_responses) on the target Redis (adapters/redis_client URLs)."""
        return cb.redis_client(self.redis_url)  # one server, a Cluster or a Sentinel primary

    def worker_env(self, namespace: str, worker_id: str, **settings: Any) -> dict[str, str]:
        """Environment for ``python -m escalation worker`` on this target and namespace."""
        env = dict(os.environ)
        env.update({
            "ESCALATION_REDIS_URL": self.redis_url,
            "ESCALATION_DATABASE_URL": self.database_url,
            "ESCALATION_NAMESPACE": namespace,
            "ESCALATION_WORKER_ID": worker_id,
            "ESCALATION_LOG_FORMAT": "json",
            # the drain and precision figures come from the per-decision events (DEBUG)
            "ESCALATION_LOG_LEVEL": "DEBUG",
        })
        for key, value in settings.items():
            env[f"ESCALATION_{key.upper()}"] = str(value)
        return env

    def cleanup_namespace(self, namespace: str) -> None:
        """Delete the keys of one namespace now (long runs free memory between cases)."""
        client = self.redis()
        try:
            delete_namespace(client, namespace)
        finally:
            client.close()
        if namespace in self.namespaces:
            self.namespaces.remove(namespace)

    def close(self) -> None:
        """Close apps, delete bench namespaces, drop the database this run created."""
        for built in self.apps:
            with contextlib.suppress(Exception):
                built.close()
        self.apps.clear()
        for ns in list(self.namespaces):
            self.cleanup_namespace(ns)
        if self.created_db:
            engine = sa.create_engine(sa.make_url(self.admin_url), isolation_level="AUTOCOMMIT")
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql(
                        f'DROP DATABASE IF EXISTS "{self.created_db}" WITH (FORCE)')
            finally:
                engine.dispose()
            self.created_db = None
        _stop_started(self.started_home)
        self.started_home = None

    def engine(self) -> sa.Engine:
        """A small engine on the bench database (caller disposes)."""
        return cb.small_engine(self.database_url)


def _stop_started(home: Path | None) -> None:
    """Stop the embedded servers under ``home`` if this bench run started them."""
    if home is not None:
        from escalation.composition_cli import stop_embedded

        stop_embedded(home)


@contextlib.contextmanager
def target(database_url: str | None = None, redis_url: str | None = None,
           keep_database: str | None = None) -> Iterator[Target]:
    """:meth:`Target.open` ... :meth:`Target.close` as a context manager."""
    tgt = Target.open(database_url, redis_url, keep_database)
    try:
        yield tgt
    finally:
        tgt.close()


def append_handle(log: IO[bytes]) -> IO[bytes]:
    """A second, append-only handle on ``log``'s file, to give a child process as its output.

    A child handed ``log`` itself shares its file offset with the parent: a parent that seeks
    back to read while the child writes moves the child's write position too, and the child
    then overwrites lines already written (events silently lost). Opening the file again
    through ``/proc/self/fd`` gives the child its own offset and ``O_APPEND``, so every write
    lands at the end whatever the parent reads. Linux only (like the embedded servers). The
    caller closes the returned handle once the child has been started.
    """
    return open(f"/proc/self/fd/{log.fileno()}", "ab")


def same_tree(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the directory holding this process's ``escalation`` package first on
    ``PYTHONPATH``: the workers run the code of the bench that measures them (an A/B run
    with ``PYTHONPATH=<base tree>`` measures the base's workers)."""
    import escalation

    root = str(Path(escalation.__file__).resolve().parent.parent)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return {**env, "PYTHONPATH": os.pathsep.join([root, *rest])}


@dataclass
class WorkerProc:
    """A ``python -m escalation worker`` subprocess logging JSON to a temporary file."""

    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    worker_id: str

    @classmethod
    def start(cls, env: dict[str, str], worker_id: str) -> WorkerProc:
        """Start one worker (output to a temp file, so a full pipe never blocks it) on the
        same source tree as this process (:func:`same_tree`)."""
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        with append_handle(log) as out:
            # -P: the working directory stays off sys.path (-m puts it first, ahead of
            # PYTHONPATH), so a bench started inside another checkout does not run its code
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "escalation", "worker"],
                env=same_tree(env), stdout=out, stderr=subprocess.STDOUT,
            )
        return cls(proc, log, worker_id)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """JSON log records written so far (optionally only those with ``event == name``)."""
        self.log.flush()
        self.log.seek(0)
        found: list[dict[str, Any]] = []
        for line in self.log.read().splitlines():
            if not line.startswith(b"{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if name is None or rec.get("event") == name:
                found.append(rec)
        self.log.seek(0, os.SEEK_END)
        return found

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, wait (SIGKILL after ``timeout_s``); returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def keep_log(self, reason: str) -> Path:
        """Copy this worker's log (a temporary file, lost on close) to a file that stays:
        ``<tmp>/escalation-bench-logs/<worker id>-<UTC stamp>.log`` (directory 0700, file
        0600), headed by ``reason``. Returns its path. Called when a run fails, so the
        evidence of a late or missing firing survives."""
        out_dir = Path(tempfile.gettempdir()) / "escalation-bench-logs"
        out_dir.mkdir(mode=0o700, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = out_dir / f"{self.worker_id}-{stamp}.log"
        self.log.flush()
        self.log.seek(0)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(f"# {reason}\n".encode())
            fh.write(self.log.read())
        self.log.seek(0, os.SEEK_END)
        return path

    def close(self) -> None:
        """Stop if running and close the log file."""
        self.stop()
        self.log.close()


def wait_started(workers: Sequence[WorkerProc], timeout_s: float = 60.0) -> None:
    """Wait until every worker logged ``worker.started``.

    Raises:
        RuntimeError: a worker exited or did not start within ``timeout_s`` (with its output).
    """
    end = time.monotonic() + timeout_s
    pending = list(workers)
    while pending:
        for w in list(pending):
            if w.events("worker.started"):
                pending.remove(w)
            elif w.proc.poll() is not None or time.monotonic() > end:
                w.log.seek(0)
                tail = w.log.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"worker {w.worker_id} did not start:\n{tail}")
        time.sleep(0.05)


def fmt(value: Any) -> str:
    """Short human form of a figure for tables and summary lines."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def report(result: dict[str, Any], rows: list[dict[str, Any]], summary: str,
           *, json_only: bool = False) -> None:
    """Print a table of ``rows``, the JSON of ``result`` and ``SUMMARY <scenario>: <summary>``."""
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=True)
    if not json_only and rows:
        table = Table(title=f"bench {result['scenario']} (load {result.get('load')})")
        for col in rows[0]:
            table.add_column(col)
        for row in rows:
            table.add_row(*(fmt(v) for v in row.values()))
        console.print(table)
    print(json.dumps(result, default=str))
    print(f"SUMMARY {result['scenario']}: {summary} | load {' '.join(map(str, result['load']))}")
    sys.stdout.flush()

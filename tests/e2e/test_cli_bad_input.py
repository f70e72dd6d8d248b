"""Bad input: a clear one-line error, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from escalation.domain.errors import InvalidInput, UnknownTier
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from tests.helpers import run_cli

GOOD_HASH = "ab" * 32


def assert_nothing_written(app: Any, did: str) -> None:
    from escalation.domain.escalation import parse_dispute_id

    try:
        parsed = parse_dispute_id(did)
    except InvalidInput:
        return
    assert app.store.get(parsed) is None
    assert app.scheduler.payload(parsed) is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--due-at", "2026-01-01T10:00:00"], "timezone-aware"),
        (["--materiality", "NaN"], "finite"),
        (["--materiality", "-5.00"], "negative"),
        (["--materiality", "1e20"], "no exponent"),
        (["--materiality", "1" + "0" * 16], "integer digits"),
        (["--tier", "nonexistent"], "unknown tier"),
        (["--source-hash", "f" * 200], "at most 128"),
        (["--due-at", "yesterday"], "ISO-8601"),
    ],
)
def test_enqueue_bad_input_exits_2_with_one_line_and_writes_nothing(
    app: Any, cli_env: dict[str, str], args: list[str], needle: str
) -> None:
    did = str(uuid.uuid4())
    base = {"--dispute-id": did, "--source-hash": GOOD_HASH, "--materiality": "10.00",
            "--due-at": "2026-01-01T10:00:00+00:00"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [x for kv in base.items() for x in kv]
    res = run_cli(cli_env, "enqueue", *flat)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1
    assert_nothing_written(app, did)


def test_opened_at_in_the_future_beyond_clock_skew_is_refused(
    app: Any, cli_env: dict[str, str]
) -> None:
    from datetime import timedelta

    did = str(uuid.uuid4())
    far = (app.scheduler.time() + timedelta(days=3 * 365)).isoformat()
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                  "--opened-at", far)
    assert res.returncode == 2, res.stderr
    assert "is in the future" in res.stderr and "clock skew" in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1
    assert_nothing_written(app, did)
    # within the skew allowance (a sender's clock a minute ahead) it is accepted
    near = (app.scheduler.time() + timedelta(minutes=1)).isoformat()
    ok = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                 "--opened-at", near)
    assert ok.returncode == 0, ok.stderr


def test_non_uuid_dispute_id_is_refused(app: Any, cli_env: dict[str, str]) -> None:
    res = run_cli(cli_env, "enqueue", "--dispute-id", "12345", "--source-hash", GOOD_HASH,
                  "--due-at", "2026-01-01T10:00:00+00:00")
    assert res.returncode == 2 and "UUID" in res.stderr and "Traceback" not in res.stderr


def test_python_api_refuses_float_money_and_naive_datetime(app: Any) -> None:
    from datetime import datetime

    ports = CorePorts(app.scheduler, app.store, app.ladders, app.calendars)
    did = uuid.uuid4()
    with pytest.raises(InvalidInput, match="float"):
        enqueue_on_breach(EnqueueOne(EnqueueRequest(did, 12.5, GOOD_HASH,
                                                    due_at=app.scheduler.time()),
                                     "t", "dispute_review"), ports)
    with pytest.raises(InvalidInput, match="timezone-aware"):
        enqueue_on_breach(EnqueueOne(EnqueueRequest(did, Decimal("1.00"), GOOD_HASH,
                                                    due_at=datetime(2026, 1, 1)),
                                     "t", "dispute_review"), ports)
    with pytest.raises(UnknownTier):
        enqueue_on_breach(EnqueueOne(EnqueueRequest(did, Decimal("1.00"), GOOD_HASH, tier="vip",
                                                    due_at=app.scheduler.time()),
                                     "t", "dispute_review"), ports)
    assert app.store.get(did) is None and app.scheduler.payload(did) is None


def test_out_of_range_config_is_refused_at_start_naming_the_parameter(
    cli_env: dict[str, str]
) -> None:
    res = run_cli(cli_env, "worker", "--burst", "--batch-size", "900")
    assert res.returncode == 2
    assert "batch_size" in res.stderr and "1-500" in res.stderr
    # a flag is named as the flag the user typed, not as the environment variable
    assert "error: invalid configuration: --batch-size: " in res.stderr
    assert "ESCALATION_BATCH_SIZE" not in res.stderr
    env = dict(cli_env, ESCALATION_LOCK_TTL_S="2")
    res = run_cli(env, "worker", "--burst")
    assert res.returncode == 2 and "lock_ttl_s" in res.stderr and "5-300" in res.stderr
    assert "ESCALATION_LOCK_TTL_S (lock_ttl_s)" in res.stderr


def test_import_with_a_bad_row_imports_nothing_unless_skip_invalid(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    csv_file = tmp_path / "d.csv"
    csv_file.write_text(
        "id,opened,amount,tier\n"
        f"{ids[0]},2024-01-02,10.00,standard\n"
        f"{ids[1]},not-a-date,10.00,standard\n"
        f"{ids[2]},2024-01-02,12.00,vip\n"
    )
    args = ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened",
            "--materiality-column", "amount", "--tier-column", "tier"]
    res = run_cli(cli_env, *args)
    assert res.returncode == 2
    assert f"{csv_file}:3:" in res.stderr and f"{csv_file}:4:" in res.stderr
    assert "Traceback" not in res.stderr
    for did in ids:
        assert_nothing_written(app, did)
    res = run_cli(cli_env, *args, "--skip-invalid")
    assert res.returncode == 0, res.stderr
    assert "1 enqueued" in res.stdout
    from escalation.domain.escalation import parse_dispute_id

    assert app.store.get(parse_dispute_id(ids[0])) is not None
    assert_nothing_written(app, ids[1])
    assert_nothing_written(app, ids[2])


def test_import_refuses_a_blank_amount_cell_unless_a_default_amount_is_given(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    from escalation.domain.escalation import parse_dispute_id

    ids = [str(uuid.uuid4()) for _ in range(3)]
    csv_file = tmp_path / "d.csv"
    csv_file.write_text("id,opened,amount\n"
                        f"{ids[0]},2024-01-02,10.00\n{ids[1]},2024-01-02,\n"
                        f"{ids[2]},2024-01-02, \n")
    args = ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened",
            "--materiality-column", "amount", "--tier", "standard"]
    res = run_cli(cli_env, *args)
    assert res.returncode == 2
    for line in (3, 4):
        assert (f"{csv_file}:{line}: materiality: empty cell in column 'amount'; set "
                "default_materiality in the mapping") in res.stderr
    assert "2 bad row(s); nothing imported" in res.stderr
    for did in ids:
        assert_nothing_written(app, did)
    res = run_cli(cli_env, *args, "--skip-invalid")
    assert res.returncode == 0, res.stderr
    assert "1 enqueued" in res.stdout and "2 skipped as invalid" in res.stdout
    assert_nothing_written(app, ids[1])
    assert_nothing_written(app, ids[2])
    res = run_cli(cli_env, *args, "--default-materiality", "25.00")
    assert res.returncode == 0, res.stderr
    assert "2 enqueued, 1 already enqueued" in res.stdout
    for did in ids[1:]:
        got = app.store.get(parse_dispute_id(did))
        assert got is not None and got[0].materiality.amount == Decimal("25.00")


def test_a_csv_saved_by_a_spreadsheet_with_a_utf8_bom_imports(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    # Excel's "CSV UTF-8" starts the file with a byte-order mark; the first header cell must
    # still be "id", not "\ufeffid" (which reads as a missing mapped column).
    did = str(uuid.uuid4())
    csv_file = tmp_path / "excel.csv"
    csv_file.write_bytes(b"\xef\xbb\xbfid,opened,amount,tier\n"
                         + f"{did},2024-01-02,10.00,standard\n".encode())
    res = run_cli(cli_env, "import", str(csv_file), "--id-column", "id", "--opened-column",
                  "opened", "--materiality-column", "amount", "--tier-column", "tier")
    assert res.returncode == 0, res.stderr
    assert "1 enqueued" in res.stdout
    from escalation.domain.escalation import parse_dispute_id

    assert app.store.get(parse_dispute_id(did)) is not None


@pytest.mark.parametrize(("args", "message"), [
    ((), "give one dead-letter MEMBER or --all"),
    (("dead:decision:x", "--all"), "give one dead-letter MEMBER or --all"),
    (("dead:decision:x", "--kind", "decision"), "--kind and --match go with --all"),
    (("--all", "--kind", "decisions"), "kind must be decision or notify"),
])
def test_dead_retry_takes_one_member_or_all(
    cli_env: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    res = run_cli(cli_env, "dead", "retry", *args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


def test_dead_retry_all_with_nothing_dead_says_so(cli_env: dict[str, str]) -> None:
    res = run_cli(cli_env, "dead", "retry", "--all", "--match", "no-such-ladder.v9.toml")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "dead retry --all: 0 dead letter(s)"


def test_a_metrics_port_in_use_names_the_flag(cli_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_cli(cli_env, "worker", "--burst", "--metrics-port", str(port))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert lines == [f"error: --metrics-port {port} / --metrics-addr 127.0.0.1: cannot listen "
                     f"there: Address already in use"], res.stderr


def test_notify_refuses_a_tier_no_released_ladder_has(cli_env: dict[str, str]) -> None:
    res = run_cli(cli_env, "notify", "--burst", "--discard", "--tier", "nosuch")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error: --tier: unknown tier 'nosuch'" in res.stderr and "senior" in res.stderr
    res = run_cli(cli_env, "notify", "--burst", "--discard", "--tier", "senior")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("cmd", ["cancel", "pause"])
def test_a_blank_reason_is_refused_and_nothing_is_written(
    app: Any, cli_env: dict[str, str], cmd: str
) -> None:
    from tests.e2e.helpers import due_requests, enqueue

    [did] = enqueue(app, due_requests(1, app.scheduler.time(), past_s=-3600))
    res = run_cli(cli_env, cmd, str(did), "--reason", " ")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "reason must not be empty" in res.stderr and "Traceback" not in res.stderr
    assert [r.event for r in app.store.trail(did)] == ["ENQUEUED"]
    assert app.store.get(did)[1].value == "pending"

"""escalation.logs: one structlog configuration, events with fields, JSON lines that parse."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from decimal import Decimal

import pytest
import structlog
from structlog.testing import capture_logs

from escalation import logs
from escalation.domain.errors import ConfigError
from escalation.logs import configure_logging, get_logger


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    if logs._handler is not None:
        root.removeHandler(logs._handler)
        logs._handler = None
    root.setLevel(level)
    structlog.reset_defaults()


def _json_lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_event_and_fields_are_captured() -> None:
    with capture_logs() as captured:
        get_logger("escalation.worker").info(
            "escalation.promoted",
            trace_id="t-1",
            source_hash="abc",
            match_decision="PROMOTED_TO_SENIOR",
        )

    assert captured == [
        {
            "event": "escalation.promoted",
            "log_level": "info",
            "logger_name": "escalation.worker",
            "trace_id": "t-1",
            "source_hash": "abc",
            "match_decision": "PROMOTED_TO_SENIOR",
        }
    ]


def test_capture_logs_still_works_after_configure_logging() -> None:
    configure_logging("json", stream=io.StringIO())

    with capture_logs() as captured:
        get_logger("x").warning("escalation.stuck_member", member="d-1")

    assert [c["event"] for c in captured] == ["escalation.stuck_member"]


def test_json_lines_parse_and_carry_event_level_logger_utc_timestamp_and_fields() -> None:
    buf = io.StringIO()
    configure_logging("json", stream=buf)

    get_logger("escalation.worker").info(
        "escalation.promoted", trace_id="t-1", match_decision="PROMOTED_TO_SENIOR"
    )

    [line] = _json_lines(buf)
    assert line["event"] == "escalation.promoted"
    assert line["level"] == "info"
    assert line["logger"] == "escalation.worker"
    assert line["trace_id"] == "t-1"
    assert line["match_decision"] == "PROMOTED_TO_SENIOR"
    assert isinstance(line["timestamp"], str)
    assert line["timestamp"].endswith("Z")
    assert "T" in line["timestamp"]


def test_json_renders_decimal_money_as_exact_string() -> None:
    buf = io.StringIO()
    configure_logging("json", stream=buf)

    get_logger("x").info("escalation.enqueued", amount=Decimal("1250.00"))

    assert _json_lines(buf)[0]["amount"] == "1250.00"


def test_json_renders_exceptions_with_traceback() -> None:
    buf = io.StringIO()
    configure_logging("json", stream=buf)
    log = get_logger("x")

    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        log.exception("escalation.fire_failed", trace_id="t-2")

    [line] = _json_lines(buf)
    assert line["level"] == "error"
    assert isinstance(line["exception"], str)
    assert "ZeroDivisionError: boom" in line["exception"]


def test_records_below_the_level_are_dropped() -> None:
    buf = io.StringIO()
    configure_logging("json", level="warning", stream=buf)
    log = get_logger("x")

    log.info("escalation.noise")
    log.warning("escalation.kept")

    assert [line["event"] for line in _json_lines(buf)] == ["escalation.kept"]


def test_standard_library_records_get_the_same_json_shape() -> None:
    buf = io.StringIO()
    configure_logging("json", stream=buf)

    logging.getLogger("alembic.runtime").warning("upgrade %s", "head")

    [line] = _json_lines(buf)
    assert line["event"] == "upgrade head"
    assert line["logger"] == "alembic.runtime"
    assert line["level"] == "warning"


def test_auto_writes_json_when_the_stream_is_not_a_tty() -> None:
    buf = io.StringIO()
    configure_logging("auto", stream=buf)

    get_logger("x").info("escalation.promoted", trace_id="t-3")

    assert _json_lines(buf)[0]["trace_id"] == "t-3"


def test_auto_writes_console_lines_on_a_tty() -> None:
    buf = _Tty()
    configure_logging("auto", stream=buf)

    get_logger("x").info("escalation.promoted", trace_id="t-4")

    out = buf.getvalue()
    assert "escalation.promoted" in out
    assert "t-4" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.splitlines()[0])


def test_console_format_is_key_value_text() -> None:
    buf = io.StringIO()
    configure_logging("console", stream=buf)

    get_logger("escalation.worker").info("escalation.promoted", trace_id="t-5")

    out = buf.getvalue()
    assert "escalation.promoted" in out
    assert "trace_id=t-5" in out
    assert "escalation.worker" in out


def test_reconfiguring_replaces_the_handler_instead_of_adding_one() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", stream=first)
    configure_logging("json", stream=second)

    get_logger("x").info("escalation.once")

    assert first.getvalue() == ""
    assert len(_json_lines(second)) == 1


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"fmt": "xml"}, "ESCALATION_LOG_FORMAT"), ({"level": "LOUD"}, "ESCALATION_LOG_LEVEL")],
)
def test_unknown_format_or_level_is_refused_naming_the_setting(
    kwargs: dict[str, str], name: str
) -> None:
    with pytest.raises(ConfigError, match=name):
        configure_logging(**kwargs)  # type: ignore[arg-type]


def test_debug_level_keeps_database_and_redis_drivers_quiet() -> None:
    import logging

    from escalation.logs import configure_logging

    configure_logging("json", "DEBUG")
    try:
        assert logging.getLogger("escalation.worker").isEnabledFor(logging.DEBUG)
        for name in ("sqlalchemy.engine.Engine", "psycopg.pool", "redis.connection"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    finally:
        configure_logging("json", "INFO")


def test_the_default_stream_is_sys_stderr_as_it_is_at_each_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Configured while ``sys.stderr`` was a capture stream (an in-process CLI run) that is
    closed afterwards, later records go to the current ``sys.stderr``, not the closed one."""
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    configure_logging("json", "INFO")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr("sys.stderr", second)
    get_logger("t").info("after.capture")
    logging.getLogger("lib.t").warning("lib.after.capture")
    assert [r["event"] for r in _json_lines(second)] == ["after.capture", "lib.after.capture"]

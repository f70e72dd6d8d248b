"""What every ``escalation`` command module shares: the two consoles, ISO-8601 option
parsing, settings and the wired application.

The command modules (``cli_*.py``) import this module and never ``cli.py``; ``cli.py``
imports them and assembles their typer apps with ``add_typer`` (dependencies run one way).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from rich.console import Console

from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import require_aware

out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)


def parse_time(value: str | None, name: str) -> datetime | None:
    """ISO-8601 text -> aware datetime (None passes through).

    Raises InvalidInput, naming the option ``name``, for unparseable or naive values.
    """
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name}: not an ISO-8601 time: {value!r}") from None
    return require_aware(parsed, name)


def _settings(**overrides: Any) -> Any:
    """The ``Settings`` from ``ESCALATION_*`` variables, with ``overrides`` applied."""
    from escalation.settings import get_settings

    return get_settings(**overrides)


def _app(
    actor: str | None = None, check_schema: bool = True, strict_ladders: bool = False,
    durable_redis: bool = False, **overrides: Any,
) -> Any:
    """Configure logging and build the wired ``bootstrap.App`` (the caller closes it).

    ``durable_redis``: refuse a Redis that may evict keys (workers, enqueue, import).
    """
    from escalation.bootstrap import build
    from escalation.logs import configure_logging

    settings = _settings(**overrides)
    configure_logging(settings.log_format, settings.log_level)
    return build(settings, actor=actor, check_schema=check_schema,
                 strict_ladders=strict_ladders, durable_redis=durable_redis)


def _print_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (non-JSON values via ``str``)."""
    out.print_json(json.dumps(data, default=str))

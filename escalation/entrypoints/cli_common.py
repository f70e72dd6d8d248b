"""What every ``escalation`` command module shares: the two consoles, option parsing,
settings and the wired application (ISO-8601 times: ``domain.timeutil.parse_time``).

The command modules (``cli_*.py``) import this module and never ``cli.py``; ``cli.py``
imports them and assembles their typer apps with ``add_typer`` (dependencies run one way).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console

from escalation.domain.errors import InvalidInput

if TYPE_CHECKING:  # the wiring is imported by the commands that build an App
    from escalation.bootstrap import App
    from escalation.settings import Settings


# emoji=False: rich would turn ":100:" in "file.csv:100: ..." (and any ":name:" in user data,
# an id, a CSV cell) into an emoji; what the CLI prints is data and line numbers
def _out_width() -> int | None:
    """Width of stdout's tables: ``$COLUMNS`` when set, else the terminal's, else 200 (a pipe
    or a file: wide enough for every table, e.g. ``audit show``'s full trail)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if sys.stdout.isatty() else 200


# soft_wrap: a message line (a path, an id, a summary) is never cut at the width; a terminal
# wraps it, a pipe gets it whole. Tables are laid out to the width either way.
out = Console(width=_out_width(), soft_wrap=True, emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)


def option_name(param: str) -> str:
    """The option of a parameter's plain name, as typer spells it: ``grace_s`` ->
    ``--grace-s``, ``from`` -> ``--from`` (for ``InvalidParameter.render``)."""
    return "--" + param.replace("_", "-")


def parse_attributes(values: list[str] | None) -> dict[str, object] | None:
    """``["name=value", ...]`` -> ``{name: value}``. Raises InvalidInput on a missing ``=`` or
    a name given twice (the last one would silently win)."""
    if not values:
        return None
    out: dict[str, object] = {}
    for item in values:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"--attribute: expected name=value, got {item!r}")
        if key.strip() in out:
            raise InvalidInput(f"--attribute {key.strip()} given twice: give each once")
        out[key.strip()] = val.strip()
    return out


def _settings(**overrides: Any) -> Settings:
    """The ``Settings`` from ``ESCALATION_*`` variables, with ``overrides`` applied."""
    from escalation.settings import get_settings

    return get_settings(**overrides)


def _operator(actor: str | None, fallback: str | None = None) -> str:
    """The named person acting: ``--actor``, else ``ESCALATION_OPERATOR``, else ``fallback``
    (every command that records an actor resolves it here: ``enqueue``, ``pause``,
    ``resume``, ``cancel``, ``action record``, ``resolve``, ``ladder release`` / ``apply``).

    Raises:
        InvalidInput: blank, or none of them given (nothing is written).
    """
    if actor is not None:
        if not actor.strip():
            raise InvalidInput("--actor: must not be empty")
        return actor.strip()
    named = _settings().operator
    if named is not None and named.strip():
        return str(named).strip()
    if fallback is not None:
        return fallback
    raise InvalidInput("no actor: give --actor NAME or set ESCALATION_OPERATOR (who acts is "
                       "recorded on the ledger row; 'cli' names nobody)")


def _app(
    actor: str | None = None, check_schema: bool = True, strict_ladders: bool = False,
    durable_redis: bool = False, **overrides: Any,
) -> App:
    """Configure logging and build the wired ``bootstrap.App`` (the caller closes it).

    ``durable_redis``: refuse a Redis that may evict keys (workers, enqueue, import).
    """
    from escalation.bootstrap import build
    from escalation.logs import configure_logging

    settings = _settings(**overrides)
    configure_logging(settings.log_format, settings.log_level)
    return build(settings, actor=actor, check_schema=check_schema,
                 strict_ladders=strict_ladders, durable_redis=durable_redis)


def json_default(value: object) -> object:
    """A ``json.dumps`` default for every ``--json`` output: an instant (``datetime``) or a
    date as RFC 3339 / ISO 8601 with its ``T`` (``2026-12-08T22:00:00+00:00``, as the API
    writes it; ``str`` would give ``2026-12-08 22:00:00+00:00``), anything else via ``str``
    (UUIDs, decimals, paths)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _print_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (instants RFC 3339, other non-JSON values via
    ``str``: :func:`json_default`)."""
    out.print_json(json.dumps(data, default=json_default))


def redact_url(url: str | None) -> str | None:
    """``url`` with its password replaced by ``***`` (for anything printed or logged).

    ``redis://:secret@127.0.0.1:6379/0`` -> ``redis://:***@127.0.0.1:6379/0``; a URL without
    credentials, or None, is returned unchanged.
    """
    if not url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    creds, at, hosts = netloc.rpartition("@")
    if not at:
        return url
    user, colon, _password = creds.partition(":")
    masked = f"{user}:***" if colon else creds
    return f"{scheme}://{masked}@{hosts}{slash}{path}"

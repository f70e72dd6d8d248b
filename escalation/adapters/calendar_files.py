"""Deployment calendars from a TOML file (docs/ladders.md "Calendars and day-count
conventions").

Reg E and Reg Z define a business day by the institution's own opening days (12 CFR
1005.2(d) and 1026.2(a)(6): a day the institution is open for substantially all business),
so a deployment can describe its calendars::

    [[calendars]]
    id = "acme_bank"                   # used as window.calendar in ladder files
    version = "2026.1"                 # optional; default: a hash of the definition
    base = "us_federal_reserve"        # optional; inherit tz, days, hours and holidays
    tz = "America/Chicago"
    working_days = ["mon", "tue", "wed", "thu", "fri", "sat"]
    hours = { open = "08:00", close = "18:00" }   # "24:00" closes at midnight
    holidays = [2026-12-24, 2026-12-31]           # added to the base's holidays

``load_calendars`` always includes ``utc`` and ``us_federal_reserve``, which a file cannot
redefine. Errors are ``ConfigError`` naming the file and field, e.g.
``calendars.toml: calendars[0].tz: unknown time zone 'Mars/Olympus'``.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from datetime import date, time
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from escalation.domain.calendars import (
    WEEKDAYS,
    BusinessCalendar,
    Calendar,
    builtin_calendars,
    fixed_holidays,
    with_institution,
)
from escalation.domain.errors import ConfigError, InvalidInput

# defer_build: a model's validator is built at its first use, not at import (every command
# imports this module; only a deployment with a calendars file validates one)
Clock = Annotated[str, StringConstraints(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$")]


class HoursModel(BaseModel):
    """Working hours, local ``"HH:MM"``; ``close = "24:00"`` means midnight."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    open: Clock = "09:00"
    close: Clock = "17:00"


class CalendarModel(BaseModel):
    """One deployment calendar."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    id: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]
    version: str | None = None
    base: str | None = None
    tz: str | None = None
    working_days: (
        list[Annotated[str, StringConstraints(pattern=r"^(mon|tue|wed|thu|fri|sat|sun)$")]] | None
    ) = None
    hours: HoursModel | None = None
    holidays: list[date] = Field(default_factory=list)


class CalendarFile(BaseModel):
    """The calendars file: ``[[calendars]]`` tables."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    calendars: list[CalendarModel] = Field(default_factory=list)


def _clock(text: str) -> time:
    return time(0) if text == "24:00" else time.fromisoformat(text)


def _build(model: CalendarModel, known: dict[str, Calendar], where: str) -> BusinessCalendar:
    base: BusinessCalendar | None = None
    if model.base is not None:
        candidate = known.get(model.base)
        if not isinstance(candidate, BusinessCalendar):
            raise ConfigError(
                f"{where}.base: {model.base!r} is not a business calendar defined above"
            )
        base = candidate
    if model.tz is not None:
        try:
            tz = ZoneInfo(model.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"{where}.tz: unknown time zone {model.tz!r}") from None
    elif base is not None:
        tz = base.tz
    else:
        raise ConfigError(f"{where}.tz: required without a base calendar")
    days = (
        frozenset(WEEKDAYS[d] for d in model.working_days)
        if model.working_days is not None
        else (base.working_days if base else frozenset({1, 2, 3, 4, 5}))
    )
    if model.hours is not None:
        opens, closes = _clock(model.hours.open), _clock(model.hours.close)
    else:
        opens, closes = (base.open, base.close) if base else (time(9), time(17))
    own = fixed_holidays(model.holidays)
    base_rule = base.is_holiday if base else None
    digest = hashlib.sha256(
        json.dumps(model.model_dump(mode="json"), sort_keys=True).encode()
    ).hexdigest()[:12]
    version = model.version or f"sha256:{digest}"
    if base is not None:
        version = f"{version}+{base.id}@{base.version}"
    try:
        return BusinessCalendar(
            id=model.id,
            version=version,
            tz=tz,
            working_days=days,
            open=opens,
            close=closes,
            is_holiday=own if base_rule is None else (lambda d: own(d) or base_rule(d)),
        )
    except InvalidInput as exc:
        raise ConfigError(f"{where}: {exc}") from None


def load_institution_calendars(
    path: Path | None, calendar_id: str, tz_name: str
) -> dict[str, Calendar]:
    """:func:`load_calendars` with the ``institution`` calendar bound to the deployment's
    ``calendar_id`` in zone ``tz_name`` (settings ``institution_calendar`` /
    ``institution_timezone``).

    Raises:
        ConfigError: as :func:`load_calendars`, or an unknown institution calendar or zone.
    """
    calendars = load_calendars(path)
    try:
        return with_institution(calendars, calendar_id, tz_name)
    except InvalidInput as exc:
        raise ConfigError(f"institution calendar: {exc}") from None


def load_calendars(path: Path | None) -> dict[str, Calendar]:
    """Built-in calendars plus those defined in the TOML file at ``path`` (if given).

    Returns:
        ``{calendar id: Calendar}``, always with ``utc`` and ``us_federal_reserve``.

    Raises:
        ConfigError: unreadable or invalid file, unknown time zone, unknown base, a duplicate
            id or a redefinition of a built-in calendar (message names the file and field).
    """
    calendars = builtin_calendars()
    if path is None:
        return calendars
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text("utf-8"), parse_float=Decimal)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read calendars file: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        parsed = CalendarFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {loc}: {first['msg']}") from None
    for i, model in enumerate(parsed.calendars):
        where = f"{path}: calendars[{i}]"
        if model.id in calendars:
            raise ConfigError(f"{where}.id: calendar {model.id!r} is already defined")
        calendars[model.id] = _build(model, calendars, where)
    return calendars

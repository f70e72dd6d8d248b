"""Ladder files: ``ladders/<ladder>.v<N>.toml`` -> :class:`~escalation.domain.ladder.Ladder`.

Files are read with ``tomllib.loads(text, parse_float=Decimal)`` (no float ever touches a
threshold) and validated by the pydantic models below; docs/ladder-schema.json is generated
from :class:`LadderFile` (``render_json_schema``). Every error is a ``LadderError`` whose
message names the file and the field, e.g.
``ladders/dispute_review.v2.toml: tiers[1].rank: ranks must be strictly increasing``.
A released file is never edited (a change is a new version; ADR 0004): its SHA-256
``checksum`` is compared with the one recorded when it was applied
(``escalation.domain.ladder_check``). The regulatory-fit rule of those checks is answered
from this process's memo (``adapters.regulatory_fit_memo``) when the same file was checked
before.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import tomllib
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import structlog
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from escalation.adapters.regulatory_fit_memo import PROCESS_FIT_MEMO
from escalation.domain.calendars import CalendarRegistry, SlaWindow, WindowUnit
from escalation.domain.currencies import check_currency
from escalation.domain.errors import (
    InvalidInput,
    LadderError,
    LadderReleaseError,
    ReleaseFault,
    UnreadableRelease,
)
from escalation.domain.ladder import (
    RESOLUTION,
    ActionDef,
    DeadlineVariant,
    Ladder,
    MaterialityBand,
    MigrationPolicy,
    RegulatoryDeadline,
    Requirement,
    Tier,
    unknown_ladder,
)
from escalation.domain.ladder_check import RegulatoryFitCheck, check_ladders
from escalation.domain.obligations import Outcome
from escalation.ports import LadderHistory

FILE_NAME = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.toml$")
Ident = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]
DecimalText = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]{1,2})?$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WindowModel(_Model):
    """An SLA window: ``{ amount = 24, unit = "calendar_hours", calendar = "utc" }``."""

    amount: PositiveInt
    unit: WindowUnit
    calendar: Ident = "utc"


class TierModel(_Model):
    """One tier: stable ``id``, display ``name``, authority ``rank``, SLA ``window``."""

    id: Ident
    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    rank: Annotated[int, Field(strict=True, ge=0)]
    window: WindowModel
    warn_at: list[Annotated[Decimal, Field(gt=0, lt=1)]] = Field(
        default_factory=list, description='fractions of the window, e.g. ["0.50", "0.75"]'
    )


class RegulatoryModel(_Model):
    """The regulatory deadline (law or scheme rule) that the tier windows must fit inside."""

    name: Ident
    anchor: Ident = Field(description="event that starts the clock, e.g. notice_received")
    amount: PositiveInt
    unit: WindowUnit
    calendar: Ident = "utc"
    buffer: Annotated[int, Field(strict=True, ge=0)] = Field(
        default=0, description="margin in the same unit and calendar"
    )
    source: str = Field(default="", description="citation, e.g. 12 CFR 1005.11(c)(1)")
    caps: list[Ident] = Field(
        default_factory=list,
        description="tier ids whose due times this deadline caps (empty = every tier); "
        "with several deadlines, e.g. the 15-day one caps the tiers before the response "
        "milestone and the 60-day one the terminal tier",
    )
    billing_cycles: Annotated[int, Field(strict=True, ge=0, le=12)] = Field(
        default=0,
        description="> 0: due at the end of this many complete billing cycles after the "
        "anchor (needs the dispute attribute cycle_closing_day), never later than "
        "amount/unit (Reg Z 12 CFR 1026.13(c)(2))",
    )
    variants: list[VariantModel] = Field(
        default_factory=list,
        description="other windows for disputes with given boolean attributes; the first "
        "matching one applies (Reg E 12 CFR 1005.11(c)(3))",
    )
    met_by: list[Ident] = Field(
        default_factory=lambda: [RESOLUTION], min_length=1,
        description="actions that meet this deadline ('resolution' = the dispute's "
        "resolution); default: the resolution only",
    )
    started_by: Ident | list[Ident] | None = Field(
        default=None,
        description="an action (or a list: the first recorded starts it; 'resolution' "
        "allowed) whose instant starts this clock instead of the anchor event",
    )
    counts_before_start: Annotated[int, Field(strict=True, ge=0, le=366)] = Field(
        default=0,
        description="how long before an action clock's start (in the deadline's unit and "
        "calendar) an action still meets it, e.g. a notice of a reversal sent 5 business "
        "days ahead of the debit; 0 = only at or after the start",
    )
    requires: RequiresModel | None = Field(
        default=None,
        description="the window applies only when this action happened before the deadline "
        "'within'; otherwise this deadline falls at that deadline's instant",
    )


class RequiresModel(_Model):
    """``requires = { action = "provisional_credit", within = "determine_or_..." }``: this
    deadline's window is available only when ``action`` happened before the deadline
    ``within``; otherwise it falls at ``within``'s instant (Reg E 12 CFR 1005.11(c)(2)(i))."""

    action: Ident
    within: Ident


class ActionModel(_Model):
    """``[[actions]]``: an action a dispute on this ladder may record (docs/ladders.md
    "Obligations")."""

    id: Ident
    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    money: bool = Field(default=False, description="the action carries an amount and currency")
    full_amount: bool = Field(
        default=False, description="a money action meets a deadline only when it covers the "
        "disputed amount (Reg E provisional credit)")
    after: Ident | None = Field(
        default=None, description="an action that must be on record first (a reversal "
        "needs the provisional credit it reverses)")
    source: str = Field(default="", description="citation, e.g. 12 CFR 1005.11(c)(2)(i)")
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] | None = Field(
        default=None, description="with full_amount: the ISO 4217 code of the disputed "
        "amounts it is compared with (default USD); a credit in another currency is "
        "recorded as amount unchecked")

    @model_validator(mode="after")
    def _currency_with_full_amount(self) -> ActionModel:
        if self.currency is not None:
            if not self.full_amount:
                raise ValueError("currency is only meaningful with full_amount = true")
            try:
                check_currency(self.currency)
            except InvalidInput as exc:  # a ValidationError naming the field, as others
                raise ValueError(str(exc).removeprefix("currency: ")) from None
        return self


class VariantModel(_Model):
    """A different window for disputes with a boolean attribute (e.g. Reg E new accounts)."""

    when_any: list[Ident] = Field(
        min_length=1, description="boolean dispute attributes; any true selects this window")
    amount: PositiveInt
    unit: WindowUnit | None = Field(default=None, description="default: the deadline's unit")
    source: str = Field(default="", description="citation, e.g. 12 CFR 1005.11(c)(3)(i)")


class InstitutionModel(_Model):
    """``[institution]``: this version's override of the deployment's institution calendar
    (the calendar id ``institution`` in windows); an escalation's own values win."""

    timezone: str | None = Field(default=None, description="IANA zone, e.g. America/Chicago")
    calendar: Ident | None = Field(default=None, description="base calendar id")


class BandModel(_Model):
    """Materiality band: amounts >= ``min_amount`` (decimal string) start in ``start_tier``."""

    name: Ident
    min_amount: DecimalText
    start_tier: Ident | None = None
    window_factor: Annotated[Decimal, Field(gt=0, le=1)] = Decimal(1)


class MigrationModel(_Model):
    """``[migration]``: how ``ladder apply`` re-times escalations migrated onto this version."""

    recompute_due: Literal["keep", "from_tier_entry"] = Field(
        default="keep",
        description="keep the due time, or recompute it from the time the escalation "
        "entered its tier with the new window",
    )
    grace: WindowModel = Field(
        default_factory=lambda: WindowModel(amount=1, unit=WindowUnit.CALENDAR_HOURS),
        description="a shortened window never makes an escalation due before now + grace",
    )


class LadderFile(_Model):
    """A ladder file (one version of one ladder); see docs/ladders.md."""

    model_config = ConfigDict(title="Ladder file", extra="forbid", frozen=True)

    ladder: Ident
    version: PositiveInt
    previous_version: PositiveInt | None = None
    terminal_tier: Ident
    description: str = ""
    tiers: list[TierModel] = Field(min_length=1)
    regulatory: RegulatoryModel | list[RegulatoryModel] | None = Field(
        default=None,
        description="one deadline ([regulatory]) or several ([[regulatory]], each with caps)",
    )
    bands: list[BandModel] = Field(default_factory=list)
    tier_map: dict[Ident, Ident] = Field(
        default_factory=dict, description="old tier id -> new tier id, for removed/renamed tiers"
    )
    migration: MigrationModel = Field(default_factory=MigrationModel)
    institution: InstitutionModel = Field(default_factory=InstitutionModel)
    actions: list[ActionModel] = Field(
        default_factory=list, description="actions a dispute on this ladder may record")
    outcomes: list[Outcome] = Field(
        default_factory=list,
        description="resolution outcome codes this version admits (empty: every code)")


def render_json_schema() -> str:
    """docs/ladder-schema.json as text (sorted keys, 2-space indent, trailing newline)."""
    return json.dumps(LadderFile.model_json_schema(), indent=2, sort_keys=True) + "\n"


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(file)"


def _semantic_errors(label: str, model: LadderFile, stem: re.Match[str] | None) -> list[str]:
    errors: list[str] = []
    if stem is None:
        errors.append(f"{label}: (file name): must be <ladder>.v<N>.toml")
    else:
        if stem["name"] != model.ladder:
            errors.append(f"{label}: ladder: {model.ladder!r} differs from the file name")
        if int(stem["version"]) != model.version:
            errors.append(f"{label}: version: {model.version} differs from the file name")
    errors.extend(_tier_errors(label, model))
    expected_prev = None if model.version == 1 else model.version - 1
    if model.previous_version != expected_prev:
        errors.append(f"{label}: previous_version: must be {expected_prev} for v{model.version}")
    if model.version == 1 and model.tier_map:
        errors.append(f"{label}: tier_map: version 1 has no previous version to map from")
    return errors


def _tier_errors(label: str, model: LadderFile) -> list[str]:
    errors: list[str] = []
    ids = [t.id for t in model.tiers]
    for i, tier in enumerate(model.tiers):
        if tier.id in ids[:i]:
            errors.append(f"{label}: tiers[{i}].id: duplicate tier id {tier.id!r}")
        if i and tier.rank <= model.tiers[i - 1].rank:
            errors.append(f"{label}: tiers[{i}].rank: ranks must be strictly increasing")
        if list(tier.warn_at) != sorted(set(tier.warn_at)):
            errors.append(f"{label}: tiers[{i}].warn_at: must be increasing and distinct")
    if model.terminal_tier != ids[-1]:
        errors.append(f"{label}: terminal_tier: must be the last tier ({ids[-1]!r})")
    for old, new in model.tier_map.items():
        if new not in ids:
            errors.append(f"{label}: tier_map.{old}: {new!r} is not a tier of this version")
    errors.extend(_regulatory_errors(label, model, ids))
    names = [b.name for b in model.bands]
    for i, band in enumerate(model.bands):
        if band.name in names[:i]:
            errors.append(f"{label}: bands[{i}].name: duplicate band {band.name!r}")
        if band.start_tier is not None and band.start_tier not in ids:
            errors.append(f"{label}: bands[{i}].start_tier: unknown tier {band.start_tier!r}")
    return errors


def _regulatory_errors(label: str, model: LadderFile, ids: list[str]) -> list[str]:
    errors: list[str] = []
    regs = _regulatory_list(model)
    reg_names = [r.name for r in regs]
    for i, reg in enumerate(regs):
        where = "regulatory" if isinstance(model.regulatory, RegulatoryModel) else (
            f"regulatory[{i}]")
        if reg.name in reg_names[:i]:
            errors.append(f"{label}: {where}.name: duplicate deadline {reg.name!r}")
        for cap in reg.caps:
            if cap not in ids:
                errors.append(f"{label}: {where}.caps: unknown tier {cap!r}")
    return errors


def _regulatory_list(model: LadderFile) -> list[RegulatoryModel]:
    reg = model.regulatory
    if reg is None:
        return []
    return [reg] if isinstance(reg, RegulatoryModel) else list(reg)


class _Collect:
    """Builds the domain objects of one file, turning each domain error (``InvalidInput``,
    e.g. an SLA window longer than about 100 years) into a ``"<file>: <field>: <problem>"``
    line, so it is reported with the file and the field and collected with the others
    instead of ending the check with a bare message."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.errors: list[str] = []

    def window(self, where: str, amount: int, unit: WindowUnit, calendar: str) -> SlaWindow:
        """``SlaWindow(amount, unit, calendar)``; on an error, a placeholder window (the
        ladder is not built) and the error under ``<where>`` (the amount's field: the unit
        and calendar are checked by the schema)."""
        try:
            return SlaWindow(amount, unit, calendar)
        except InvalidInput as exc:
            self.errors.append(f"{self.label}: {where}: {exc}")
            return SlaWindow(1, unit, calendar)

    def deadline(self, where: str, r: RegulatoryModel) -> RegulatoryDeadline | None:
        """The domain deadline of ``r`` (at ``where``), or None with its errors noted."""
        window = self.window(f"{where}.amount", r.amount, r.unit, r.calendar)
        variants = tuple(
            DeadlineVariant(tuple(v.when_any), self.window(
                f"{where}.variants[{j}].amount", v.amount, v.unit or r.unit, r.calendar),
                v.source)
            for j, v in enumerate(r.variants)
        )
        try:
            return RegulatoryDeadline(
                r.name, r.anchor, window, r.buffer, tuple(r.caps), source=r.source,
                billing_cycles=r.billing_cycles, variants=variants, met_by=tuple(r.met_by),
                started_by=(() if r.started_by is None else (r.started_by,)
                            if isinstance(r.started_by, str) else tuple(r.started_by)),
                counts_before_start=r.counts_before_start,
                requires=None if r.requires is None else Requirement(
                    r.requires.action, r.requires.within))
        except InvalidInput as exc:  # the buffer: the other fields are checked above
            self.errors.append(f"{self.label}: {where}.buffer: {exc}")
            return None


def _to_domain(model: LadderFile, label: str, checksum: str,
               errors: list[str]) -> tuple[Ladder | None, list[str]]:
    """The :class:`Ladder` of a schema-valid file whose file checks found ``errors``, or None
    and those errors followed by every domain error found, each naming the file and the
    field."""
    c = _Collect(label)
    c.errors = list(errors)
    tiers = tuple(
        Tier(
            id=t.id,
            name=t.name,
            rank=t.rank,
            window=c.window(f"tiers[{i}].window.amount", t.window.amount, t.window.unit,
                            t.window.calendar),
            warn_at=tuple(t.warn_at),
        )
        for i, t in enumerate(model.tiers)
    )
    regs = _regulatory_list(model)
    single = isinstance(model.regulatory, RegulatoryModel)
    built = [c.deadline("regulatory" if single else f"regulatory[{i}]", r)
             for i, r in enumerate(regs)]
    grace = model.migration.grace
    grace_window = c.window("migration.grace.amount", grace.amount, grace.unit, grace.calendar)
    if c.errors:
        return None, c.errors
    deadlines = tuple(d for d in built if d is not None)
    bands = sorted(model.bands, key=lambda b: Decimal(b.min_amount), reverse=True)
    try:
        ladder = Ladder(
            name=model.ladder,
            version=model.version,
            tiers=tiers,
            terminal_tier=model.terminal_tier,
            previous_version=model.previous_version,
            tier_map=dict(model.tier_map),
            bands=tuple(
                MaterialityBand(b.name, Decimal(b.min_amount), b.start_tier, b.window_factor)
                for b in bands
            ),
            regulatory=deadlines[0] if deadlines else None,
            deadlines=deadlines,
            checksum=checksum,
            source=label,
            institution_timezone=model.institution.timezone,
            institution_calendar=model.institution.calendar,
            migration=MigrationPolicy(recompute_due=model.migration.recompute_due,
                                      grace=grace_window),
            actions=tuple(ActionDef(a.id, a.name, a.money, a.source, a.full_amount, a.after,
                                    a.currency or "USD")
                          for a in model.actions),
            outcomes=tuple(o.value for o in model.outcomes),
        )
    except (InvalidInput, LadderError) as exc:
        # The file checks above report these first (with their fields); this keeps any
        # other domain refusal a file error too, never an exception out of `ladder check`.
        text = str(exc)
        return None, [text if text.startswith(f"{label}: ") else f"{label}: (file): {text}"]
    return ladder, []


def _parse(path: Path) -> tuple[Ladder | None, list[str]]:
    label = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, [f"{label}: (file): cannot read: {exc.strerror}"]
    try:
        raw: dict[str, Any] = tomllib.loads(data.decode("utf-8"), parse_float=Decimal)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return None, [f"{label}: (file): not valid TOML: {exc}"]
    try:
        model = LadderFile.model_validate(raw)
    except ValidationError as exc:
        return None, [f"{label}: {_loc(e['loc'])}: {e['msg']}" for e in exc.errors()]
    errors = _semantic_errors(label, model, FILE_NAME.match(path.name))
    return _to_domain(model, label, hashlib.sha256(data).hexdigest(), errors)


def load_ladder_file(path: Path) -> Ladder:
    """Parse and validate one ladder file.

    Returns:
        The :class:`Ladder`, with ``checksum`` = SHA-256 hex of the file bytes and
        ``source`` = ``str(path)``.

    Raises:
        LadderError: unreadable, not TOML, or invalid; one line per problem, each naming the
            file and the field.
    """
    ladder, errors = _parse(path)
    if ladder is None:
        raise LadderError("\n".join(errors))
    return ladder


def check_ladder_dir(
    path: Path, applied_checksums: Mapping[tuple[str, int], str] | None = None,
    calendars: CalendarRegistry | None = None, skip: Collection[str] = (),
    *, fit_check: RegulatoryFitCheck | None = PROCESS_FIT_MEMO,
) -> list[str]:
    """Everything ``escalation ladder check`` reports for the ``*.toml`` files in ``path``.

    File-level errors (parse, schema, naming) plus :func:`check_ladders` over the files that
    parsed, against ``calendars`` (the deployment's: built-in plus its calendars file; None
    = the built-in ones). An empty list means every file is valid. Never raises for a bad
    file. ``skip``: names of files left out (their problems are reported otherwise).
    ``fit_check``: the regulatory-fit check (default: this process's memo of it; None = the
    domain's sweep every time).
    """
    errors: list[str] = []
    ladders: list[Ladder] = []
    for file in sorted(path.glob("*.toml")):
        if file.name in skip:
            continue
        ladder, file_errors = _parse(file)
        errors.extend(file_errors)
        if ladder is not None:
            ladders.append(ladder)
    errors.extend(check_ladders(ladders, applied_checksums or {}, calendars,
                                fit_check=fit_check))
    return errors


class LadderCatalog:
    """Every ladder version loaded from a directory, by ``(name, version)``."""

    def __init__(self, ladders: list[Ladder], errors: list[str] | None = None, *,
                 fit_check: RegulatoryFitCheck | None = PROCESS_FIT_MEMO) -> None:
        """Index ``ladders``. Raises LadderError on a duplicate ``(name, version)``.

        ``errors``: messages of files that failed to load (lenient loading only).
        ``fit_check``: kept as :attr:`fit_check` (default: this process's memo).
        """
        self.errors: list[str] = list(errors or [])
        self.path = Path("ladders")
        """The directory the files came from (:meth:`from_dir`)."""
        self.calendars: CalendarRegistry | None = None
        """The deployment's calendars the files are checked against (release, baseline,
        migration: ``check_ladders``); None = the built-in ones (:meth:`from_dir`)."""
        self.fit_check = fit_check
        """How those checks check the regulatory fit: this process's memo of the sweep
        (``adapters.regulatory_fit_memo``) unless given another; None = the domain's sweep
        every time."""
        self._by_key: dict[tuple[str, int], Ladder] = {}
        for ladder in ladders:
            key = (ladder.name, ladder.version)
            if key in self._by_key:
                raise LadderError(f"{ladder.label}: version: {ladder.key} is defined twice")
            self._by_key[key] = ladder

    @classmethod
    def from_dir(cls, path: Path, *, strict: bool = True,
                 calendars: CalendarRegistry | None = None,
                 fit_check: RegulatoryFitCheck | None = PROCESS_FIT_MEMO) -> LadderCatalog:
        """Load every ``*.toml`` in ``path`` (sorted by file name).

        ``calendars``: the deployment's calendars (built-in plus ``ESCALATION_CALENDARS_FILE``),
        kept as :attr:`calendars` for the checks that run on the catalog; a ladder may name
        any of them. ``fit_check``: kept as :attr:`fit_check` (default: this process's memo
        of the regulatory-fit sweep).

        ``strict=False`` (read-only commands: status, audit, doctor, ...) skips invalid files
        and keeps their messages in ``errors``, so one broken file does not stop commands
        that do not need it; asking for a ladder that is missing then names those errors.
        The worker and enqueue paths load strictly.

        Raises:
            LadderError: (strict) any file invalid (message names the file and field);
                ``path`` missing (always).
        """
        if not path.is_dir():
            raise LadderError(f"{path}: (directory): ladder directory not found")
        ladders: list[Ladder] = []
        errors: list[str] = []
        for f in sorted(path.glob("*.toml")):
            try:
                ladders.append(load_ladder_file(f))
            except LadderError as exc:
                if strict:
                    raise
                errors.append(str(exc))
        catalog = cls(ladders, errors, fit_check=fit_check)
        catalog.path = path
        catalog.calendars = calendars
        return catalog

    def _invalid_note(self) -> str:
        return f"; invalid ladder files: {' | '.join(self.errors)}" if self.errors else ""

    def get(self, name: str, version: int) -> Ladder:
        """The ladder ``name`` at ``version``. Raises LadderError if there is no such file."""
        try:
            return self._by_key[(name, version)]
        except KeyError:
            known = ", ".join(str(v) for v in self.versions(name)) or "none"
            raise LadderError(
                f"ladder {name!r} version {version} not found (versions: {known})"
                + self._invalid_note()
            ) from None

    def latest(self, name: str) -> Ladder:
        """The highest version of ladder ``name``.

        Raises:
            LadderNotFound: no valid file has ``name`` (exit 3; a malformed name: LadderError,
                :func:`~escalation.domain.ladder.unknown_ladder`).
        """
        versions = self.versions(name)
        if not versions:
            raise unknown_ladder(name, self.names(), self._invalid_note())
        return self._by_key[(name, versions[-1])]

    def find(self, name: str, version: int) -> Ladder | None:
        """The ladder ``name`` at ``version``, or None when no valid file defines it."""
        return self._by_key.get((name, version))

    def versions(self, name: str) -> list[int]:
        """Versions of ladder ``name``, ascending (empty if unknown)."""
        return sorted(v for n, v in self._by_key if n == name)

    def names(self) -> list[str]:
        """Ladder names, sorted."""
        return sorted({n for n, _ in self._by_key})

    def all(self) -> list[Ladder]:
        """Every ladder version, sorted by name then version."""
        return [self._by_key[k] for k in sorted(self._by_key)]

    def verify(self, name: str, version: int, checksum: str) -> Ladder:
        """:func:`verify_released` of ``name@version`` against these files."""
        return verify_released(self.path, self, name, version, checksum)

    def on_disk(self) -> LadderCatalog:
        """These files (a catalog is already a reading of the directory)."""
        return self


ReleaseSource = Callable[[], Mapping[tuple[str, int], str]]
"""Reads the released versions: ``(ladder, version) -> checksum`` (``ladder_release``)."""

REFRESH_S = 5.0
"""Default seconds between re-reads (``ESCALATION_LADDER_REFRESH_S``)."""

_log = structlog.get_logger("escalation.adapters.ladder_files")


class ReleasedLadders:
    """The ladder versions enqueue and workers may use: released versions whose file is
    present, valid and unchanged (docs/adr/0004-ladder-release.md).

    A file that was never released changes nothing (it is not listed by :meth:`latest`,
    :meth:`get` refuses it). A released version whose file went missing, no longer parses,
    or whose SHA-256 differs from the released checksum raises :class:`LadderReleaseError`
    (code ``RELEASE_BROKEN``: workers dead-letter the escalations pinned to it).

    The files and the release records are re-read every ``refresh_s`` seconds (monotonic)
    and on a miss, so a long-running worker sees a new release and an edited file.
    Thread-safe: a refresh swaps one immutable snapshot.

    A released version that cannot be read (:meth:`unreadable`: e.g. released from a shell
    whose ``ESCALATION_LADDERS_DIR`` is another directory) affects only itself: every other
    version is served. Each re-read compares the unreadable versions with the previous
    reading and logs one WARNING per change (``ladders.directory_degraded`` with ladder,
    version, fault, expected and found checksum; ``ladders.directory_restored`` once the
    file is back), never one per request.

    Args:
        path: the ladder directory.
        releases: reads the release records.
        refresh_s: seconds between re-reads (>= 0; 0 re-reads on every call).
    """

    def __init__(self, path: Path, releases: ReleaseSource, *, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic,
                 calendars: CalendarRegistry | None = None) -> None:
        self.path, self._releases, self._refresh_s, self._clock = path, releases, refresh_s, clock
        self.calendars = calendars
        """The deployment's calendars, handed to every catalog read (None = built-in)."""
        self._lock = threading.Lock()
        self._snap: tuple[LadderCatalog, dict[tuple[str, int], str], float] = (
            LadderCatalog([]), {}, float("-inf"))
        self._report_lock = threading.Lock()
        self._unreadable: dict[tuple[str, int], UnreadableRelease] = {}
        self.refresh()

    # ------------------------------------------------------------------ snapshot
    def refresh(self) -> None:
        """Re-read the files (leniently: an invalid file is only reported) and the releases.

        Raises:
            LadderError: the directory is missing.
        """
        files = LadderCatalog.from_dir(self.path, strict=False, calendars=self.calendars)
        released = dict(self._releases())
        with self._lock:
            self._snap = (files, released, self._clock())
        self._report(files, released)

    def _report(self, files: LadderCatalog, released: Mapping[tuple[str, int], str]) -> None:
        """Keep :meth:`unreadable` and log each change of it once (one WARNING per state
        change, whichever thread re-read)."""
        on_disk = {p.name.split(".v", 1)[0] for p in self.path.glob("*.toml")}
        now: dict[tuple[str, int], UnreadableRelease] = {}
        for (name, version), checksum in sorted(released.items()):
            if name not in on_disk:
                continue  # another deployment's ladder (a database may hold several)
            fault = release_fault(self.path, files, name, version, checksum)
            if fault is not None:
                now[(name, version)] = fault
        with self._report_lock:
            before, self._unreadable = self._unreadable, now
        for key, fault in now.items():
            if before.get(key) != fault:
                _log.warning("ladders.directory_degraded", ladder=fault.ladder,
                             version=fault.version, fault=fault.fault.value, file=fault.file,
                             expected_checksum=fault.expected_checksum,
                             found_checksum=fault.found_checksum, ladders_dir=str(self.path),
                             action=fault.advice())
        for key, fault in before.items():
            if key not in now:
                _log.warning("ladders.directory_restored", ladder=fault.ladder,
                             version=fault.version, file=fault.file,
                             checksum=fault.expected_checksum, ladders_dir=str(self.path))

    def unreadable(self) -> list[UnreadableRelease]:
        """The released versions of the ladders in this directory that cannot be read from
        it now (missing, invalid or edited file), by ladder then version; empty when the
        directory and the releases agree. Re-reads first when the snapshot is stale."""
        self._fresh()
        with self._report_lock:
            return [self._unreadable[k] for k in sorted(self._unreadable)]

    def _fresh(self) -> tuple[LadderCatalog, dict[tuple[str, int], str]]:
        files, released, loaded = self._snap
        if self._clock() - loaded >= self._refresh_s:
            self.refresh()
            files, released, _ = self._snap
        return files, released

    def on_disk(self) -> LadderCatalog:
        """The files of the directory as they are now (re-read, not the snapshot)."""
        return LadderCatalog.from_dir(self.path, strict=False, calendars=self.calendars)

    @property
    def files(self) -> LadderCatalog:
        """Every valid file on disk, released or not (``ladder plan``/``check`` read it)."""
        return self._fresh()[0]

    @property
    def released(self) -> dict[tuple[str, int], str]:
        """``(ladder, version) -> released checksum``."""
        return dict(self._fresh()[1])

    @property
    def errors(self) -> list[str]:
        """Invalid files on disk plus every broken release (see :meth:`problems`)."""
        return [*self.files.errors, *(str(e) for e in self.problems())]

    # ------------------------------------------------------------------ lookups
    def get(self, name: str, version: int) -> Ladder:
        """The released ladder ``name@version``.

        Raises:
            LadderReleaseError: released, but its file is missing, invalid or edited.
            LadderError: not released (or no such ladder).
        """
        files, released = self._fresh()
        try:
            return _resolve(self.path, files, released, name, version)
        except LadderError:
            self.refresh()  # released a moment ago, or a file restored: look again once
            files, released, _ = self._snap
            return _resolve(self.path, files, released, name, version)

    def latest(self, name: str) -> Ladder:
        """The newest released version of ``name`` (what enqueue pins).

        Raises:
            LadderReleaseError: that version's file is missing, invalid or edited (enqueue
                refuses rather than pin an older version silently).
            LadderError: ``name`` has files but no released version (exit 2).
            LadderNotFound: no file and no release has ``name`` (exit 3; a malformed name:
                LadderError, :func:`~escalation.domain.ladder.unknown_ladder`).
        """
        versions = self.versions(name)
        if not versions:
            self.refresh()
            versions = self.versions(name)
        if not versions:
            on_disk = self.files.versions(name)
            if not on_disk and not any(f"{name}.v" in e for e in self.files.errors):
                raise unknown_ladder(name, self.names(), " (released ladders)")
            hint = (f"; files v{', v'.join(map(str, on_disk))} exist but none is released "
                    f"(`escalation ladder release --ladder {name} --version 1`)"
                    if on_disk else "; only invalid files have it (`escalation ladder check`)")
            raise LadderError(f"ladder {name!r} has no released version{hint}",
                              field="ladder")
        return self.get(name, versions[-1])

    def versions(self, name: str) -> list[int]:
        """Released versions of ``name``, ascending (empty if none)."""
        return sorted(v for n, v in self._fresh()[1] if n == name)

    def names(self) -> list[str]:
        """Names of the ladders with a released version, sorted."""
        return sorted({n for n, _ in self._fresh()[1]})

    def all(self) -> list[Ladder]:
        """Every released version whose file is intact, by name then version."""
        files, released = self._fresh()
        out: list[Ladder] = []
        for name, version in sorted(released):
            ladder = files.find(name, version)
            if ladder is not None and ladder.checksum == released[(name, version)]:
                out.append(ladder)
        return out

    def problems(self) -> list[LadderReleaseError]:
        """One error per released version whose file is missing, invalid or edited (its
        ``release`` names the file), for the ladders that have at least one file in the
        directory (a database may hold the releases of several deployments' directories)."""
        files, released = self._fresh()
        on_disk = {p.name.split(".v", 1)[0] for p in self.path.glob("*.toml")}
        out: list[LadderReleaseError] = []
        for name, version in sorted(released):
            if name not in on_disk:
                continue
            try:
                _resolve(self.path, files, released, name, version)
            except LadderReleaseError as exc:
                out.append(exc)
        return out


def _resolve(path: Path, files: LadderCatalog, released: Mapping[tuple[str, int], str],
             name: str, version: int) -> Ladder:
    checksum = released.get((name, version))
    if checksum is None:
        known = ", ".join(str(v) for n, v in sorted(released) if n == name) or "none"
        raise LadderError(
            f"ladder {name!r} version {version} is not released (released versions: {known}); "
            f"`escalation ladder release --ladder {name} --version {version}` puts it live")
    return verify_released(path, files, name, version, checksum)


def release_fault(path: Path, files: LadderCatalog, name: str, version: int,
                  checksum: str) -> UnreadableRelease | None:
    """Why released ``name@version`` (released with SHA-256 ``checksum``) cannot be read
    from ``files`` (a reading of ``path``), or None when its file is present, valid and
    unchanged."""
    file = path / f"{name}.v{version}.toml"
    ladder = files.find(name, version)
    if ladder is not None and ladder.checksum == checksum:
        return None
    if ladder is None and not file.exists():
        fault, found = ReleaseFault.MISSING, None
    elif ladder is None:
        fault = ReleaseFault.INVALID
        try:
            found = hashlib.sha256(file.read_bytes()).hexdigest()
        except OSError:
            found = None
    else:
        fault, found = ReleaseFault.EDITED, ladder.checksum
    return UnreadableRelease(ladder=name, version=version, fault=fault,
                             expected_checksum=checksum, found_checksum=found,
                             file=file.name)


_RELEASE_BROKEN = "released ladder file broken"
"""The first words of every :class:`LadderReleaseError` message this module raises (for
people: code acts on the error's ``code`` and ``release``)."""


def verify_released(path: Path, files: LadderCatalog, name: str, version: int,
                    checksum: str) -> Ladder:
    """The file of released ``name@version`` if it is present, valid and has ``checksum``.

    Raises:
        LadderReleaseError: missing, invalid, or edited after release (message starts with
            ``released ladder file broken`` and names the file, for people; code
            ``RELEASE_BROKEN`` and ``release`` say what it is, for code).
    """
    file = path / f"{name}.v{version}.toml"
    fault = release_fault(path, files, name, version, checksum)
    if fault is None:
        ladder = files.find(name, version)
        assert ladder is not None  # noqa: S101 - release_fault found it intact
        return ladder
    if fault.fault is ReleaseFault.MISSING:
        raise LadderReleaseError(
            f"{_RELEASE_BROKEN}: {file}: released file of {name}@{version} is missing (released "
            f"checksum {checksum[:12]}); restore it from version control", fault)
    if fault.fault is ReleaseFault.INVALID:
        why = " | ".join(e for e in files.errors if str(file) in e) or "invalid"
        raise LadderReleaseError(
            f"{_RELEASE_BROKEN}: {file}: released file of {name}@{version} is no longer valid "
            f"({why}); restore the released file", fault)
    raise LadderReleaseError(
        f"{_RELEASE_BROKEN}: {file}: released file of {name}@{version} was edited after "
        f"release (checksum {(fault.found_checksum or '')[:12]}, released {checksum[:12]}); "
        f"restore it and put the change in a new version", fault)


def check_ladder_dir_with_history(ladders_dir: Path, history: LadderHistory | None,
                                  calendars: CalendarRegistry | None = None, *,
                                  deployment: bool = False,
                                  skip: Collection[str] = ()) -> list[str]:
    """Every problem ``escalation ladder check`` reports (empty = valid), against
    ``calendars`` (the deployment's; None = the built-in ones).

    File checks always; with ``history`` also, for the ladders that have files in
    ``ladders_dir``: the checksums recorded at release and apply, and every released file
    that is missing. ``deployment``: ``ladders_dir`` is the deployment's own directory (not
    a scratch ``--dir``) and the database is bound to the deployment (so every release in
    it is this directory's), so a released ladder with no file left in it while escalations
    are pinned to it is reported too (workers dead-letter each of them; moving every file of a
    ladder away was otherwise invisible). ``skip``: names of files (``<ladder>.v<N>.toml``)
    whose problems the caller reports itself (the doctor's broken releases): left out.
    """
    if history is None:
        return check_ladder_dir(ladders_dir, {}, calendars)
    names = {p.name.split(".v", 1)[0] for p in ladders_dir.glob("*.toml")}
    applied = {k: v for k, v in history.applied_checksums().items()
               if k[0] in names and f"{k[0]}.v{k[1]}.toml" not in skip}
    errors = check_ladder_dir(ladders_dir, applied, calendars, skip)
    files = LadderCatalog.from_dir(ladders_dir, strict=False, calendars=calendars)
    released = history.released_checksums()
    for (name, version), checksum in sorted(released.items()):
        file = f"{name}.v{version}.toml"
        if name in names and file not in skip and not (ladders_dir / file).exists():
            try:
                verify_released(ladders_dir, files, name, version, checksum)
            except LadderError as exc:
                errors.append(str(exc))
    if deployment:
        errors.extend(_ladders_gone(ladders_dir, history, released, names))
    return errors


def _ladders_gone(ladders_dir: Path, history: LadderHistory,
                  released: Mapping[tuple[str, int], str], on_disk: set[str]) -> list[str]:
    """A line per released ladder with no file in ``ladders_dir`` and open escalations."""
    out: list[str] = []
    versions: dict[str, list[int]] = {}
    for name, version in released:
        if name not in on_disk:
            versions.setdefault(name, []).append(version)
    for name, vs in sorted(versions.items()):
        pinned = history.count_open(name, max(vs) + 1)
        if pinned:
            out.append(
                f"{name}: (files): released ({', '.join(f'v{v}' for v in sorted(vs))}) and "
                f"{pinned} pending or paused escalation(s) are pinned to it, but no file of it "
                f"is in {ladders_dir}: restore its files (workers dead-letter each of those "
                "escalations until then)")
    return out

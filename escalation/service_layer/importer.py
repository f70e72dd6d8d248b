"""Use case: ``escalation import`` -- load disputes from a CSV with a column mapping.

Each row becomes an :class:`EnqueueRequest`. A non-UUID dispute id (e.g. CFPB "Complaint
ID") is mapped to a stable UUID5 in a per-source namespace and kept as ``external_id``; the
source hash is the SHA-256 of the row's raw CSV line. Times follow the one wall-time rule
(``escalation.domain.calendars``): a date-only value is that local date in the institution's
zone (the row's zone column, else the mapping's ``timezone``, else the ladder version's, else
the deployment's ``institution_timezone``); a naive time is read in that zone (a gap or
overlap time takes the earlier instant). Every row is validated before anything is written:
a file with any bad row imports nothing unless ``skip_invalid``.

:func:`import_csv` reads the file once in constant memory (docs/performance.md, "CSV
import"; ADR 0008): pass 1 parses and validates every row (against the ladders and calendars,
at one Redis TIME instant), keeps only the dispute ids seen (duplicate check) and the bad
rows, and spills each good row to an anonymous temporary file; pass 2, only when pass 1
allows writing, reads the rows back and records + schedules them in batches (ledger rows by
``COPY``). Pass 2 writes exactly what pass 1 validated, so it cannot meet an error pass 1 did
not report. With the PostgreSQL and Redis adapters (the bulk path, :class:`RowEncoder`),
pass 1 builds each request *shape* once and spills every row rendered as the bytes pass 2
writes (staging COPY line with the ENQUEUED hash, Redis enqueue arguments, warning members);
otherwise it spills each row as built and pass 2 records it through ``record_batches``.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import pickle
import tempfile
import tomllib
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime
from itertools import chain, islice
from pathlib import Path
from typing import Any, Protocol, TextIO, runtime_checkable
from uuid import UUID
from zoneinfo import ZoneInfo

from escalation.domain.calendars import (
    CalendarRegistry,
    institution_defaults,
    parse_wall_time,
    zone,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import (
    MAX_EXTERNAL_ID_LEN,
    Escalation,
    Status,
    check_source_hash,
    check_text,
    parse_dispute_id,
)
from escalation.domain.ladder import Ladder
from escalation.domain.materiality import Materiality
from escalation.domain.source_attributes import (
    MAX_NAME_CHARS,
    MAX_SOURCE_ATTRIBUTES,
    MAX_VALUE_CHARS,
)
from escalation.ports import (
    AuditLog,
    LadderSource,
    Scheduler,
    WarningQueue,
)
from escalation.service_layer import trace_id_source
from escalation.service_layer.core import (
    IN_ORDER,
    ONE_BY_ONE,
    CorePorts,
    Fanout,
    HelperProcess,
    Pipeline,
)
from escalation.service_layer.enqueue import (
    BuiltEnqueue,
    EnqueueRequest,
    OnScheduled,
    build_one,
    record_batches,
    schedule,
)
from escalation.service_layer.import_outcomes import (
    OutcomeMapping,
    OutcomePorts,
    OutcomeReport,
    OutcomeRow,
    OutcomeStep,
    RecordOutcomes,
    record_outcomes,
)
from escalation.service_layer.obligations import ObligationStore
from escalation.service_layer.progress_report import Progress, no_progress
from escalation.service_layer.warnings import schedule_warnings, warning_members


class RowTemplate(Protocol):
    """Renders the write of one escalation that differs from a prototype only in its
    dispute id (canonical UUID string), external id, source hash and trace id."""

    ok: bool
    """True when the template renders rows itself (else each row takes the general path)."""

    def prepare(self) -> None:
        """Build the template (worth it for a shape seen more than once); sets ``ok``."""
        ...

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str) -> Any:
        """The rendered row (picklable; the matching ``record``/``enqueue`` method's input)."""
        ...


class LineTemplate(RowTemplate, Protocol):
    """A :class:`RowTemplate` of the ENQUEUED staging line, whose rows may also differ in
    their source attributes (``details.source_attributes``)."""

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str, attributes: Mapping[str, str] | None = None) -> Any:
        """The rendered line; ``attributes``: the row's checked source attributes."""
        ...


@runtime_checkable
class StagedEnqueueLog(Protocol):
    """The bulk ENQUEUED write of the CSV import (adapter: ``AuditStore``)."""

    def enqueued_line_template(
        self, proto: Escalation, actor: str, decided_at: datetime,
        calendar_version: str | None, details: Mapping[str, object] | None,
    ) -> LineTemplate:
        """The template of ``proto``'s ENQUEUED row (as ``record_enqueue_many`` writes it);
        ``details`` without source attributes (each row's own, given to ``render``)."""
        ...

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        """Recorded states by dispute id, in one read (unknown ids absent)."""
        ...

    def record_staged(self, lines: Sequence[str], actor: str) -> set[str]:
        """Record rendered rows in one transaction; the dispute ids recorded now."""
        ...


@runtime_checkable
class EncodedScheduler(Protocol):
    """The bulk Redis enqueue of the CSV import (adapter: ``RedisScheduler``)."""

    def payload_template(self, proto: Escalation) -> RowTemplate:
        """The template of ``proto``'s enqueue (as ``enqueue_many`` writes it)."""
        ...

    namespace: str
    """Key namespace: the warnings it writes are those of a warnings queue of the same
    namespace and shards."""
    shards: int

    def enqueue_encoded(self, items: Sequence[Any],
                        warnings: Sequence[tuple[tuple[str, int], ...] | None] | None = None,
                        ) -> list[bool]:
        """``enqueue_many`` of rendered rows; False where already scheduled. ``warnings``
        (one entry per row, or None): the pre-breach warnings of each row as
        ``(member suffix after the dispute id, due epoch ms)`` pairs, scheduled in the same
        call for the rows it newly schedules."""
        ...


ID_NAMESPACE = uuid.UUID("5b0f6f3e-52c5-4bb9-9a3c-0b6a4e1f7d21")  # escalation import ids

DELIMITERS = (",", ";", "\t")
"""Field separators an import reads: comma (RFC 4180), semicolon (spreadsheets in locales
with a decimal comma), tab."""


@dataclass(frozen=True, slots=True)
class ColumnMapping:
    """How CSV columns map to an escalation. Empty column name = not in the file.

    Attributes:
        dispute_id: column holding the dispute id (UUID or any stable id).
        opened_at: column with the instant the dispute entered its tier (date or ISO time).
        due_at: column with the breach instant (alternative to ``opened_at``).
        tier / materiality / source_hash: optional columns.
        default_tier: used when the column is absent or empty.
        default_materiality: the amount of every row when no materiality column is mapped
            (None = :data:`NO_AMOUNT`, for files without amounts); with a mapped column,
            the amount of its blank cells, and None = a blank cell is a bad row (money is
            never entered silently: an empty amount cell is more often a lost value than a
            zero, so importing it as 0.00 takes an explicit default).
        anchor_at: column with the regulatory anchor event (default: the tier entry time).
        timezone: IANA zone of the institution for every row (date-only and naive values
            are read in it; stored on each escalation); None = ladder/deployment default.
        timezone_column: column with a per-row zone (``[columns] timezone``).
        calendar / calendar_column: base business calendar id, default or per row.
        attribute_columns: dispute attribute -> column (``[columns.attributes]``).
        default_attributes: dispute attribute -> value (``[defaults.attributes]``).
        external_source: names the UUID5 namespace of non-UUID ids (e.g. ``"cfpb"``).
        ladder: ladder name (None = the configured default).
        outcomes: the ``[outcomes]`` table (``import_outcomes.OutcomeMapping``): the column
            whose values record an action and/or a resolution, and the timeliness column;
            None = the file carries no outcomes.
        delimiter: the field separator, one of :data:`DELIMITERS` (comma, semicolon, tab;
            ``[defaults] delimiter`` or ``escalation import --delimiter``). Quoting is
            RFC 4180's in every case.
        keep_columns: the columns whose cells each escalation keeps as its source
            attributes (``[columns] keep = [...]``, ``escalation import --keep-column``;
            ``domain.source_attributes``), named by their header; none unless named. A
            blank cell is left out; a cell longer than the value bound is a bad row.

    Raises:
        InvalidInput: a delimiter other than comma, semicolon or tab (naming ``delimiter``);
            a kept column named twice, blank, longer than a source attribute's name may be,
            or more of them than a dispute may carry (naming ``keep_columns``).
    """

    dispute_id: str = "dispute_id"
    opened_at: str = ""
    due_at: str = ""
    tier: str = ""
    materiality: str = ""
    source_hash: str = ""
    default_tier: str | None = None
    default_materiality: str | None = None
    timezone: str | None = None
    external_source: str = "external"
    ladder: str | None = None
    anchor_at: str = ""
    timezone_column: str = ""
    calendar: str | None = None
    calendar_column: str = ""
    attribute_columns: dict[str, str] = field(default_factory=dict)
    default_attributes: dict[str, str] = field(default_factory=dict)
    outcomes: OutcomeMapping | None = None
    delimiter: str = ","
    keep_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.delimiter not in DELIMITERS:
            raise InvalidInput(f"delimiter: {self.delimiter!r} is not supported; use one of "
                               "',' (comma), ';' (semicolon) or a tab")
        _check_kept(self.keep_columns)

    @classmethod
    def from_file(cls, path: Path, **overrides: str | None) -> ColumnMapping:
        """Read a TOML mapping file (``[columns]``, ``[defaults]`` and optional
        ``[outcomes]`` tables); flags override.

        Raises:
            InvalidInput: unreadable TOML, unknown keys, or a bad ``[outcomes]`` table.
        """
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"{path}: cannot read mapping file: {exc}") from None
        unknown = sorted(set(data) - {"columns", "defaults", "outcomes"})
        if unknown:
            raise InvalidInput(
                f"{path}: unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; "
                "a mapping file has [columns], [defaults] and optionally [outcomes]"
            )
        values: dict[str, Any] = {}
        for table in ("columns", "defaults"):
            values.update(cls._table_values(path, table, data.get(table, {})))
        if "outcomes" in data:
            values["outcomes"] = OutcomeMapping.from_table(path, data["outcomes"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @classmethod
    def _table_values(cls, path: Path, table: str, content: object) -> dict[str, Any]:
        """Field name -> value for one table of a mapping file (``attributes`` sub-tables
        -> ``attribute_columns`` / ``default_attributes``). Raises InvalidInput."""
        if not isinstance(content, dict):
            raise InvalidInput(f"{path}: [{table}] must be a table of key = \"value\" lines")
        values: dict[str, Any] = {}
        for key, val in content.items():
            if table == "columns" and key == "keep":
                if not isinstance(val, list) or not all(isinstance(c, str) for c in val):
                    raise InvalidInput(f"{path}: [columns] keep: a list of column names, "
                                       "e.g. keep = [\"Product\", \"Company\"]",
                                       field="keep_columns")
                values["keep_columns"] = tuple(val)
                continue
            if key == "attributes" and isinstance(val, dict):
                target = "attribute_columns" if table == "columns" else "default_attributes"
                values[target] = {str(k): str(v) for k, v in val.items()}
                continue
            name = _field_name(table, key)
            if name not in cls.__dataclass_fields__:
                raise InvalidInput(f"{path}: [{table}] {key}: unknown key")
            values[name] = str(val)
        return values

    def columns(self) -> list[str]:
        """The CSV columns this mapping reads (non-empty names)."""
        return [c for c in (self.dispute_id, self.opened_at, self.due_at, self.tier,
                            self.materiality, self.source_hash, self.anchor_at,
                            self.timezone_column, self.calendar_column,
                            *self.attribute_columns.values(),
                            *(self.outcomes.columns() if self.outcomes else ()),
                            *self.keep_columns) if c]


def _check_kept(columns: tuple[str, ...]) -> None:
    """The bounds of a mapping's kept columns (their headers become source attribute names).

    Raises:
        InvalidInput: naming ``keep_columns`` (module ``domain.source_attributes``'s bounds).
    """
    if len(columns) > MAX_SOURCE_ATTRIBUTES:
        raise InvalidInput(f"keep_columns: at most {MAX_SOURCE_ATTRIBUTES} columns, got "
                           f"{len(columns)}", field="keep_columns")
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise InvalidInput(f"keep_columns: {', '.join(map(repr, twice))} named more than "
                           "once", field="keep_columns")
    for column in columns:
        if not column.strip() or len(column) > MAX_NAME_CHARS:
            raise InvalidInput(f"keep_columns: {column[:40]!r} is not a usable column name "
                               f"(1 to {MAX_NAME_CHARS} characters)", field="keep_columns")
        check_text(column, "keep_columns")


def _field_name(table: str, key: str) -> str:
    """The :class:`ColumnMapping` field a mapping-file key sets: ``[columns] timezone`` /
    ``calendar`` name per-row columns; ``[defaults]`` keys are ``default_<key>`` except the
    mapping-wide ``timezone``, ``external_source``, ``ladder``, ``calendar`` and
    ``delimiter``."""
    if table == "columns":
        return f"{key}_column" if key in ("timezone", "calendar") else key
    mapping_wide = ("timezone", "external_source", "ladder", "calendar", "delimiter")
    return key if key in mapping_wide else f"default_{key}"


@dataclass
class ImportPlan:
    """Valid requests (with their 1-based CSV line numbers) and the bad rows found."""

    requests: list[tuple[int, EnqueueRequest]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    rows: int = 0


@dataclass(frozen=True, slots=True)
class CsvLayout:
    """A checked header: its column names, the mapping and the institution zone of rows
    without a zone cell (its name: it is stored on each escalation), and where each mapped
    column's cell is."""

    header: list[str]
    mapping: ColumnMapping
    zone_name: str
    index: dict[str, int] = field(default_factory=dict)
    """Column name -> position of its cell (the last column of that name, as a row dict
    built by ``zip`` would hold)."""
    checked: tuple[tuple[str, int], ...] = ()
    """The mapped columns (``mapping.columns()`` order) with their positions: the cells
    checked for control characters."""
    kept: tuple[tuple[str, int], ...] = ()
    """The kept columns (``mapping.keep_columns``) with their positions."""


NO_AMOUNT = "0.00"
"""The materiality of every row of a mapping that maps no materiality column and sets no
``default_materiality`` (a file without amounts, e.g. a CFPB complaint export)."""

DEFAULT_TIMEZONE = "America/New_York"
"""The institution zone of :func:`plan_import` when neither the row nor the mapping names
one and the caller passes none (the deployment default's default)."""


def _parse_time(value: str, tz: ZoneInfo, column: str) -> datetime | date:
    """A cell by the wall-time rule: a date-only value stays a local ``date`` (enqueue reads
    it in the escalation's zone), a naive time is resolved in ``tz``, an aware one kept.

    Memoised per (value, zone, column) (an import's rows share a few hundred dates); only
    values that parse are remembered, so a bad one raises its InvalidInput every time.
    """
    key = (value, tz, column)
    got = _TIME_CACHE.get(key)
    if got is None:
        instant, date_only = parse_wall_time(value, tz, column)
        got = date.fromisoformat(value.strip()) if date_only else instant
        if len(_TIME_CACHE) >= _CACHE_MAX:
            _TIME_CACHE.clear()
        _TIME_CACHE[key] = got
    return got


_CACHE_MAX = 4_096
_TIME_CACHE: dict[tuple[str, ZoneInfo, str], datetime | date] = {}
_MONEY_OK: set[str] = set()
"""Materiality texts already parsed without error (pure: ``Materiality.parse``)."""


def _check_money(money: str) -> None:
    """``Materiality.parse(money)`` for its errors, remembering the texts that passed.
    Raises InvalidInput."""
    if money not in _MONEY_OK:
        Materiality.parse(money)
        if len(_MONEY_OK) >= _CACHE_MAX:
            _MONEY_OK.clear()
        _MONEY_OK.add(money)


def stable_dispute_id(raw: str, source: str) -> tuple[uuid.UUID, str | None]:
    """(UUID, external id): a UUID string is used as is; anything else -> UUID5(source:raw).

    Raises:
        InvalidInput: empty, or not valid Unicode text (a lone surrogate).
    """
    text = raw.strip()
    if len(text) >= 32:  # shorter text cannot hold a UUID's 32 hex digits: skip the attempt
        try:
            return parse_dispute_id(raw), None
        except InvalidInput:
            pass
    if not text:
        raise InvalidInput("dispute id: empty")
    try:
        return _uuid5(f"{source}:{text}"), text
    except UnicodeEncodeError:
        # a lone surrogate: JSON's "\ud800", or a byte that is not UTF-8 in a command line
        # argument (Python carries it as one); no UTF-8 bytes, so no stable id and no row
        raise InvalidInput(f"external id {text[:40]!r} (source {source[:40]!r}): not valid "
                           "Unicode text (a lone surrogate, or a byte that is not UTF-8)"
                           ) from None


_NAMESPACE_BYTES = ID_NAMESPACE.bytes


def _uuid5(name: str) -> uuid.UUID:
    """``uuid.uuid5(ID_NAMESPACE, name)`` without its intermediate objects (RFC 9562,
    section 5.5: the first 16 bytes of SHA-1(namespace + UTF-8 name), version 5 and the RFC
    variant set in place). Raises UnicodeEncodeError as ``uuid5`` does (a lone surrogate)."""
    raw = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode("utf-8")).digest()[:16])  # noqa: S324 - the RFC's hash
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    return uuid.UUID(bytes=bytes(raw))


MAX_RECORD_CHARS = 4 * 1024 * 1024
"""A record still inside a quoted field after this many characters ends there (and fails
as a bad row): an unclosed quote cannot swallow the rest of a file into one record."""


def _quoted_after(line: str, quoted: bool, delimiter: str = ",") -> bool:
    """Whether a quoted field is still open at the end of ``line``, given whether one was
    open at its start, by the rules of Python's ``csv`` module with its default dialect
    (RFC 4180 quoting, non-strict) and field separator ``delimiter``: a quote opens a quoted
    field only at the start of a field; inside one, ``""`` is a quote character and a lone
    ``"`` closes it; a quote anywhere else is an ordinary character."""
    i = line.find('"')
    while i != -1:
        if quoted:
            if line.startswith('"', i + 1):  # "" inside a quoted field
                i = line.find('"', i + 2)
                continue
            quoted = False
        elif i == 0 or line[i - 1] == delimiter:  # at the start of a field: opens
            quoted = True
        i = line.find('"', i + 1)
    return quoted


def _lines(stream: TextIO, delimiter: str = ",") -> Iterator[tuple[int, str, int]]:
    """Records with their starting line numbers and physical line counts: a quoted field
    keeps its newlines inside its record, as Python's ``csv`` reads them
    (:func:`_quoted_after`); a record past :data:`MAX_RECORD_CHARS` inside a quoted field
    ends there. The text of each record is kept (the default source hash is its SHA-256);
    :func:`_parsed` splits the records into cells."""
    parts: list[str] = []
    size, start, quoted = 0, 0, False
    for lineno, line in enumerate(stream, start=1):
        if not parts and '"' not in line:
            yield lineno, line, 1  # the common case: one physical line, no quote
            continue
        if not parts:
            start = lineno
        parts.append(line)
        size += len(line)
        quoted = _quoted_after(line, quoted, delimiter)
        if not quoted or size > MAX_RECORD_CHARS:
            yield start, "".join(parts), len(parts)
            parts, size, quoted = [], 0, False
    if parts:
        yield start, "".join(parts), len(parts)


ParsedRecord = tuple[int, str, int, list[str] | csv.Error]
"""(first line, the record's text, its physical lines, its cells or why ``csv`` refused it)."""


def _parsed(records: Iterable[tuple[int, str, int]], delimiter: str) -> Iterator[ParsedRecord]:
    """Each record of ``records`` (from :func:`_lines`) with its cells, read by one
    ``csv.reader`` over them all (the reader is fed each record's text as one line, and
    starts afresh after a record it refuses). Should ``csv`` ever need more than one record
    of :func:`_lines` for a row, those records become one (lines and text joined)."""
    taken: list[tuple[int, str, int]] = []

    def texts() -> Iterator[str]:
        for record in records:
            taken.append(record)
            yield record[1]

    reader = csv.reader(texts(), delimiter=delimiter)
    while True:
        cells: list[str] | csv.Error
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            cells = exc
        if len(taken) == 1:
            lineno, raw, count = taken[0]
        else:
            lineno, raw, count = (taken[0][0], "".join(r[1] for r in taken),
                                  sum(r[2] for r in taken))
        taken.clear()
        yield lineno, raw, count, cells


def _layout(
    records: Iterator[tuple[int, str, int]], mapping: ColumnMapping, default_timezone: str
) -> CsvLayout:
    """Read and check the header record against ``mapping``; rows without a zone cell count
    in ``mapping.timezone``, else ``default_timezone``.

    Raises:
        InvalidInput: no header, a header ``csv`` refuses, a mapped column missing, not
            exactly one of opened_at / due_at mapped, or an unknown time zone.
    """
    zone_name = mapping.timezone or default_timezone
    zone(zone_name)
    try:
        _, header_line, _ = next(records)
    except StopIteration:
        raise InvalidInput("empty CSV file (no header)") from None
    try:
        header = next(csv.reader([header_line], delimiter=mapping.delimiter), [])
    except csv.Error as exc:
        raise InvalidInput(f"CSV header (line 1): {exc}") from None
    missing = [c for c in mapping.columns() if c not in header]
    if missing and len(header) == 1 and mapping.delimiter == ",":
        other = [name for d, name in ((";", "semicolon"), ("\t", "tab")) if d in header[0]]
        if other:
            raise InvalidInput(f"CSV header has one column and holds a {other[0]}: the file "
                               f"looks {other[0]}-separated (escalation import --delimiter "
                               f"{'tab' if other[0] == 'tab' else repr(';')}); mapped "
                               f"column(s) not found: {', '.join(repr(c) for c in missing)}")
    if missing:
        hints = [f"{c!r} (did you mean {close[0]!r}?)" if close else repr(c)
                 for c in missing for close in [difflib.get_close_matches(c, header, 1, 0.8)]]
        raise InvalidInput(f"CSV header lacks mapped column(s): {', '.join(hints)}; "
                           f"the header has {len(header)} columns: "
                           f"{', '.join(repr(h) for h in header[:20])}"
                           + (", ..." if len(header) > 20 else ""))
    twice = sorted({c for c in mapping.columns() if header.count(c) > 1})
    if twice:
        where = {c: ", ".join(str(i + 1) for i, h in enumerate(header) if h == c) for c in twice}
        raise InvalidInput("CSV header names mapped column(s) more than once: "
                           + "; ".join(f"{c!r} (columns {where[c]})" for c in twice))
    if bool(mapping.opened_at) == bool(mapping.due_at):
        raise InvalidInput("map exactly one of opened_at or due_at to a column")
    index = {name: i for i, name in enumerate(header)}
    return CsvLayout(header, mapping, zone_name, index,
                     tuple((c, index[c]) for c in mapping.columns()),
                     tuple((c, index[c]) for c in mapping.keep_columns))


def _cell(cells: list[str], layout: CsvLayout, column: str) -> str:
    """The stripped value of ``column`` ("" when the column is not mapped or empty)."""
    return cells[layout.index[column]].strip() if column else ""


def _row_request(layout: CsvLayout, raw: str, parsed: list[str] | csv.Error) -> EnqueueRequest:
    """One CSV record -> an :class:`EnqueueRequest` (not yet checked against the ladder).
    ``raw``: the record's text (its SHA-256 is the default source hash); ``parsed``: its
    cells, or the error ``csv`` read it with (:func:`_parsed`).

    Raises:
        InvalidInput: not UTF-8, wrong field count, a control character in a mapped cell,
            bad id, money, source hash or time.
        csv.Error: the record is not valid CSV (``parsed``).
    """
    m = layout.mapping
    if not raw.isascii():
        _check_utf8(raw)
    if isinstance(parsed, csv.Error):
        raise parsed
    cells = parsed
    if len(cells) != len(layout.header):
        raise InvalidInput(f"expected {len(layout.header)} fields, found {len(cells)}")
    for column, i in layout.checked:  # mapped cells only: unmapped free text may hold anything
        check_text(cells[i], column)
    did, external = stable_dispute_id(cells[layout.index[m.dispute_id]], m.external_source)
    money = _row_money(cells, layout)
    _check_money(money)
    source_hash = check_source_hash(
        _cell(cells, layout, m.source_hash)
        or hashlib.sha256(raw.rstrip("\r\n").encode()).hexdigest()
    )
    zone_name = _cell(cells, layout, m.timezone_column) or layout.zone_name
    tz = zone(zone_name)
    time_column = m.opened_at or m.due_at
    when = _parse_time(cells[layout.index[time_column]], tz, time_column)
    anchor = (_parse_time(cells[layout.index[m.anchor_at]], tz, m.anchor_at)
              if m.anchor_at else None)
    attributes = _attributes(cells, layout)
    if m.outcomes is not None:  # an unknown value is a bad row (import_outcomes)
        _outcome_of(cells, layout, m.outcomes)
    return EnqueueRequest(
        dispute_id=did, materiality=money, source_hash=source_hash,
        tier=_cell(cells, layout, m.tier) or m.default_tier,
        opened_at=when if m.opened_at else None, due_at=when if m.due_at else None,
        ladder=m.ladder, external_id=external, anchor_at=anchor,
        source=m.external_source,  # every row's: one shape key for the whole file
        timezone=zone_name,
        calendar=_cell(cells, layout, m.calendar_column) or m.calendar or None,
        attributes=attributes or None,
        source_attributes=_kept(cells, layout) if layout.kept else None,
    )


def _kept(cells: list[str], layout: CsvLayout) -> dict[str, str] | None:
    """The row's source attributes: each kept column's non-blank cell (stripped), under its
    header; None when every such cell is blank.

    Raises:
        InvalidInput: a cell past the value bound (``domain.source_attributes``), naming
            ``source_attributes.<column>``.
    """
    # the names were checked with the mapping and every kept cell for control characters
    # with the other mapped cells (``_row_request``): only the value bound is left
    kept: dict[str, str] = {}
    for column, i in layout.kept:
        cell = cells[i].strip()
        if cell:
            if len(cell) > MAX_VALUE_CHARS:
                where = f"source_attributes.{column}"
                raise InvalidInput(f"{where}: {len(cell)} characters; at most "
                                   f"{MAX_VALUE_CHARS}", field=where)
            kept[column] = cell
    return kept or None


def _outcome_of(cells: list[str], layout: CsvLayout,
                outcomes: OutcomeMapping) -> tuple[OutcomeStep | None, bool | None]:
    """The row's outcome step (None: blank cell) and its timeliness (None: not stated).

    Raises:
        InvalidInput: a value the mapping does not list, in either column.
    """
    step = outcomes.step(_cell(cells, layout, outcomes.column))
    return step, outcomes.timely(_cell(cells, layout, outcomes.timely_column))


def iter_outcomes(
    stream: TextIO, mapping: ColumnMapping, default_timezone: str, skip: set[int],
) -> Iterator[OutcomeRow]:
    """Pass 3's read: each row's outcome, for the rows pass 1 found good (``skip``: the
    lines of bad rows) that state one (a blank cell, or a value mapped to ``{}``, states
    none). Reads the id and outcome cells only: pass 1 checked every row.

    Raises:
        InvalidInput: the header does not fit the mapping, or no ``[outcomes]``.
    """
    outcomes = mapping.outcomes
    if outcomes is None:
        raise InvalidInput("the mapping has no [outcomes] table")
    records = _lines(stream, mapping.delimiter)
    layout = _layout(records, mapping, default_timezone)
    for lineno, raw, _, cells in _parsed(records, mapping.delimiter):
        if lineno in skip or not raw.strip():
            continue
        if isinstance(cells, csv.Error):  # pass 1 found the row good: not expected
            raise InvalidInput(f"line {lineno}: {cells}")
        step, timely = _outcome_of(cells, layout, outcomes)
        if step is None or (step.action is None and step.resolution is None):
            continue
        did, external = stable_dispute_id(cells[layout.index[mapping.dispute_id]],
                                          mapping.external_source)
        yield lineno, did, _shown(external, did), step, timely


def _row_money(cells: list[str], layout: CsvLayout) -> str:
    """The row's materiality text: its cell in the mapped materiality column; a blank cell
    takes the mapping's explicit ``default_materiality``; no mapped column, the default or
    :data:`NO_AMOUNT`.

    Raises:
        InvalidInput: a blank (or whitespace-only) cell in a mapped column and no explicit
            default: the amount is missing, and money is never entered silently.
    """
    m = layout.mapping
    if not m.materiality:
        return NO_AMOUNT if m.default_materiality is None else m.default_materiality
    money = _cell(cells, layout, m.materiality)
    if money:
        return money
    if m.default_materiality is None:
        raise InvalidInput(f"materiality: empty cell in column {m.materiality!r}; set "
                           "default_materiality in the mapping to import blanks as that "
                           "amount")
    return m.default_materiality


def _check_utf8(raw: str) -> None:
    """Refuse a record holding bytes that are not UTF-8: a stream opened with
    ``errors="surrogateescape"`` (the CLI's) carries each such byte as a lone surrogate, so
    the row is reported with its line instead of the whole file failing at the decoder.

    Raises:
        InvalidInput: names the first such byte and its character position in the record.
    """
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = raw[exc.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else repr(bad)
        raise InvalidInput(f"not valid UTF-8: {byte} at character {exc.start + 1} of the "
                           "record (save the file as UTF-8)") from None


def _attributes(cells: list[str], layout: CsvLayout) -> dict[str, object]:
    """The row's dispute attributes: the mapping's defaults, overridden by non-empty cells."""
    m = layout.mapping
    attributes: dict[str, object] = dict(m.default_attributes)
    for name, column in m.attribute_columns.items():
        cell = _cell(cells, layout, column)
        if cell:
            attributes[name] = cell
    return attributes


ParsedRow = tuple[int, EnqueueRequest | str]
"""(1-based line number, the request, or the message saying why the row is bad)."""


def iter_requests(
    stream: TextIO, mapping: ColumnMapping, default_timezone: str = DEFAULT_TIMEZONE
) -> Iterator[ParsedRow]:
    """Stream the CSV: one ``(line, request or error message)`` per non-blank record.

    Holds one record at a time. Duplicate ids and ladder checks are the caller's.
    ``default_timezone``: the institution zone of rows for which neither a zone cell nor the
    mapping names one.

    Raises:
        InvalidInput: the header does not fit the mapping (see :func:`_layout`).
    """
    records = _lines(stream, mapping.delimiter)
    layout = _layout(records, mapping, default_timezone)
    for lineno, raw, count, cells in _parsed(records, mapping.delimiter):
        if not raw.strip():
            continue
        try:
            yield lineno, _row_request(layout, raw, cells)
        except (InvalidInput, csv.Error) as exc:
            yield lineno, row_error(exc, lineno, count)


def row_error(exc: Exception, lineno: int, count: int) -> str:
    """The message of a bad record: ``exc``'s, and for a record of several physical lines
    (a quoted field with newlines, or a quote never closed) the lines it spans."""
    if count == 1:
        return str(exc)
    return f"{exc} (the record spans lines {lineno}-{lineno + count - 1}: a quoted field)"


class DuplicateIds:
    """Remembers each dispute id's first line (16-byte keys: about 100 B per row)."""

    def __init__(self) -> None:
        self._first: dict[bytes, int] = {}

    def first_line(self, key: bytes, lineno: int) -> int:
        """The first line that held the id ``key`` (its 16 bytes): ``lineno`` when none did
        before (then recorded)."""
        return self._first.setdefault(key, lineno)

    def check(self, req: EnqueueRequest, lineno: int) -> None:
        """Record ``req``'s id at ``lineno``. Raises InvalidInput if an earlier line had it."""
        did = req.dispute_id
        assert isinstance(did, uuid.UUID)  # noqa: S101 - built by _row_request
        first = self.first_line(did.bytes, lineno)
        if first != lineno:
            shown = req.external_id if req.external_id is not None else str(did)
            raise InvalidInput(f"dispute id {shown!r} already on line {first}")


def plan_import(
    stream: TextIO, mapping: ColumnMapping, default_timezone: str = DEFAULT_TIMEZONE
) -> ImportPlan:
    """Parse and validate every row into memory (small files, the demo); nothing is written.

    Large files go through :func:`import_csv`, which never holds the rows.
    ``default_timezone``: as for :func:`iter_requests` (the ladder version's zone, else the
    deployment's).

    Raises:
        InvalidInput: the header lacks a mapped column, or the time zone is unknown.
    """
    plan = ImportPlan()
    seen = DuplicateIds()
    for lineno, item in iter_requests(stream, mapping, default_timezone):
        plan.rows += 1
        try:
            if isinstance(item, str):
                raise InvalidInput(item)
            seen.check(item, lineno)
            plan.requests.append((lineno, item))
        except InvalidInput as exc:
            plan.errors.append((lineno, str(exc)))
    return plan


@dataclass
class ImportResult:
    """Outcome of :func:`import_csv`.

    Attributes:
        rows: non-blank data records in the file.
        created / existing: disputes newly scheduled / already known (0 when not written).
        errors: every bad row as (1-based line, message), in file order.
        written: False when nothing was written (bad rows without ``skip_invalid``).
        changed: of the ``existing`` rows, those whose source hash differs from the one
            recorded for their dispute (the row changed since it was first imported), as
            the id the file gives (external id, else the dispute UUID), in file order. The
            ledger is append-only: the recorded escalation stands and the row is not
            applied; the caller reports them.
        rescheduled: of the ``existing`` rows, those still pending whose Redis entry was
            missing and that were scheduled again from their recorded state (the last
            batches of an interrupted import, or a Redis that lost data).
        outcomes: what pass 3 recorded (``import_outcomes.OutcomeReport``: added, already
            on record, not applied); None when the mapping has no ``[outcomes]`` or nothing
            was written.
    """

    rows: int = 0
    created: int = 0
    existing: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    written: bool = False
    changed: list[str] = field(default_factory=list)
    rescheduled: int = 0
    outcomes: OutcomeReport | None = None


@dataclass(frozen=True, slots=True)
class ImportTarget:
    """Where and how rows are written (the ports and the ladder/calendar context).

    ``on_scheduled``: as for ``enqueue_many``. ``warnings``: the pre-breach warnings queue
    (the CLI passes it, so imported escalations get their warnings like enqueued ones): each
    newly scheduled escalation's warnings are scheduled there exactly as the
    ``bootstrap.schedule_for`` hook schedules them (``warnings.schedule_warnings``); the bulk
    path computes them once per request shape instead of once per row and, when the queue
    has the scheduler's namespace and shards, lets the enqueue script write them in the
    same call (``EncodedScheduler.enqueue_encoded``). ``events``: the same audit store as
    the event log of ``record_action`` / ``resolve``, required by a mapping with
    ``[outcomes]``. ``on_replanned``: the hook scheduling the pre-breach warnings of a due
    time an imported action re-planned (``record_action``'s). ``pipeline``: how pass 2
    overlaps a batch's Redis step with the next batch's PostgreSQL step (the CLI's:
    ``bootstrap.write_pipeline``). ``helper``: the process that renders every other chunk
    of pass 1 of a large file (``import_parallel``; the CLI's: ``bootstrap.pass1_helper``,
    a forked child where the machine has two CPUs); None: pass 1 in this process only.
    ``fanout``: how pass 3 records several rows' outcomes at once (the CLI's:
    ``bootstrap.outcome_fanout``, helper threads); :data:`~escalation.service_layer.core.
    ONE_BY_ONE` by default.
    """

    scheduler: Scheduler
    store: AuditLog
    ladders: LadderSource
    calendars: CalendarRegistry
    default_ladder: str
    actor: str
    on_scheduled: OnScheduled | None = None
    warnings: WarningQueue | None = None
    events: ObligationStore | None = None
    on_replanned: OnScheduled | None = None
    pipeline: Pipeline = IN_ORDER
    helper: HelperProcess | None = None
    fanout: Fanout = ONE_BY_ONE

    def hook(self) -> OnScheduled | None:
        """``on_scheduled`` and the warnings of :attr:`warnings` as one hook (the general
        path's), or None when neither is set."""
        hook, queue = self.on_scheduled, self.warnings
        if queue is None:
            return hook
        ladders, calendars = self.ladders, self.calendars

        def both(escalations: Sequence[Escalation]) -> None:
            if hook is not None:
                hook(escalations)
            schedule_warnings(escalations, warnings=queue, ladders=ladders,
                              calendars=calendars)

        return both

    def default_timezone(self, mapping: ColumnMapping) -> str:
        """The institution zone of rows that name none (:func:`default_timezone`)."""
        return default_timezone(mapping, self.ladders, self.calendars, self.default_ladder)


def default_timezone(mapping: ColumnMapping, ladders: LadderSource,
                     calendars: CalendarRegistry, default_ladder: str) -> str:
    """The institution zone of rows that name none: the mapping's, else the latest ladder
    version's ``[institution] timezone``, else the deployment's. Raises LadderError."""
    if mapping.timezone:
        return mapping.timezone
    ladder = ladders.latest(mapping.ladder or default_ladder)
    return ladder.institution_timezone or institution_defaults(calendars)[1]


OpenCsv = Callable[[], TextIO]
"""Opens the CSV afresh (each pass reads it from the start); the caller closes nothing."""

IMPORT_BATCH = 5_000
PROGRESS_EVERY = 2_000
SPILL_CHUNK = 1_000
"""Built rows per pickled record of the spill file (one ``pickle.dump`` per chunk)."""

_ESC_FIELDS = tuple(f.name for f in fields(Escalation))
_MONEY = _ESC_FIELDS.index("materiality")
SpillRow = tuple[tuple[object, ...], dict[str, object], str]
"""One built row in the spill file: the escalation's field values (in ``Escalation`` field
order, the materiality as its Decimal amount: plain values pickle several times faster than
frozen dataclasses), its details and its calendar version. Nothing is validated again on
reading: the values are the ones pass 1 validated, written and read by this process."""


def rebatch(chunks: Iterable[list[Any]], size: int) -> Iterator[list[Any]]:
    """The rows of ``chunks``, in order, in lists of ``size`` (the last may be shorter),
    whatever the chunks' own sizes."""
    batch: list[Any] = []
    for chunk in chunks:
        batch += chunk
        while len(batch) >= size:
            yield batch[:size]
            batch = batch[size:]
    if batch:
        yield batch


class SpillFile:
    """Pass 1's built rows, pickled in chunks to an anonymous temporary file (deleted on
    close), so pass 2 writes them without parsing and building every row a second time.

    Only this process writes and reads the file (it is never named, so nothing else can
    open it); its contents are the ones :meth:`add` received.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._chunk: list[SpillRow] = []
        self.rows = 0
        self.rendered = False
        """True when the rows were added rendered (:meth:`add_row`), else built."""

    def add(self, built: BuiltEnqueue) -> None:
        """Append one built row."""
        esc = built.escalation
        values = [getattr(esc, f) for f in _ESC_FIELDS]
        values[_MONEY] = esc.materiality.amount  # a Decimal pickles far faster
        self._chunk.append((tuple(values), built.details, built.calendar_version))
        self.rows += 1
        if len(self._chunk) >= SPILL_CHUNK:
            self._flush()

    def add_row(self, row: object) -> None:
        """Append one rendered row (:class:`RowEncoder`), read back by :meth:`raw_batches`."""
        self._chunk.append(row)  # type: ignore[arg-type]
        self.rows += 1
        if len(self._chunk) >= SPILL_CHUNK:
            self._flush()

    def raw_batches(self, size: int) -> Iterator[list[Any]]:
        """Every row given to :meth:`add_row`, in order, in lists of at most ``size``."""
        return rebatch(self._chunks(), size)

    def _chunks(self) -> Iterator[list[Any]]:
        """The pickled chunks written so far, from the start of the file."""
        self._flush()
        self._file.seek(0)
        while True:
            try:
                yield pickle.load(self._file)  # noqa: S301 - our own file
            except EOFError:
                return

    def _flush(self) -> None:
        if self._chunk:
            pickle.dump(self._chunk, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._chunk = []

    def batches(self, size: int) -> Iterator[list[BuiltEnqueue]]:
        """Every row added, in order, in lists of at most ``size``."""
        batch: list[BuiltEnqueue] = []
        chunk: list[SpillRow]
        for chunk in self._chunks():
            for values, details, version in chunk:
                fields_ = list(values)
                fields_[_MONEY] = Materiality(fields_[_MONEY])  # type: ignore[arg-type]
                batch.append(BuiltEnqueue(Escalation(*fields_), details, version))  # type: ignore[arg-type]
                if len(batch) >= size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def close(self) -> None:
        """Delete the file."""
        self._file.close()


EncodedRow = tuple[str, str, Any, "tuple[object, ...] | None",
                   "tuple[tuple[str, int], ...] | None", str, "str | None"]
"""One row as the bulk path writes it: (dispute id as a canonical UUID string, its staging
COPY line, its rendered Redis enqueue, the field values of its recorded escalation when an
``on_scheduled`` hook needs the escalation back (else None), its pre-breach warnings
when a warnings queue is given (else None) as (member text after the dispute id, i.e.
``":<seq>:<fraction>"``, due epoch ms) pairs, its source hash and its external id (the
objects the line and the enqueue hold already, so a pickled spill stores them once))."""

_SHAPE_CACHE_MAX = 512


@dataclass(slots=True)
class _Shape:
    """What every row of one request shape shares: the templates of its two writes, the
    recorded prototype (for the field values an ``on_scheduled`` hook needs), its warnings,
    and whether the templates were prepared (on the shape's second row: a shape seen once,
    e.g. every row of a file of distinct timestamps, is rendered the general way)."""

    line: LineTemplate
    payload: RowTemplate
    recorded: Escalation
    warnings: tuple[tuple[str, int], ...] | None
    prepared: bool = False


class RowEncoder:
    """Pass 1's per-row build for the bulk path: each request is validated and rendered into
    the final values pass 2 writes (the staging COPY line with the ENQUEUED row's hash and
    the Redis enqueue arguments), so pass 2 only streams.

    A request's *shape* is everything but its dispute id, external id, source hash, trace
    id and source attributes (materiality, tier, opening or due time, anchor, zone, calendar,
    attributes, source name, and whether it has source attributes). The
    build (``build_one``: ladder, calendars, deadlines, due time, provenance) depends only on
    the shape, so it runs once per shape (at most :data:`_SHAPE_CACHE_MAX` remembered), and
    its error, if any, is the error of every row of that shape. The per-row checks of
    ``Escalation.new`` (external id text and length) run on every row, after the shape's, as
    they do in ``build_one``. A CFPB file has a few hundred shapes (one per opening day).
    """

    def __init__(self, ports: BulkPorts, target: ImportTarget, ladder: Ladder,
                 now: datetime) -> None:
        """``ports``: the target's bulk store and scheduler (:func:`bulk_ports`); ``target``
        gives the calendars and actor, and whether each row also carries its recorded field
        values (an ``on_scheduled`` hook needs the escalations) and its pre-breach warnings
        (a warnings queue: ``warning_members`` of its shape, with the target's ladders);
        ``now``: the import's decision instant (aware)."""
        self._warnings_of = None if target.warnings is None else target.ladders
        self._store, self._scheduler = ports
        self._ladder = ladder
        self._calendars = target.calendars
        self._now = now
        self._actor = target.actor
        self._keep = target.on_scheduled is not None
        self._shapes: dict[tuple[object, ...], _Shape | str] = {}

    def encode(self, req: EnqueueRequest) -> EncodedRow:
        """Validate ``req`` exactly as ``build_one`` does and render its writes.

        Raises:
            InvalidInput: the message ``build_one`` would raise for ``req``.
        """
        key = self.shape_key(req)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shape(req)
            if len(self._shapes) >= _SHAPE_CACHE_MAX:
                self._shapes.clear()
            self._shapes[key] = shape
        elif isinstance(shape, _Shape) and not shape.prepared:
            shape.line.prepare()
            shape.payload.prepare()
            shape.prepared = True
        if isinstance(shape, str):
            raise InvalidInput(shape)
        ext = req.external_id
        if ext is not None:
            check_text(ext, "external id")
            if len(ext) > MAX_EXTERNAL_ID_LEN:
                raise InvalidInput(
                    f"external id longer than {MAX_EXTERNAL_ID_LEN} characters")
        did = str(req.dispute_id)
        source_hash = req.source_hash
        assert isinstance(source_hash, str)  # noqa: S101 - checked by _row_request
        trace = req.trace_id or trace_id_source.new_trace_id()
        # the source attributes were checked when the row was read (``_row_request``)
        line = shape.line.render(did, ext, source_hash, trace, req.source_attributes)
        payload = shape.payload.render(did, ext, source_hash, trace)
        values = None
        if self._keep:
            values = _recorded_values(shape.recorded, req.dispute_id, ext, source_hash, trace)
        return did, line, payload, values, shape.warnings, source_hash, ext

    @staticmethod
    def shape_key(req: EnqueueRequest) -> tuple[object, ...]:
        """Everything of ``req`` its build depends on (all but the per-row values)."""
        attrs = req.attributes
        return (req.materiality, req.tier, req.due_at, req.opened_at, req.ladder,
                req.anchor_at, req.timezone, req.calendar, req.source,
                None if attrs is None else tuple(attrs.items()), bool(req.source_attributes))

    def _shape(self, req: EnqueueRequest) -> _Shape | str:
        """The templates of ``req``'s shape, or the message of the error its build raises
        (built with no external id: its per-row checks are :meth:`encode`'s)."""
        try:
            built = build_one(replace(req, external_id=None, trace_id=req.trace_id or "0",
                                      source_attributes=None),
                              self._ladder, self._calendars, self._now)
        except InvalidInput as exc:
            return str(exc)
        esc = built.escalation
        recorded = replace(esc, seq=1)
        line = self._store.enqueued_line_template(esc, self._actor, self._now,
                                                  built.calendar_version, built.details)
        points = None
        if self._warnings_of is not None:  # they depend on the shape only, not the dispute
            points = tuple((m.member[len(str(m.dispute_id)):], m.due_ms)
                           for m in warning_members([recorded], self._warnings_of,
                                                    self._calendars))
        return _Shape(line, self._scheduler.payload_template(recorded), recorded, points)


def _recorded_values(proto: Escalation, dispute_id: object, external_id: str | None,
                     source_hash: str, trace_id: str) -> tuple[object, ...]:
    """The field values (``Escalation`` order, materiality as its Decimal) of ``proto`` with
    these per-row values: what :func:`_escalation_of` turns back into the escalation."""
    values = [getattr(proto, f) for f in _ESC_FIELDS]
    values[_MONEY] = proto.materiality.amount
    values[_ID] = dispute_id
    values[_EXT] = external_id
    values[_HASH] = source_hash
    values[_TRACE] = trace_id
    return tuple(values)


def _escalation_of(values: tuple[object, ...]) -> Escalation:
    """The escalation of :func:`_recorded_values` (already validated: no checks)."""
    fields_ = list(values)
    fields_[_MONEY] = Materiality(fields_[_MONEY])  # type: ignore[arg-type]
    return Escalation(*fields_)  # type: ignore[arg-type]


_ID = _ESC_FIELDS.index("dispute_id")
_EXT = _ESC_FIELDS.index("external_id")
_HASH = _ESC_FIELDS.index("source_hash")
_TRACE = _ESC_FIELDS.index("trace_id")


BulkPorts = tuple[StagedEnqueueLog, EncodedScheduler]
"""The store and scheduler of the bulk path."""


def bulk_ports(target: ImportTarget) -> BulkPorts | None:
    """The target's store and scheduler when both offer the bulk path, else None (the rows
    then go through ``build_one`` and ``record_batches``)."""
    store, scheduler = target.store, target.scheduler
    if isinstance(store, StagedEnqueueLog) and isinstance(scheduler, EncodedScheduler):
        return store, scheduler
    return None


SHAPE_SAMPLE = 1_000
"""Rows at the start of a file whose shapes decide between the bulk and general path."""


def shapes_repeat(head: Sequence[ParsedRow]) -> bool:
    """True when the good rows of ``head`` have at most half as many distinct shapes as rows
    (a CFPB file: a few dozen per thousand rows) or there are none: the bulk path's
    templates then pay. A file of distinct shapes (e.g. per-second opening times) takes the
    general path, which renders each row once instead of building a template for it."""
    keys = [RowEncoder.shape_key(req) for _, req in head if not isinstance(req, str)]
    return len(set(keys)) * 2 <= len(keys) or not keys


@dataclass(frozen=True, slots=True)
class ImportCsv:
    """The command of :func:`import_csv`: which file, read how, written how.

    Attributes:
        open_csv: opens the CSV afresh (each pass reads it from the start).
        mapping: how its columns map to an escalation (:class:`ColumnMapping`).
        skip_invalid: write the good rows of a file that has bad ones (else nothing).
        batch_size: rows per transaction of pass 2 (:data:`IMPORT_BATCH`).
        bulk: take the bulk path when the target's store and scheduler offer it
            (:func:`bulk_ports`); False = the general path, which writes the same rows.
        processes: pass 1 of a large file on the bulk path in 2 processes (this one and
            the target's ``helper``), or in this one (1); None = 2 when the target has a
            helper, else 1.
    """

    open_csv: OpenCsv
    mapping: ColumnMapping
    skip_invalid: bool = False
    batch_size: int = IMPORT_BATCH
    bulk: bool = True
    processes: int | None = None


@dataclass(frozen=True, slots=True)
class ImportRun:
    """One import under way: where it writes, its decision instant (Redis TIME, read once),
    the progress callback and pass 2's batch size."""

    target: ImportTarget
    now: datetime
    progress: Progress = no_progress
    batch_size: int = IMPORT_BATCH


def validate_pass(cmd: ImportCsv, run: ImportRun, spill: SpillFile | None = None,
                  encoder: RowEncoder | None = None,
                  defer_large: bool = False) -> ImportResult | None:
    """Pass 1: every row of ``cmd``'s file parsed and built at ``run.now``; returns the row
    count and bad rows.

    ``spill`` (optional) receives every good row as built (pass 2 writes those); with an
    ``encoder``, as rendered by it (:meth:`SpillFile.add_row`), else as built. The encoder
    is used only when the first :data:`SHAPE_SAMPLE` rows repeat their shapes
    (:func:`shapes_repeat`); ``spill.rendered`` says which way the rows were spilled.
    ``defer_large``: return None, having read only those first rows, when the encoder is
    used and the file has at least :data:`SHAPE_SAMPLE` rows (the caller then runs the
    two-process pass 1, ``import_parallel``).

    Raises:
        InvalidInput: the header does not fit the mapping. LadderError: unknown ladder.
    """
    target, mapping, now, progress = run.target, cmd.mapping, run.now, run.progress
    ladder = target.ladders.latest(mapping.ladder or target.default_ladder)
    result = ImportResult()
    seen = DuplicateIds()
    with cmd.open_csv() as stream:
        items: Iterator[ParsedRow] = iter_requests(stream, mapping,
                                                   target.default_timezone(mapping))
        if encoder is not None:  # templates pay only when shapes repeat: look at the start
            head = list(islice(items, SHAPE_SAMPLE))
            if not shapes_repeat(head):
                encoder = None
            elif defer_large and len(head) >= SHAPE_SAMPLE:
                return None
            items = chain(head, items)
        if spill is not None:
            spill.rendered = encoder is not None
        for lineno, item in items:
            result.rows += 1
            try:
                if isinstance(item, str):
                    raise InvalidInput(item)
                seen.check(item, lineno)
                if encoder is not None:
                    row = encoder.encode(item)
                    if spill is not None:
                        spill.add_row(row)
                else:
                    built = build_one(item, ladder, target.calendars, now)
                    if spill is not None:
                        spill.add(built)
            except InvalidInput as exc:
                result.errors.append((lineno, str(exc)))
            if result.rows % PROGRESS_EVERY == 0:
                progress("validate", result.rows, None)
    progress("validate", result.rows, result.rows)
    return result


def write_pass(spill: SpillFile, run: ImportRun, result: ImportResult) -> None:
    """Pass 2: record and schedule the rows pass 1 built (``spill``), ``run.batch_size`` per
    transaction (Redis of one batch overlapping PostgreSQL of the next: ``record_batches``).

    Updates ``result.created`` / ``result.existing`` and sets ``result.written``.
    """
    target, now, progress, batch_size = run.target, run.now, run.progress, run.batch_size
    done = 0
    progress("write", 0, spill.rows)  # pass 2 begins: from here on rows may be recorded
    sent: deque[list[BuiltEnqueue]] = deque()  # batches handed to record_batches, in order

    def batches() -> Iterator[list[BuiltEnqueue]]:
        for batch in spill.batches(batch_size):
            sent.append(batch)
            yield batch

    counting = _CountingHook(target.hook())
    ports = CorePorts(target.scheduler, target.store, target.ladders, target.calendars,
                      target.pipeline)
    for res in record_batches(batches(), ports, target.actor, now, counting):
        created = sum(1 for r in res if r.created)
        result.created += created
        result.existing += len(res) - created
        built = sent.popleft()  # the batch these results answer
        if created < len(res):
            result.changed += [_shown(b.escalation.external_id, b.escalation.dispute_id)
                               for b, r in zip(built, res, strict=True)
                               if not r.created
                               and r.escalation.source_hash != b.escalation.source_hash]
        done += len(res)
        progress("write", done, spill.rows)
    progress("write", done, spill.rows)
    # every Redis step has ended: what was newly scheduled beyond the rows created now was
    # a recorded (existing) escalation whose Redis entry had gone
    result.rescheduled += max(0, counting.count - result.created)
    result.written = True


class _CountingHook:
    """An ``on_scheduled`` hook that counts the escalations it is handed (the newly
    scheduled ones) and passes them on to ``inner`` (if any). Called from one thread at a
    time (the pipeline keeps one Redis step in flight)."""

    def __init__(self, inner: OnScheduled | None) -> None:
        self.inner = inner
        self.count = 0

    def __call__(self, escalations: Sequence[Escalation]) -> None:
        """Count ``escalations``, then hand them to the inner hook."""
        self.count += len(escalations)
        if self.inner is not None:
            self.inner(escalations)


class RenderedRows(Protocol):
    """Where pass 1 of the bulk path left its rendered rows: :class:`SpillFile` (one
    process) or ``import_parallel.ChunkSpill`` (two)."""

    rows: int

    def raw_batches(self, size: int) -> Iterator[list[Any]]:
        """The rendered rows pass 2 writes, in file order, in lists of at most ``size``."""
        ...


def write_encoded_pass(spill: RenderedRows, ports: BulkPorts, run: ImportRun,
                       result: ImportResult) -> None:
    """Pass 2 of the bulk path: the rows pass 1 rendered (``spill``, :class:`RowEncoder`),
    ``run.batch_size`` per transaction, with the order and overlap of ``record_batches``: each
    batch is recorded in PostgreSQL (one COPY + one INSERT ... SELECT) before its new
    disputes are scheduled in Redis (``target.pipeline`` decides whether that Redis step
    overlaps the recording of the next batch). A dispute PostgreSQL already knew is answered
    as ``enqueue`` answers it: counted as existing and, when still pending, its recorded
    state re-scheduled (a no-op unless its Redis entry was lost).

    Updates ``result.created`` / ``result.existing`` and sets ``result.written``.
    """
    (store, scheduler), target, progress = ports, run.target, run.progress
    progress("write", 0, spill.rows)  # pass 2 begins: from here on rows may be recorded
    queue = target.warnings
    # the scheduler's own enqueue call writes the warnings when they land in this queue
    fold = queue is not None and (queue.namespace, queue.shards) == (scheduler.namespace,
                                                                      scheduler.shards)
    hook = _BulkHook(target.on_scheduled, None if fold else queue, fold)

    def record(batch: list[Any]) -> _Staged:
        created = store.record_staged([r[1] for r in batch], target.actor)
        # the COPY lines are written: drop them (a batch of lines is several MB)
        new = [(r[0], "", r[2], r[3], r[4], r[5], r[6]) for r in batch if r[0] in created]
        old = [r for r in batch if r[0] not in created] if len(new) < len(batch) else []
        result.created += len(new)
        result.existing += len(old)
        return _Staged(new, old, len(batch))

    def behind(staged: _Staged) -> None:
        if staged.new:
            _schedule_encoded(scheduler, staged.new, hook)

    def existing(staged: _Staged, _: None) -> None:
        if staged.old:  # rare (a re-import): their recorded states, as record_batches does
            changed, rescheduled = _schedule_existing(staged.old, store, scheduler, target,
                                                      hook)
            result.changed += changed
            result.rescheduled += rescheduled

    done = 0
    for staged in target.pipeline.run(spill.raw_batches(run.batch_size), record, behind,
                                      existing):
        done += staged.rows
        progress("write", done, spill.rows)
    progress("write", done, spill.rows)
    result.written = True


@dataclass(slots=True)
class _Staged:
    """One batch of pass 2 recorded in PostgreSQL: the rows it created (to schedule), the
    rows PostgreSQL already held, and how many rows the batch had."""

    new: list[EncodedRow]
    old: list[EncodedRow]
    rows: int


@dataclass(frozen=True, slots=True)
class _BulkHook:
    """What the bulk path does with newly scheduled rows: the ``on_scheduled`` hook (with
    the escalations rebuilt from the values pass 1 kept) and the warnings pass 1 rendered,
    either written by the enqueue call itself (``folded``: the queue is the scheduler's
    namespace and shards) or afterwards through ``warnings``."""

    on_scheduled: OnScheduled | None
    warnings: WarningQueue | None
    folded: bool = False

    def __call__(self, rows: Sequence[EncodedRow]) -> None:
        """Hand ``rows`` (newly scheduled) to the hook, then schedule their warnings."""
        if self.on_scheduled is not None:
            self.on_scheduled([_escalation_of(r[3]) for r in rows if r[3] is not None])
        if self.warnings is not None:  # WarningMember(id, seq, fraction, ms).member, ms
            members = [(r[0] + tail, ms) for r in rows if r[4] for tail, ms in r[4]]
            if members:
                self.warnings.schedule_members(members)


def _schedule_encoded(scheduler: EncodedScheduler, rows: Sequence[EncodedRow],
                      hook: _BulkHook) -> None:
    """Enqueue rendered rows in Redis (with their warnings when ``hook.folded``); pass the
    newly scheduled ones to ``hook``."""
    flags = scheduler.enqueue_encoded([r[2] for r in rows],
                                      [r[4] for r in rows] if hook.folded else None)
    if hook.on_scheduled is not None or hook.warnings is not None:
        hook([r for r, new in zip(rows, flags, strict=True) if new])


def _schedule_existing(rows: Sequence[EncodedRow], store: StagedEnqueueLog,
                       scheduler: EncodedScheduler, target: ImportTarget,
                       hook: _BulkHook) -> tuple[list[str], int]:
    """Re-schedule the disputes of ``rows`` PostgreSQL already held, from their recorded
    state (read in one query per batch), when they are still pending (``record_batches``'
    answer to a replay). Returns the rows whose source hash differs from the recorded one,
    as the id the file gives (:attr:`ImportResult.changed`), and how many were newly
    scheduled (:attr:`ImportResult.rescheduled`)."""
    ids = [uuid.UUID(r[0]) for r in rows]
    recorded = store.get_many(ids)
    states: list[Escalation] = []
    orphans: list[EncodedRow] = []
    changed: list[str] = []
    for did, r in zip(ids, rows, strict=True):
        esc = recorded.get(did)
        if esc is None:  # not possible while projection rows are never deleted
            orphans.append(r)
            continue
        if r[5] != esc.source_hash:
            changed.append(_shown(r[6], did))
        if esc.status is Status.PENDING:
            states.append(esc)
    counting = _CountingHook(target.hook())
    if states:
        schedule(target.scheduler, states, counting)
    if orphans:
        _schedule_encoded(scheduler, orphans, hook)
    return changed, counting.count


def _shown(external_id: str | None, dispute_id: object) -> str:
    """A row's id as its file gives it: the external id, else the dispute UUID."""
    return external_id if external_id is not None else str(dispute_id)


def import_csv(cmd: ImportCsv, target: ImportTarget,
               progress: Progress = no_progress) -> ImportResult:
    """Validate the whole CSV, then (if allowed) write it in batches; constant memory.

    Nothing is written when a row is bad and not ``cmd.skip_invalid``, or when no row is
    good. ``cmd.bulk`` (default): take the bulk path when the target's store and scheduler
    offer it (:func:`bulk_ports`); False = the general path (``build_one`` +
    ``record_batches``), which writes the same rows.
    ``cmd.processes``: 2 runs pass 1 of the bulk path in this process and the target's
    helper process (``import_parallel``; the same rows and errors), 1 in this process only;
    None (default): 2 when the target has a helper. Files of fewer than
    :data:`SHAPE_SAMPLE` rows always use one process.
    Memory: one spill chunk, two batches of rows and at most 512 request shapes, plus about
    100 B per row for the duplicate check; the rows wait in a temporary file (about 800 B
    per CFPB-shaped row on the bulk path, about 220 B built).

    With ``mapping.outcomes``, pass 3 records each good row's outcome (action, resolution)
    through the use cases after pass 2, for new and already enqueued disputes alike
    (``import_outcomes``); a re-import adds only the missing ones. With
    ``mapping.keep_columns``, each escalation's ENQUEUED row records those cells as its
    source attributes (``domain.source_attributes``).

    Raises:
        InvalidInput: the header does not fit the mapping (a mapped or kept column it lacks
            is named), ``[outcomes]`` names an action the ladder does not declare (or the
            target has no ``events``), or ``processes`` is 2 and the target has no helper
            process. LadderError: unknown ladder.
        OSError / UnicodeDecodeError: from ``open_csv`` or reading.
        RuntimeError: the pass 1 helper process ended without its results.
    """
    mapping = cmd.mapping
    if cmd.processes == 2 and target.helper is None:
        raise InvalidInput("processes: 2 needs a helper process and this import target has "
                           "none (1: pass 1 in this process only)")
    if mapping.outcomes is not None:
        if target.events is None:
            raise InvalidInput("[outcomes]: this import target records no outcomes (no "
                               "event log)")
        mapping.outcomes.check(target.ladders.latest(mapping.ladder or target.default_ladder))
    run = ImportRun(target, target.scheduler.time(), progress, cmd.batch_size)
    result = _import_rows(cmd, run)
    if result.written and mapping.outcomes is not None and target.events is not None:
        result.outcomes = _outcomes_pass(cmd, target, target.events, result, progress)
    return result


def _outcomes_pass(cmd: ImportCsv, target: ImportTarget, events: ObligationStore,
                   result: ImportResult, progress: Progress) -> OutcomeReport:
    """Pass 3: the outcomes of the rows written (``import_outcomes.record_outcomes``)."""
    mapping = cmd.mapping
    assert mapping.outcomes is not None  # noqa: S101 - the caller's check
    skip = {line for line, _ in result.errors}
    ports = OutcomePorts(target.scheduler, events, target.ladders, target.calendars,
                         target.on_replanned, target.fanout)
    with cmd.open_csv() as stream:
        rows = iter_outcomes(stream, mapping, target.default_timezone(mapping), skip)
        return record_outcomes(RecordOutcomes(rows, mapping.outcomes, target.actor,
                                              result.rows - len(skip)), ports, progress)


def _import_rows(cmd: ImportCsv, run: ImportRun) -> ImportResult:
    """Passes 1 and 2 of :func:`import_csv` (the disputes, without their outcomes)."""
    target = run.target
    ports = bulk_ports(target) if cmd.bulk else None
    encoder = None
    if ports is not None:
        ladder = target.ladders.latest(cmd.mapping.ladder or target.default_ladder)
        encoder = RowEncoder(ports, target, ladder, run.now)
    helper = None if cmd.processes == 1 else target.helper
    spill = SpillFile()
    try:
        result = validate_pass(cmd, run, spill, encoder,
                               defer_large=ports is not None and helper is not None)
        if result is None:  # a large file of repeating shapes: pass 1 in two processes
            assert ports is not None and encoder is not None  # noqa: S101 - defer_large
            assert helper is not None  # noqa: S101 - defer_large
            return _import_two_processes(cmd, run, ports, encoder, helper)
        if result.errors and (not cmd.skip_invalid or len(result.errors) == result.rows):
            return result
        if ports is not None and spill.rendered:
            write_encoded_pass(spill, ports, run, result)
        else:
            write_pass(spill, run, result)
    finally:
        spill.close()
    return result


def _import_two_processes(cmd: ImportCsv, run: ImportRun, ports: BulkPorts,
                          encoder: RowEncoder, helper: HelperProcess) -> ImportResult:
    """:func:`import_csv` of the bulk path with pass 1 in this process and ``helper``
    (``import_parallel``)."""
    from escalation.service_layer import import_parallel  # it imports this module

    chunks = import_parallel.ChunkSpill()
    try:
        job = import_parallel.ParallelPass(
            cmd.open_csv, cmd.mapping, run.target.default_timezone(cmd.mapping), encoder)
        result = import_parallel.parallel_validate_pass(job, chunks, helper, run.progress)
        if result.errors and (not cmd.skip_invalid or len(result.errors) == result.rows):
            return result
        write_encoded_pass(chunks, ports, run, result)
    finally:
        chunks.close()
    return result

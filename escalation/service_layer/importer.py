"""Use case: ``escalation import`` -- load disputes from a CSV with a column mapping.

Each row becomes an :class:`EnqueueRequest`. A non-UUID dispute id (e.g. CFPB "Complaint
ID") is mapped to a stable UUID5 in a per-source namespace and kept as ``external_id``; the
source hash is the SHA-256 of the row's raw CSV line. A date-only value is the start of that
day in the mapping's time zone (default UTC). Every row is validated before anything is
written: a file with any bad row imports nothing unless ``skip_invalid``.

:func:`import_csv` streams the file twice in constant memory (docs/performance.md, "CSV
import"): pass 1 parses and validates every row (against the ladders and calendars, at one
Redis TIME instant) and keeps only the dispute ids seen (duplicate check) and the bad rows;
pass 2, only when pass 1 allows writing, re-reads the file and records + schedules the good
rows in batches (ledger rows by ``COPY``). Both passes build each request the same way at
the same instant, so pass 2 cannot meet an error pass 1 did not report.
"""

from __future__ import annotations

import csv
import hashlib
import io
import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, time
from pathlib import Path
from typing import TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import check_source_hash, check_text, parse_dispute_id
from escalation.domain.materiality import Materiality
from escalation.ports import AuditLog, LadderSource, Scheduler
from escalation.service_layer.enqueue import EnqueueRequest, build_escalation, enqueue_many
from escalation.service_layer.progress import Progress, no_progress

ID_NAMESPACE = uuid.UUID("5b0f6f3e-52c5-4bb9-9a3c-0b6a4e1f7d21")  # escalation import ids


@dataclass(frozen=True, slots=True)
class ColumnMapping:
    """How CSV columns map to an escalation. Empty column name = not in the file.

    Attributes:
        dispute_id: column holding the dispute id (UUID or any stable id).
        opened_at: column with the instant the dispute entered its tier (date or ISO time).
        due_at: column with the breach instant (alternative to ``opened_at``).
        tier / materiality / source_hash: optional columns.
        default_tier / default_materiality: used when the column is absent or empty.
        timezone: IANA zone for date-only or naive values.
        external_source: names the UUID5 namespace of non-UUID ids (e.g. ``"cfpb"``).
        ladder: ladder name (None = the configured default).
    """

    dispute_id: str = "dispute_id"
    opened_at: str = ""
    due_at: str = ""
    tier: str = ""
    materiality: str = ""
    source_hash: str = ""
    default_tier: str | None = None
    default_materiality: str = "0.00"
    timezone: str = "UTC"
    external_source: str = "external"
    ladder: str | None = None

    @classmethod
    def from_file(cls, path: Path, **overrides: str | None) -> ColumnMapping:
        """Read a TOML mapping file (``[columns]`` and ``[defaults]`` tables); flags override.

        Raises:
            InvalidInput: unreadable TOML or unknown keys.
        """
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"{path}: cannot read mapping file: {exc}") from None
        unknown = sorted(set(data) - {"columns", "defaults"})
        if unknown:
            raise InvalidInput(
                f"{path}: unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; "
                "a mapping file has [columns] and [defaults]"
            )
        values: dict[str, str | None] = {}
        for table in ("columns", "defaults"):
            values.update(cls._table_values(path, table, data.get(table, {})))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def _table_values(cls, path: Path, table: str, content: object) -> dict[str, str | None]:
        """Field name -> value for one table of a mapping file. Raises InvalidInput."""
        if not isinstance(content, dict):
            raise InvalidInput(f"{path}: [{table}] must be a table of key = \"value\" lines")
        values: dict[str, str | None] = {}
        for key, val in content.items():
            name = key if table == "columns" else (
                key if key in ("timezone", "external_source", "ladder") else f"default_{key}"
            )
            if name not in cls.__dataclass_fields__:
                raise InvalidInput(f"{path}: [{table}] {key}: unknown key")
            values[name] = str(val)
        return values

    def columns(self) -> list[str]:
        """The CSV columns this mapping reads (non-empty names)."""
        return [c for c in (self.dispute_id, self.opened_at, self.due_at, self.tier,
                            self.materiality, self.source_hash) if c]


@dataclass
class ImportPlan:
    """Valid requests (with their 1-based CSV line numbers) and the bad rows found."""

    requests: list[tuple[int, EnqueueRequest]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    rows: int = 0


@dataclass(frozen=True, slots=True)
class CsvLayout:
    """A checked header: its column names, the mapping and the zone of naive values."""

    header: list[str]
    mapping: ColumnMapping
    zone: ZoneInfo


def _parse_time(value: str, zone: ZoneInfo, column: str) -> datetime:
    text = value.strip()
    if not text:
        raise InvalidInput(f"{column}: empty")
    try:
        if len(text) == 10:
            return datetime.combine(datetime.strptime(text, "%Y-%m-%d").date(), time(), zone)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{column}: not an ISO-8601 date or time: {text!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)


def stable_dispute_id(raw: str, source: str) -> tuple[uuid.UUID, str | None]:
    """(UUID, external id): a UUID string is used as is; anything else -> UUID5(source:raw)."""
    try:
        return parse_dispute_id(raw), None
    except InvalidInput:
        text = raw.strip()
        if not text:
            raise InvalidInput("dispute id: empty") from None
        return uuid.uuid5(ID_NAMESPACE, f"{source}:{text}"), text


def _lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    """Physical records with their starting line numbers (quoted newlines kept together)."""
    buf, start = "", 0
    for lineno, line in enumerate(stream, start=1):
        if not buf:
            start = lineno
        buf += line
        if buf.count('"') % 2 == 0:
            yield start, buf
            buf = ""
    if buf:
        yield start, buf


def _layout(records: Iterator[tuple[int, str]], mapping: ColumnMapping) -> CsvLayout:
    """Read and check the header record against ``mapping``.

    Raises:
        InvalidInput: no header, a mapped column missing, not exactly one of opened_at /
            due_at mapped, or an unknown time zone.
    """
    try:
        zone = ZoneInfo(mapping.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {mapping.timezone!r}") from None
    try:
        _, header_line = next(records)
    except StopIteration:
        raise InvalidInput("empty CSV file (no header)") from None
    header = next(csv.reader(io.StringIO(header_line)))
    missing = [c for c in mapping.columns() if c not in header]
    if missing:
        raise InvalidInput(f"CSV header lacks mapped column(s): {', '.join(missing)}")
    if bool(mapping.opened_at) == bool(mapping.due_at):
        raise InvalidInput("map exactly one of opened_at or due_at to a column")
    return CsvLayout(header, mapping, zone)


def _cell(row: dict[str, str], column: str) -> str:
    """The stripped value of ``column`` ("" when the column is not mapped or empty)."""
    return (row.get(column) or "").strip() if column else ""


def _row_request(layout: CsvLayout, raw: str) -> EnqueueRequest:
    """One CSV record -> an :class:`EnqueueRequest` (not yet checked against the ladder).

    Raises:
        InvalidInput: wrong field count, a control character in a mapped cell, bad id, money,
            source hash or time.
        csv.Error: the record is not valid CSV.
    """
    m = layout.mapping
    cells = next(csv.reader(io.StringIO(raw)))
    if len(cells) != len(layout.header):
        raise InvalidInput(f"expected {len(layout.header)} fields, found {len(cells)}")
    row = dict(zip(layout.header, cells, strict=True))
    for column in m.columns():  # mapped cells only: unmapped free text may hold anything
        check_text(row[column], column)
    did, external = stable_dispute_id(row[m.dispute_id], m.external_source)
    money = _cell(row, m.materiality) or m.default_materiality
    Materiality.parse(money)
    source_hash = check_source_hash(
        _cell(row, m.source_hash) or hashlib.sha256(raw.rstrip("\r\n").encode()).hexdigest()
    )
    time_column = m.opened_at or m.due_at
    when = _parse_time(row[time_column], layout.zone, time_column)
    return EnqueueRequest(
        dispute_id=did, materiality=money, source_hash=source_hash,
        tier=_cell(row, m.tier) or m.default_tier,
        opened_at=when if m.opened_at else None, due_at=when if m.due_at else None,
        ladder=m.ladder, external_id=external,
    )


ParsedRow = tuple[int, EnqueueRequest | str]
"""(1-based line number, the request, or the message saying why the row is bad)."""


def iter_requests(stream: TextIO, mapping: ColumnMapping) -> Iterator[ParsedRow]:
    """Stream the CSV: one ``(line, request or error message)`` per non-blank record.

    Holds one record at a time. Duplicate ids and ladder checks are the caller's.

    Raises:
        InvalidInput: the header does not fit the mapping (see :func:`_layout`).
    """
    records = _lines(stream)
    layout = _layout(records, mapping)
    for lineno, raw in records:
        if not raw.strip():
            continue
        try:
            yield lineno, _row_request(layout, raw)
        except (InvalidInput, csv.Error) as exc:
            yield lineno, str(exc)


class DuplicateIds:
    """Remembers each dispute id's first line (16-byte keys: about 100 B per row)."""

    def __init__(self) -> None:
        self._first: dict[bytes, int] = {}

    def check(self, req: EnqueueRequest, lineno: int) -> None:
        """Record ``req``'s id at ``lineno``. Raises InvalidInput if an earlier line had it."""
        did = req.dispute_id
        assert isinstance(did, uuid.UUID)  # noqa: S101 - built by _row_request
        first = self._first.setdefault(did.bytes, lineno)
        if first != lineno:
            shown = req.external_id if req.external_id is not None else str(did)
            raise InvalidInput(f"dispute id {shown!r} already on line {first}")


def plan_import(stream: TextIO, mapping: ColumnMapping) -> ImportPlan:
    """Parse and validate every row into memory (small files, the demo); nothing is written.

    Large files go through :func:`import_csv`, which never holds the rows.

    Raises:
        InvalidInput: the header lacks a mapped column, or the time zone is unknown.
    """
    plan = ImportPlan()
    seen = DuplicateIds()
    for lineno, item in iter_requests(stream, mapping):
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
    """

    rows: int = 0
    created: int = 0
    existing: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    written: bool = False


@dataclass(frozen=True, slots=True)
class ImportTarget:
    """Where and how rows are written (the ports and the ladder/calendar context)."""

    scheduler: Scheduler
    store: AuditLog
    ladders: LadderSource
    calendars: CalendarRegistry
    default_ladder: str
    actor: str


OpenCsv = Callable[[], TextIO]
"""Opens the CSV afresh (each pass reads it from the start); the caller closes nothing."""

IMPORT_BATCH = 5_000
PROGRESS_EVERY = 2_000


def validate_pass(open_csv: OpenCsv, mapping: ColumnMapping, target: ImportTarget,
                  now: datetime, progress: Progress = no_progress) -> ImportResult:
    """Pass 1: every row parsed and built at ``now``; returns the row count and bad rows.

    Raises:
        InvalidInput: the header does not fit the mapping. LadderError: unknown ladder.
    """
    ladder = target.ladders.latest(mapping.ladder or target.default_ladder)
    result = ImportResult()
    seen = DuplicateIds()
    with open_csv() as stream:
        for lineno, item in iter_requests(stream, mapping):
            result.rows += 1
            try:
                if isinstance(item, str):
                    raise InvalidInput(item)
                seen.check(item, lineno)
                build_escalation(item, ladder, target.calendars, now)
            except InvalidInput as exc:
                result.errors.append((lineno, str(exc)))
            if result.rows % PROGRESS_EVERY == 0:
                progress("validate", result.rows, None)
    progress("validate", result.rows, result.rows)
    return result


def write_pass(open_csv: OpenCsv, mapping: ColumnMapping, target: ImportTarget,
               now: datetime, result: ImportResult, progress: Progress = no_progress,
               batch_size: int = IMPORT_BATCH) -> None:
    """Pass 2: record and schedule every row pass 1 found good, ``batch_size`` at a time.

    Updates ``result.created`` / ``result.existing`` and sets ``result.written``.
    """
    bad = {line for line, _ in result.errors}
    batch: list[EnqueueRequest] = []
    done = 0
    with open_csv() as stream:
        for lineno, item in iter_requests(stream, mapping):
            if lineno in bad or isinstance(item, str):
                continue
            batch.append(item)
            if len(batch) >= batch_size:
                done += _write_batch(batch, target, now, result)
                progress("write", done, result.rows - len(bad))
    done += _write_batch(batch, target, now, result)
    progress("write", done, result.rows - len(bad))
    result.written = True


def _write_batch(batch: list[EnqueueRequest], target: ImportTarget, now: datetime,
                 result: ImportResult) -> int:
    """Enqueue ``batch`` (then empty it); returns how many rows it held."""
    if not batch:
        return 0
    res = enqueue_many(
        batch, scheduler=target.scheduler, store=target.store, ladders=target.ladders,
        calendars=target.calendars, default_ladder=target.default_ladder, actor=target.actor,
        now=now,
    )
    created = sum(1 for r in res if r.created)
    result.created += created
    result.existing += len(res) - created
    count = len(batch)
    batch.clear()
    return count


def import_csv(open_csv: OpenCsv, mapping: ColumnMapping, target: ImportTarget, *,
               skip_invalid: bool = False, progress: Progress = no_progress,
               batch_size: int = IMPORT_BATCH) -> ImportResult:
    """Validate the whole CSV, then (if allowed) write it in batches; constant memory.

    Nothing is written when a row is bad and not ``skip_invalid``, or when no row is good.
    Memory: one batch of requests plus about 100 B per row for the duplicate check.

    Raises:
        InvalidInput: the header does not fit the mapping. LadderError: unknown ladder.
        OSError / UnicodeDecodeError: from ``open_csv`` or reading.
    """
    now = target.scheduler.time()
    result = validate_pass(open_csv, mapping, target, now, progress)
    if result.errors and (not skip_invalid or len(result.errors) == result.rows):
        return result
    write_pass(open_csv, mapping, target, now, result, progress, batch_size)
    return result

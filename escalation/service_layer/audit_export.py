"""Search and streaming export of the audit ledger (CSV or JSON Lines) with a manifest.

Export streams rows through a server-side cursor (``stream_results`` + ``yield_per``), so
memory stays constant whatever the row count (``tests/benchmarks/export_1m.py``;
``tests/integration/test_export_memory.py``). Value formats (format version 1):

* timestamps: UTC ISO-8601 with microseconds and ``Z`` (``2026-03-02T09:00:00.000000Z``);
* money (``materiality``): decimal string, e.g. ``"1250.00"`` (never a float);
* hashes: lower-case hex; UUIDs: hyphenated lower case;
* ``details``: canonical JSON (sorted keys, no spaces); in CSV as a JSON string;
* NULL: empty CSV field / JSON ``null``; the empty string: a CSV field holding one ``'``
  (``domain.csv_cells.EMPTY_TEXT_CELL``, restored to ``""`` as any neutralised cell) /
  JSON ``""``, so NULL and ``""`` (which hash differently) stay distinct.

The manifest (``<file>.manifest.json``) holds the format version, format, columns, row
count, the requested and actual time range and the SHA-256 of the exported file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Literal
from uuid import UUID

from escalation.domain.audit_hash import LEDGER_COLUMNS
from escalation.domain.csv_cells import CsvWriter, restore_cell
from escalation.domain.decide import TERMINAL_ESCALATION
from escalation.domain.errors import InvalidInput, InvalidParameter
from escalation.domain.ladder import Ladder, unknown_ladder
from escalation.ports import AuditFilter as AuditFilter  # noqa: PLC0414 -- re-export
from escalation.ports import LedgerRow, LedgerSearch

FORMAT_VERSION = 1
Format = Literal["csv", "jsonl"]
COLUMNS: tuple[str, ...] = LEDGER_COLUMNS
"""Exported columns, in order: every ledger column (who, what, when, why, chain)."""
_TIMES = frozenset(
    {"due_at", "next_due_at", "regulatory_deadline", "decided_at", "recorded_at",
     "chain_created_at"}
)


def ladder_decisions(ladders: Iterable[Ladder]) -> set[str]:
    """Every ``match_decision`` the ladder versions can record, whether or not one was
    recorded yet: ``PROMOTED_TO_<TIER>`` for each tier (``Tier.decision_name``) and
    ``TERMINAL_ESCALATION``."""
    names = {t.decision_name for ladder in ladders for t in ladder.tiers}
    return names | {TERMINAL_ESCALATION}


def known_decisions(ledger: LedgerSearch, producible: Collection[str] = ()) -> list[str]:
    """Names ``--decision`` accepts, sorted: every ledger event (``tables.LEDGER_EVENTS``),
    every ``match_decision`` recorded so far, and ``producible`` (:func:`ladder_decisions`
    of the deployment's ladders: a search for a decision no dispute has reached yet is a
    search with no rows, not an error)."""
    return sorted(set(ledger.ledger_events()) | set(ledger.recorded_decisions())
                  | set(producible))


def check_decision(ledger: LedgerSearch, decision: str | None,
                   producible: Collection[str] = ()) -> None:
    """Refuse a ``--decision`` that is neither a ledger event, a recorded decision, nor one
    of ``producible``.

    Raises:
        InvalidInput: unknown name; the message lists the known ones.
    """
    if decision is None or decision in ledger.ledger_events() or decision in producible:
        return
    known = known_decisions(ledger, producible)
    if decision not in known:
        raise InvalidInput(
            f"unknown decision/event {decision!r}; known: {', '.join(known)}", field="decision")


def check_filter(ledger: LedgerSearch, flt: AuditFilter, ladders: Iterable[Ladder]) -> None:
    """The name checks of an audit search, the same for the CLI, the API and the console:
    :func:`check_decision` (with the decisions ``ladders`` can record), :func:`check_tier`
    and the ladder filter (a name none of ``ladders`` has would search with no rows, which
    reads as "no such decisions").

    Raises:
        InvalidInput: an unknown decision or tier (exit 2, 422).
        LadderNotFound: a ``ladder`` filter no ladder has (exit 3; a 422 naming ``ladder``
            over HTTP); a malformed ladder name is a LadderError (exit 2).
    """
    versions = list(ladders)
    check_decision(ledger, flt.decision, ladder_decisions(versions))
    check_tier(flt.tier, versions)
    names = {ladder.name for ladder in versions}
    if flt.ladder is not None and flt.ladder not in names:
        raise unknown_ladder(flt.ladder, names)


def check_tier(tier: str | None, ladders: Iterable[Ladder]) -> None:
    """Refuse a tier filter that no version of the deployment's ladders has (a typo would
    otherwise search with no rows and read as "no such escalation").

    Raises:
        InvalidInput: unknown tier id; the message lists the known ones.
    """
    if tier is None:
        return
    known = sorted({t.id for ladder in ladders for t in ladder.tiers})
    if tier not in known:
        raise InvalidInput(f"unknown tier {tier!r}; the ladders' tiers: {', '.join(known)}",
                           field="tier")


def check_output_path(out: Path) -> None:
    """Refuse an output file whose directory does not exist (before anything is written).

    Raises:
        InvalidInput: the parent directory is missing or not a directory, or ``out`` is a
            directory.
    """
    parent = out.parent
    if not parent.is_dir():
        raise InvalidInput(f"output directory {str(parent)!r} does not exist")
    if out.is_dir():
        raise InvalidInput(f"output path {str(out)!r} is a directory")


def search(ledger: LedgerSearch, flt: AuditFilter, limit: int = 100) -> list[LedgerRow]:
    """Ledger rows matching ``flt``, ordered by decided_at then dispute and seq.

    Raises:
        InvalidInput: ``limit`` outside 1-10000 or a naive time.
    """
    if not 1 <= limit <= 10_000:
        raise InvalidParameter("{limit} must be 1-10000, got {got}", "limit", got=limit)
    return ledger.search(flt, limit)


def iso_utc(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of an aware datetime, in UTC."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def export_value(name: str, value: Any) -> Any:
    """The JSON-ready export form of one column value (None stays None)."""
    if value is None:
        return None
    for kind, convert in _EXPORTERS:
        if isinstance(value, kind):
            return convert(value)
    return dict(value) if name == "details" else value


_EXPORTERS: tuple[tuple[type | tuple[type, ...], Callable[[Any], Any]], ...] = (
    (datetime, iso_utc),
    (Decimal, lambda v: format(v, "f")),
    (UUID, str),
    ((bytes, memoryview, bytearray), lambda v: bytes(v).hex()),
)


def _details_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _HashingWriter(io.TextIOBase):
    """Text sink that encodes to UTF-8, writes to ``raw`` and feeds a SHA-256."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.sha = hashlib.sha256()

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        self._raw.write(data)
        self.sha.update(data)
        return len(text)


@dataclass(frozen=True, slots=True)
class Manifest:
    """What an export wrote (see the module docstring); ``as_dict`` is the JSON file."""

    format: str
    row_count: int
    sha256: str
    requested_from: datetime | None
    requested_to: datetime | None
    first_decided_at: datetime | None
    last_decided_at: datetime | None
    file: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready manifest."""

        def t(v: datetime | None) -> str | None:
            return None if v is None else iso_utc(v)

        return {
            "format_version": FORMAT_VERSION,
            "format": self.format,
            "file": self.file,
            "columns": list(COLUMNS),
            "row_count": self.row_count,
            "time_range": {
                "field": "decided_at",
                "from": t(self.requested_from),
                "to": t(self.requested_to),
                "first": t(self.first_decided_at),
                "last": t(self.last_decided_at),
            },
            "sha256": self.sha256,
            "timestamps": "UTC ISO-8601, microseconds, Z suffix",
            "money": "decimal string",
        }


def manifest_path(out: Path) -> Path:
    """Where the manifest of ``out`` goes: ``<out>.manifest.json``."""
    return out.with_name(out.name + ".manifest.json")


def count_rows(ledger: LedgerSearch, flt: AuditFilter) -> int:
    """Number of ledger rows matching ``flt`` (for a progress bar)."""
    return ledger.count(flt)


@dataclass(frozen=True, slots=True)
class ExportLedger:
    """Export ledger rows to a file (the command of :func:`export_ledger`).

    ``fmt``: ``"csv"`` or ``"jsonl"``; ``out``: the file to (over)write, in an existing
    directory; ``flt``: usually ``since``/``until`` only (half-open on decided_at, aware
    times); ``bom``: CSV only: write the UTF-8 byte order mark first (it is part of the file
    and of its SHA-256; :func:`read_csv` skips it).
    """

    fmt: Format
    out: Path
    flt: AuditFilter
    bom: bool = False


def export(ledger: LedgerSearch, fmt: Format, out: Path, flt: AuditFilter,
           bom: bool = False) -> Manifest:
    """:func:`export_ledger` of ``ExportLedger(fmt, out, flt, bom)`` with no progress
    callback (the console's download and the tests). Raises what it raises."""
    return export_ledger(ExportLedger(fmt, out, flt, bom), ledger)


def export_ledger(cmd: ExportLedger, ledger: LedgerSearch,
                  progress: Callable[[int], None] | None = None) -> Manifest:
    """Stream the rows ``cmd.flt`` matches to ``cmd.out`` as CSV (header row) or JSON Lines;
    write a manifest.

    Args:
        cmd: what to export and where (:class:`ExportLedger`).
        ledger: the ledger's search port (adapter ``adapters.audit_search.PostgresLedgerSearch``,
            which streams with a server-side cursor in one snapshot).
        progress: called with the number of rows written so far, every 1000 rows and at end.

    The CSV is written by the one CSV writer (``domain.csv_cells.CsvWriter``): every text
    cell neutralised against formula injection (:func:`read_csv` restores it), CRLF line
    ends, NULL an empty cell and the empty string a lone ``'`` (``distinct_empty``).

    Returns:
        The :class:`Manifest` (also written to :func:`manifest_path`).

    Raises:
        InvalidInput: unknown format, naive times, or ``out``'s directory does not exist
            (:func:`check_output_path`; nothing written).
    """
    fmt, out, flt = cmd.fmt, cmd.out, cmd.flt
    if fmt not in ("csv", "jsonl"):
        raise InvalidInput(f"format must be csv or jsonl, got {fmt!r}")
    check_output_path(out)
    count = 0
    first: datetime | None = None
    last: datetime | None = None
    with out.open("wb") as raw:
        sink = _HashingWriter(raw)
        writer = (CsvWriter(sink, COLUMNS, bom=cmd.bom, distinct_empty=True) if fmt == "csv"
                  else None)
        for row in ledger.stream(flt, COLUMNS):
            values = [export_value(c, row[c]) for c in COLUMNS]
            if writer is not None:
                writer.row(_csv_cells(values))
            else:
                sink.write(
                    json.dumps(dict(zip(COLUMNS, values, strict=True)), sort_keys=False,
                               separators=(",", ":"), ensure_ascii=False) + "\n"
                )
            decided = row["decided_at"]
            first = first or decided
            last = decided
            count += 1
            if progress is not None and count % 1000 == 0:
                progress(count)
    if progress is not None:
        progress(count)
    manifest = Manifest(
        format=fmt,
        row_count=count,
        sha256=sink.sha.hexdigest(),
        requested_from=flt.since,
        requested_to=flt.until,
        first_decided_at=first,
        last_decided_at=last,
        file=out.name,
    )
    manifest_path(out).write_text(json.dumps(manifest.as_dict(), indent=2) + "\n", "utf-8")
    return manifest


def export_stream(
    ledger: LedgerSearch, fmt: Format, flt: AuditFilter, bom: bool = False,
    rows_per_chunk: int = 1000,
) -> Iterator[bytes]:
    """The bytes :func:`export` writes to its file: the header with the first row, then
    pieces of ``rows_per_chunk`` rows (the console's download: it starts as soon as its
    first row is read; the manifest is :func:`export`'s, of the same bytes).

    Raises:
        InvalidInput: unknown format (before anything is read).
    """
    if fmt not in ("csv", "jsonl"):
        raise InvalidInput(f"format must be csv or jsonl, got {fmt!r}")
    return _chunks(ledger, fmt, flt, bom, rows_per_chunk)


def _chunks(ledger: LedgerSearch, fmt: Format, flt: AuditFilter, bom: bool,
            rows_per_chunk: int) -> Iterator[bytes]:
    buf = io.StringIO(newline="")
    writer = (CsvWriter(buf, COLUMNS, bom=bom, distinct_empty=True) if fmt == "csv"
              else None)
    for n, row in enumerate(ledger.stream(flt, COLUMNS), 1):
        values = [export_value(c, row[c]) for c in COLUMNS]
        if writer is not None:
            writer.row(_csv_cells(values))
        else:
            buf.write(json.dumps(dict(zip(COLUMNS, values, strict=True)), sort_keys=False,
                                 separators=(",", ":"), ensure_ascii=False) + "\n")
        if n % rows_per_chunk == 1 or rows_per_chunk == 1:
            yield buf.getvalue().encode("utf-8")
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue().encode("utf-8")


def _csv_cells(values: list[Any]) -> list[Any]:
    """CSV cells before the writer: details as canonical JSON text (the writer turns None
    into an empty cell and neutralises text)."""
    return [_details_text(v) if isinstance(v, dict) else v for v in values]


def read_csv(path: Path) -> Iterator[dict[str, Any]]:
    """Re-import an exported CSV: typed rows (UUID, int, Decimal, aware datetime, bytes
    hashes, dict details; an empty cell -> None, a lone ``'`` -> ``""``), as the ledger
    holds them.

    Raises:
        InvalidInput: the header is not :data:`COLUMNS`.
    """
    with path.open(newline="", encoding="utf-8-sig") as fh:  # a byte order mark skipped
        reader = csv.reader(fh)
        header = tuple(next(reader, ()))
        if header != COLUMNS:
            raise InvalidInput(f"{path}: not an audit export (header {header[:3]}...)")
        for cells in reader:
            yield {c: _parse(c, v) for c, v in zip(COLUMNS, cells, strict=True)}


def _parse(name: str, text: str) -> Any:
    if text == "":
        return {} if name == "details" else None
    return _PARSERS.get(name, str)(restore_cell(text))


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


_PARSERS: dict[str, Callable[[str], Any]] = {
    "dispute_id": UUID,
    "seq": int,
    "ladder_version": int,
    "fence_token": int,
    "materiality": Decimal,
    "prev_hash": bytes.fromhex,
    "row_hash": bytes.fromhex,
    "details": json.loads,
    **dict.fromkeys(_TIMES, _parse_time),
}


def write_csv(rows: Iterator[Mapping[str, Any]], out: Path) -> str:
    """Write typed rows (as :func:`read_csv` yields) in the export CSV format; return the
    file's SHA-256 hex. Used to show that a re-import reproduces the file byte for byte."""
    with out.open("wb") as raw:
        writer = CsvWriter(sink := _HashingWriter(raw), COLUMNS, distinct_empty=True)
        for row in rows:
            writer.row(_csv_cells([export_value(c, row[c]) for c in COLUMNS]))
    return sink.sha.hexdigest()


COLUMN_DICTIONARY: dict[str, str] = {
    "dispute_id": "Dispute UUID (hyphenated, lower case).",
    "seq": "Position of the row in the dispute's hash chain, from 1.",
    "event": "What happened: ENQUEUED, PROMOTED, TERMINAL, CANCELLED, PAUSED, RESUMED, ...",
    "match_decision": "The decision recorded (e.g. TIER_BREACH, TERMINAL_ESCALATION).",
    "actor": "Who decided: worker id, API token name or CLI user.",
    "from_tier": "Tier the dispute left (empty when none).",
    "to_tier": "Tier the dispute entered (empty when none).",
    "ladder": "Ladder name.",
    "ladder_version": "Ladder version the decision used.",
    "calendar_version": "Version of the business calendar the due times were counted in.",
    "materiality": "Disputed amount, decimal string (never a float).",
    "due_at": "Due time (SLA breach instant) of the tier being left, UTC.",
    "next_due_at": "Due time in the tier entered, UTC.",
    "regulatory_deadline": "Regulatory deadline capping the current tier, UTC.",
    "decided_at": "When the decision was taken (Redis TIME for worker decisions), UTC.",
    "recorded_at": "Database clock at insert, UTC.",
    "trace_id": "Correlation id carried into every log event.",
    "source_hash": "Hex digest of the source record.",
    "external_id": "The source system's dispute id, when not a UUID.",
    "fence_token": "Fencing token of the lease the decision was taken under.",
    "details": "Why: canonical JSON (reason, warnings, migration provenance).",
    "prev_hash": "row_hash of the previous row of the chain (hex).",
    "row_hash": "SHA-256 of this row chained to prev_hash (hex).",
    "chain_created_at": "The dispute's creation instant (partition key), UTC.",
}
"""Meaning of each of :data:`COLUMNS` (the manifest's column dictionary)."""

"""Use case: ``escalation import`` -- load disputes from a CSV with a column mapping.

Each row becomes an :class:`EnqueueRequest`. A non-UUID dispute id (e.g. CFPB "Complaint
ID") is mapped to a stable UUID5 in a per-source namespace and kept as ``external_id``; the
source hash is the SHA-256 of the row's raw CSV line. A date-only value is the start of that
day in the mapping's time zone (default UTC). Every row is validated before anything is
written: a file with any bad row imports nothing unless ``skip_invalid``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, time
from pathlib import Path
from typing import TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import check_source_hash, check_text, parse_dispute_id
from escalation.domain.materiality import Materiality
from escalation.service_layer.enqueue import EnqueueRequest

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
        values: dict[str, str | None] = {}
        unknown = sorted(set(data) - {"columns", "defaults"})
        if unknown:
            raise InvalidInput(
                f"{path}: unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; "
                "a mapping file has [columns] and [defaults]"
            )
        for table in ("columns", "defaults"):
            if not isinstance(data.get(table, {}), dict):
                raise InvalidInput(f"{path}: [{table}] must be a table of key = \"value\" lines")
            for key, val in dict(data.get(table, {})).items():
                name = key if table == "columns" else (
                    key if key in ("timezone", "external_source", "ladder") else f"default_{key}"
                )
                if name not in cls.__dataclass_fields__:
                    raise InvalidInput(f"{path}: [{table}] {key}: unknown key")
                values[name] = str(val)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


@dataclass
class ImportPlan:
    """Valid requests (with their 1-based CSV line numbers) and the bad rows found."""

    requests: list[tuple[int, EnqueueRequest]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    rows: int = 0


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


def plan_import(stream: TextIO, mapping: ColumnMapping) -> ImportPlan:
    """Parse and validate every row; nothing is written here.

    Raises:
        InvalidInput: the header lacks a mapped column, or the time zone is unknown.
    """
    try:
        zone = ZoneInfo(mapping.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {mapping.timezone!r}") from None
    records = _lines(stream)
    try:
        _, header_line = next(records)
    except StopIteration:
        raise InvalidInput("empty CSV file (no header)") from None
    header = next(csv.reader(io.StringIO(header_line)))
    needed = [c for c in (mapping.dispute_id, mapping.opened_at, mapping.due_at, mapping.tier,
                          mapping.materiality, mapping.source_hash) if c]
    missing = [c for c in needed if c not in header]
    if missing:
        raise InvalidInput(f"CSV header lacks mapped column(s): {', '.join(missing)}")
    if bool(mapping.opened_at) == bool(mapping.due_at):
        raise InvalidInput("map exactly one of opened_at or due_at to a column")
    plan = ImportPlan()
    seen: dict[uuid.UUID, int] = {}
    for lineno, raw in records:
        if not raw.strip():
            continue
        plan.rows += 1
        try:
            cells = next(csv.reader(io.StringIO(raw)))
            if len(cells) != len(header):
                raise InvalidInput(f"expected {len(header)} fields, found {len(cells)}")
            row = dict(zip(header, cells, strict=True))
            for column in needed:  # mapped cells only: unmapped free text may hold anything
                check_text(row[column], column)
            did, external = stable_dispute_id(row[mapping.dispute_id], mapping.external_source)
            if did in seen:
                raise InvalidInput(
                    f"dispute id {row[mapping.dispute_id]!r} already on line {seen[did]}"
                )
            seen[did] = lineno
            money = (row.get(mapping.materiality) or "").strip() if mapping.materiality else ""
            Materiality.parse(money or mapping.default_materiality)
            tier = (row.get(mapping.tier) or "").strip() if mapping.tier else ""
            src = (row.get(mapping.source_hash) or "").strip() if mapping.source_hash else ""
            source_hash = check_source_hash(
                src or hashlib.sha256(raw.rstrip("\r\n").encode()).hexdigest()
            )
            when = _parse_time(row[mapping.opened_at or mapping.due_at], zone,
                               mapping.opened_at or mapping.due_at)
            plan.requests.append((lineno, EnqueueRequest(
                dispute_id=did, materiality=money or mapping.default_materiality,
                source_hash=source_hash, tier=tier or mapping.default_tier,
                opened_at=when if mapping.opened_at else None,
                due_at=when if mapping.due_at else None,
                ladder=mapping.ladder, external_id=external,
            )))
        except (InvalidInput, csv.Error) as exc:
            plan.errors.append((lineno, str(exc)))
    return plan

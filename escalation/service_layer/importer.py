"""Use case: ``escalation import`` -- load disputes from a CSV with a column mapping.

Each row becomes an :class:`EnqueueRequest`. A non-UUID dispute id (e.g. CFPB "Complaint
ID") is mapped to a stable UUID5 in a per-source namespace and kept as ``external_id``; the
source hash is the SHA-256 of the row's raw CSV line. Times follow the one wall-time rule
(``escalation.domain.wall_time``): a date-only value is that local date in the institution's
zone (the row's zone column, else the mapping's ``timezone``, else the ladder version's, else
the deployment's ``institution_timezone``); a naive time is read in that zone (a gap or
overlap time takes the earlier instant). Every row is validated before anything is written:
a file with any bad row imports nothing unless ``skip_invalid``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import check_source_hash, parse_dispute_id
from escalation.domain.materiality import Materiality
from escalation.domain.wall_time import parse_wall_time, zone
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
        anchor_at: column with the regulatory anchor event (default: the tier entry time).
        timezone: IANA zone of the institution for every row (date-only and naive values
            are read in it; stored on each escalation); None = ladder/deployment default.
        timezone_column: column with a per-row zone (``[columns] timezone``).
        calendar / calendar_column: base business calendar id, default or per row.
        attribute_columns: dispute attribute -> column (``[columns.attributes]``).
        default_attributes: dispute attribute -> value (``[defaults.attributes]``).
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
    timezone: str | None = None
    external_source: str = "external"
    ladder: str | None = None
    anchor_at: str = ""
    timezone_column: str = ""
    calendar: str | None = None
    calendar_column: str = ""
    attribute_columns: dict[str, str] = field(default_factory=dict)
    default_attributes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: Path, **overrides: str | None) -> ColumnMapping:
        """Read a TOML mapping file (``[columns]`` and ``[defaults]`` tables); flags override.

        Raises:
            InvalidInput: unreadable TOML or unknown keys.
        """
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"{path}: cannot read mapping file: {exc}") from None
        values: dict[str, Any] = {}
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
                if key == "attributes" and isinstance(val, dict):
                    target = "attribute_columns" if table == "columns" else "default_attributes"
                    values[target] = {str(k): str(v) for k, v in val.items()}
                    continue
                if table == "columns" and key in ("timezone", "calendar"):
                    name = f"{key}_column"
                else:
                    name = key if table == "columns" else (
                        key if key in ("timezone", "external_source", "ladder", "calendar")
                        else f"default_{key}"
                    )
                if name not in cls.__dataclass_fields__:
                    raise InvalidInput(f"{path}: [{table}] {key}: unknown key")
                values[name] = str(val)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class ImportPlan:
    """Valid requests (with their 1-based CSV line numbers) and the bad rows found."""

    requests: list[tuple[int, EnqueueRequest]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    rows: int = 0


def _parse_time(value: str, tz: ZoneInfo, column: str) -> datetime | date:
    """A cell by the wall-time rule: a date-only value stays a local ``date`` (enqueue reads
    it in the escalation's zone), a naive time is resolved in ``tz``, an aware one kept."""
    instant, date_only = parse_wall_time(value, tz, column)
    if date_only:
        return date.fromisoformat(value.strip())
    return instant


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


def plan_import(
    stream: TextIO, mapping: ColumnMapping, default_timezone: str = "America/New_York"
) -> ImportPlan:
    """Parse and validate every row; nothing is written here.

    ``default_timezone``: the institution zone when neither the row nor the mapping names
    one (the CLI passes the ladder version's, else the deployment's).

    Raises:
        InvalidInput: the header lacks a mapped column, or the time zone is unknown.
    """
    default_zone = mapping.timezone or default_timezone
    zone(default_zone)
    records = _lines(stream)
    try:
        _, header_line = next(records)
    except StopIteration:
        raise InvalidInput("empty CSV file (no header)") from None
    header = next(csv.reader(io.StringIO(header_line)))
    needed = [c for c in (mapping.dispute_id, mapping.opened_at, mapping.due_at, mapping.tier,
                          mapping.materiality, mapping.source_hash, mapping.anchor_at,
                          mapping.timezone_column, mapping.calendar_column,
                          *mapping.attribute_columns.values()) if c]
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
            row_zone = (row.get(mapping.timezone_column) or "").strip() if (
                mapping.timezone_column) else ""
            zone_name = row_zone or default_zone
            tz = zone(zone_name)
            cal = ((row.get(mapping.calendar_column) or "").strip() if mapping.calendar_column
                   else "") or mapping.calendar
            when = _parse_time(row[mapping.opened_at or mapping.due_at], tz,
                               mapping.opened_at or mapping.due_at)
            anchor = (_parse_time(row[mapping.anchor_at], tz, mapping.anchor_at)
                      if mapping.anchor_at else None)
            attributes: dict[str, object] = dict(mapping.default_attributes)
            for name, column in mapping.attribute_columns.items():
                cell = (row.get(column) or "").strip()
                if cell:
                    attributes[name] = cell
            plan.requests.append((lineno, EnqueueRequest(
                dispute_id=did, materiality=money or mapping.default_materiality,
                source_hash=source_hash, tier=tier or mapping.default_tier,
                opened_at=when if mapping.opened_at else None,
                due_at=when if mapping.due_at else None,
                ladder=mapping.ladder, external_id=external, anchor_at=anchor,
                timezone=zone_name, calendar=cal or None, attributes=attributes or None,
            )))
        except (InvalidInput, csv.Error) as exc:
            plan.errors.append((lineno, str(exc)))
    return plan

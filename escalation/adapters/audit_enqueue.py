"""The bulk ENQUEUED write: one ``COPY`` into a session staging table, then one statement
that inserts the new projection rows and their ENQUEUED ledger rows.

Why not the general row builders (``audit_writes.enqueue_rows`` + ``audit_rows.chained_row``)
and ``unnest`` parameters: the values reach PostgreSQL as one COPY text block built here
instead of psycopg's per-element array dumping. The hashed bytes are the one renderer's,
``domain.audit_hash.canonical_bytes``: :func:`enqueued_canonical_bytes` only builds the
ENQUEUED row's fields from an escalation and hands them to it (the property tests compare
those fields and bytes with ``audit_writes.enqueue_rows``'). :class:`EnqueuedLineTemplate`
keeps, for an import's rows of one shape, the parts of those bytes and of the COPY line that
do not change from row to row: it renders nothing of its own. Its constant pieces are cut out
of ``canonical_bytes``' output; each per-row value is filled in as the domain renders that
value (``audit_hash.canonical_string``, ``audit_hash.canonical_json``), which is what
``canonical_bytes`` writes for it inside the row (a JSON object's text is its members' texts
in key order); and the result is checked against :func:`stage_line` when the template is
made. It stays for speed: about 3 us per row instead of about 16 us through
``canonical_bytes`` (docs/adr/0008-csv-import-two-streaming-passes.md, "Amendment 2").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson
import sqlalchemy as sa

from escalation.adapters.db import driver_errors
from escalation.domain import audit_hash
from escalation.domain.escalation import Escalation, Status

GENESIS_HEX = audit_hash.GENESIS.hex()
canonical_string = audit_hash.canonical_string
"""A string's canonical JSON text, as ``canonical_bytes`` writes it (the domain's)."""

STAGE_TABLE = "escalation_enqueue_stage"
# Session-local (TEMP) and emptied at each commit; PostgreSQL skips the truncation in
# transactions that did not touch a temporary table, so other transactions pay nothing.
CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ("
    "dispute_id uuid, external_id text, tier text, ladder text, "
    "ladder_version integer, due_at timestamptz, entered_tier_at timestamptz, "
    "materiality numeric(18,2), source_hash text, trace_id text, "
    "regulatory_deadline timestamptz, deadlines jsonb, institution_tz text, "
    "institution_calendar text, calendar_version text, decided_at timestamptz, "
    "details jsonb, row_hash bytea) ON COMMIT DELETE ROWS"
)
STAGE_COLUMNS = (
    "dispute_id", "external_id", "tier", "ladder", "ladder_version", "due_at",
    "entered_tier_at", "materiality", "source_hash", "trace_id", "regulatory_deadline",
    "deadlines", "institution_tz", "institution_calendar", "calendar_version", "decided_at",
    "details", "row_hash",
)
COPY_STAGE = f"COPY {STAGE_TABLE} ({', '.join(STAGE_COLUMNS)}) FROM STDIN"

# The projection rows first (sorted by dispute id, like every lock taken on it: no deadlock
# between concurrent batches); ``created_at`` (database clock) is the chain's partition key,
# which the ledger row copies. Only the disputes inserted now get their ENQUEUED row.
INSERT_FROM_STAGE = f"""
WITH ins AS (
  INSERT INTO escalation_state (dispute_id, external_id, source, status, tier, ladder,
      ladder_version, due_at, entered_tier_at, materiality, source_hash, trace_id,
      regulatory_deadline, deadlines, institution_tz, institution_calendar, remaining_ms,
      last_seq, last_hash)
  SELECT dispute_id, external_id, details ->> 'source', %(status)s, tier, ladder,
         ladder_version, due_at,
         entered_tier_at, materiality, source_hash, trace_id, regulatory_deadline, deadlines,
         institution_tz, institution_calendar, NULL, 1, row_hash
    FROM {STAGE_TABLE} ORDER BY dispute_id
  ON CONFLICT (dispute_id) DO NOTHING
  RETURNING dispute_id, created_at
)
INSERT INTO escalation_audit (dispute_id, seq, event, match_decision, from_tier, to_tier,
    ladder, ladder_version, calendar_version, materiality, due_at, next_due_at,
    regulatory_deadline, decided_at, actor, trace_id, source_hash, external_id, fence_token,
    details, prev_hash, row_hash, chain_created_at)
SELECT s.dispute_id, 1, 'ENQUEUED', 'ENQUEUED', NULL, s.tier, s.ladder, s.ladder_version,
       s.calendar_version, s.materiality, s.due_at, s.due_at, s.regulatory_deadline,
       s.decided_at, %(actor)s, s.trace_id, s.source_hash, s.external_id, NULL, s.details,
       decode('{GENESIS_HEX}', 'hex'), s.row_hash, ins.created_at
  FROM ins JOIN {STAGE_TABLE} AS s USING (dispute_id)
RETURNING dispute_id
"""


def enqueued_details(esc: Escalation, extra: Mapping[str, object] | None) -> dict[str, Any]:
    """The ENQUEUED row's ``details`` (as ``audit_writes.enqueue_rows`` builds them): the
    tier entry time, every regulatory deadline, then ``extra`` (provenance)."""
    details: dict[str, Any] = {"entered_tier_at": esc.entered_tier_at.isoformat()}
    if esc.deadlines:
        details["deadlines"] = {n: at.isoformat() for n, at in esc.deadlines}
    if extra:
        details.update(extra)
    return details


def enqueued_canonical_bytes(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> bytes:
    """``audit_hash.canonical_bytes`` of the ENQUEUED ledger row of ``esc`` (seq 1).

    Raises:
        InvalidInput: a value with no canonical form.
    """
    return audit_hash.canonical_bytes(
        _ledger_fields(esc, actor, decided_at, calendar_version, details))


def _details_json(details: Mapping[str, Any]) -> str:
    """The staging table's ``details`` text (stored as JSONB: key order and spacing do not
    matter; plain JSON compact and sorted, so a template cuts it out whole)."""
    if audit_hash.is_canonical_json(details):
        try:
            return orjson.dumps(details, option=orjson.OPT_SORT_KEYS).decode("utf-8")
        except orjson.JSONEncodeError:  # an integer beyond 64 bits, a lone surrogate
            return json.dumps(details, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False)
    return json.dumps(details, ensure_ascii=False)


def _ledger_fields(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> dict[str, Any]:
    """The hashed fields of the ENQUEUED row, as ``audit_rows.chained_row`` builds them."""
    return {
        "dispute_id": esc.dispute_id, "seq": 1, "event": "ENQUEUED",
        "match_decision": "ENQUEUED", "from_tier": None, "to_tier": esc.tier,
        "ladder": esc.ladder, "ladder_version": int(esc.ladder_version),
        "calendar_version": calendar_version, "materiality": Decimal(esc.materiality.amount),
        "due_at": esc.due_at, "next_due_at": esc.due_at,
        "regulatory_deadline": (None if esc.regulatory_deadline is None
                                else esc.regulatory_deadline.astimezone(UTC)),
        "decided_at": decided_at, "actor": actor, "trace_id": esc.trace_id,
        "source_hash": esc.source_hash, "external_id": esc.external_id, "fence_token": None,
        "details": dict(details),
    }


def enqueued_row_hash(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> bytes:
    """``row_hash`` of the ENQUEUED row: SHA-256(GENESIS || canonical bytes), 32 bytes."""
    return hashlib.sha256(audit_hash.GENESIS + enqueued_canonical_bytes(
        esc, actor, decided_at, calendar_version, details)).digest()


# COPY text format: backslash, tab, newline and carriage return are escaped; \N is NULL.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str | None) -> str:
    return "\\N" if value is None else value.translate(_COPY_ESCAPES)


def _copy_time(value: datetime | None) -> str:
    return "\\N" if value is None else value.isoformat()


def stage_line(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    extra: Mapping[str, object] | None,
) -> tuple[str, bytes]:
    """(the staging table's COPY text line of ``esc``, its ENQUEUED ``row_hash``)."""
    details = enqueued_details(esc, extra)
    canonical = enqueued_canonical_bytes(esc, actor, decided_at, calendar_version, details)
    digest = hashlib.sha256(audit_hash.GENESIS + canonical).digest()
    details_json = _details_json(details)
    deadlines = (None if not esc.deadlines else json.dumps(
        [[n, at.isoformat()] for n, at in esc.deadlines]))
    line = "\t".join((
        str(esc.dispute_id), _copy_text(esc.external_id), _copy_text(esc.tier),
        _copy_text(esc.ladder), str(int(esc.ladder_version)), esc.due_at.isoformat(),
        esc.entered_tier_at.isoformat(), format(esc.materiality.amount, "f"),
        _copy_text(esc.source_hash), _copy_text(esc.trace_id),
        _copy_time(esc.regulatory_deadline), _copy_text(deadlines),
        _copy_text(esc.institution_tz), _copy_text(esc.institution_calendar),
        _copy_text(calendar_version), decided_at.isoformat(),
        _copy_text(details_json),
        "\\\\x" + digest.hex(),
    ))
    return line + "\n", digest


def insert_staged(conn: sa.Connection, lines: Sequence[str], actor: str) -> set[UUID]:
    """COPY ``lines`` (from :func:`stage_line`) into the session's staging table and insert
    the disputes that have no projection row yet (projection + ENQUEUED row), inside
    ``conn``'s transaction. Returns the dispute ids inserted now."""
    driver = conn.connection.driver_connection  # the psycopg 3 Connection
    if driver is None:  # pragma: no cover - only after the connection was invalidated
        raise sa.exc.InvalidRequestError("connection has no live driver connection")
    with driver_errors(), driver.cursor() as cur:
        cur.execute(CREATE_STAGE)
        with cur.copy(COPY_STAGE) as copy:
            copy.write("".join(lines))
        cur.execute(INSERT_FROM_STAGE,
                    {"status": Status.PENDING.value, "actor": actor})
        return {row[0] for row in cur.fetchall()}


# ---------------------------------------------------------------------- row templates
# Sentinels standing for the per-row values while a template is cut out of the reference
# rendering; a template is only used when each occurs exactly once and the template renders
# the prototype row byte for byte as :func:`stage_line` does.
_SENTINEL_ID = UUID("00000000-5e17-4e15-8000-0000000d1d00")
_SENTINEL_EXT = "Xq7SENTINELEXTERNALq7X"
_SENTINEL_HASH = "abcdef0123456789fedcba9876543210deadbeef"
_SENTINEL_TRACE = "Xq7SENTINELTRACEq7X"
_SENTINEL_ATTRS = "Xq7SENTINELATTRIBUTESq7X"
_ATTRIBUTES = "source_attributes"
"""The ENQUEUED details key of the source attributes (``domain.source_attributes.FIELD``)."""


def _cut(text: str, marks: Sequence[str]) -> list[str] | None:
    """``text`` split at each of ``marks`` (in order, each exactly once), or None."""
    pieces: list[str] = []
    rest = text
    for mark in marks:
        if text.count(mark) != 1:
            return None
        head, sep, rest = rest.partition(mark)
        if not sep:
            return None
        pieces.append(head)
    pieces.append(rest)
    return pieces


class EnqueuedLineTemplate:
    """The staging COPY line (:func:`stage_line`) of every escalation that differs from a
    prototype only in its dispute id, external id, source hash, trace id and source
    attributes (``details.source_attributes``, ``domain.source_attributes``): the rest of
    the line and of the hashed canonical bytes is rendered once, so a row costs a few string
    joins, one small JSON rendering when it has source attributes and one SHA-256 (about
    3 us instead of about 16 us).

    Byte identity: the constant parts are cut out of :func:`stage_line`'s own rendering of
    the prototype with sentinel values, and :meth:`render` of the prototype's real values
    (with and without source attributes) is checked against :func:`stage_line` when the
    template is made; a prototype whose row does not fit (details outside plain JSON, a
    sentinel colliding with another value) gets ``ok = False`` and every row is then
    rendered by :func:`stage_line` itself.
    """

    def __init__(self, proto: Escalation, actor: str, decided_at: datetime,
                 calendar_version: str | None, extra: Mapping[str, object] | None) -> None:
        """``proto``: a validated pending escalation; the other arguments as for
        :func:`stage_line` (``extra`` without source attributes: they are each row's).
        Until :meth:`prepare` has run, rows are rendered by :func:`stage_line` itself (a
        shape seen once pays nothing for the template)."""
        self._proto = proto
        self._args = (actor, decided_at, calendar_version, extra)
        self._cuts: dict[bool, tuple[list[str], list[str]]] = {}
        self.ok = False

    def prepare(self) -> None:
        """Cut the template out (about ten :func:`stage_line` renderings); sets ``ok``."""
        proto = self._proto
        for per_row in (False, True):
            cut = self._cut_out(per_row)
            if cut is None:
                return
            self._cuts[per_row] = cut
        did = str(proto.dispute_id)
        self.ok = all(
            self._fill(did, ext, proto.source_hash, proto.trace_id, attrs)
            == self._reference(did, ext, proto.source_hash, proto.trace_id, attrs)
            for ext in (proto.external_id, None, "x\t\\y\"z\u00e9")
            for attrs in (None, {"Product": "Credit card", "Company": "A \"B\"\\C\u00e9"}))

    def _cut_out(self, per_row: bool) -> tuple[list[str], list[str]] | None:
        """(canonical bytes' pieces, COPY line's pieces) around the per-row values, with
        (``per_row``) or without source attributes; None when the row does not fit."""
        actor, decided_at, calendar_version, extra = self._args
        if per_row:
            extra = {**(extra or {}), _ATTRIBUTES: _SENTINEL_ATTRS}
        marked = replace(self._proto, dispute_id=_SENTINEL_ID, source_hash=_SENTINEL_HASH,
                         trace_id=_SENTINEL_TRACE, external_id=_SENTINEL_EXT)
        details = enqueued_details(marked, extra)
        if not audit_hash.is_canonical_json(details):  # values of other types: no template
            return None
        canonical = enqueued_canonical_bytes(marked, actor, decided_at, calendar_version,
                                             details)
        line, digest = stage_line(marked, actor, decided_at, calendar_version, extra)
        attrs = (canonical_string(_SENTINEL_ATTRS),) if per_row else ()
        # canonical keys are sorted: ``details`` comes before ``dispute_id``
        canon = _cut(canonical.decode("utf-8"), (
            *attrs, str(_SENTINEL_ID), canonical_string(_SENTINEL_EXT),
            canonical_string(_SENTINEL_HASH), canonical_string(_SENTINEL_TRACE)))
        cut = _cut(line, (str(_SENTINEL_ID), _SENTINEL_EXT, _SENTINEL_HASH, _SENTINEL_TRACE,
                          *attrs, digest.hex()))
        if canon is None or cut is None:
            return None
        return canon, cut

    def _reference(self, dispute_id: str, external_id: str | None, source_hash: str,
                   trace_id: str, attributes: Mapping[str, str] | None = None) -> str:
        """:func:`stage_line` of the prototype with the given per-row values."""
        esc = replace(self._proto, dispute_id=UUID(dispute_id), external_id=external_id,
                      source_hash=source_hash, trace_id=trace_id)
        actor, decided_at, calendar_version, extra = self._args
        if attributes:
            extra = {**(extra or {}), _ATTRIBUTES: dict(attributes)}
        return stage_line(esc, actor, decided_at, calendar_version, extra)[0]

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str, attributes: Mapping[str, str] | None = None) -> str:
        """The COPY line (with its newline) of the prototype with these per-row values.

        ``dispute_id``: the canonical UUID string (``str(UUID)``); ``source_hash``: lower
        hex (as validated); ``trace_id``: 1-64 characters without control characters;
        ``attributes``: the row's checked source attributes (None or empty: none).
        """
        if not self.ok:
            return self._reference(dispute_id, external_id, source_hash, trace_id, attributes)
        return self._fill(dispute_id, external_id, source_hash, trace_id, attributes)

    def _fill(self, dispute_id: str, external_id: str | None, source_hash: str,
              trace_id: str, attributes: Mapping[str, str] | None = None) -> str:
        """The template filled in (no check)."""
        if external_id is None:
            ext_json, ext_copy = "null", "\\N"
        else:
            ext_json, ext_copy = canonical_string(external_id), _copy_text(external_id)
        hash_json = canonical_string(source_hash)
        trace_json = canonical_string(trace_id)
        if not attributes:
            c, ln = self._cuts[False]
            canonical = "".join((c[0], dispute_id, c[1], ext_json, c[2], hash_json, c[3],
                                 trace_json, c[4]))
            digest = hashlib.sha256(_GENESIS + canonical.encode("utf-8")).hexdigest()
            return "".join((ln[0], dispute_id, ln[1], ext_copy, ln[2],
                            _copy_text(source_hash), ln[3], _copy_text(trace_id), ln[4],
                            digest, ln[5]))
        c, ln = self._cuts[True]
        attrs_json = audit_hash.canonical_json(attributes)
        canonical = "".join((c[0], attrs_json, c[1], dispute_id, c[2], ext_json, c[3],
                             hash_json, c[4], trace_json, c[5]))
        digest = hashlib.sha256(_GENESIS + canonical.encode("utf-8")).hexdigest()
        return "".join((ln[0], dispute_id, ln[1], ext_copy, ln[2], _copy_text(source_hash),
                        ln[3], _copy_text(trace_id), ln[4], _copy_text(attrs_json), ln[5],
                        digest, ln[6]))


_GENESIS = audit_hash.GENESIS

INSERT_FROM_STAGE_TEXT_IDS = INSERT_FROM_STAGE.replace(
    "RETURNING dispute_id\n", "RETURNING dispute_id::text\n")


def insert_staged_ids(conn: sa.Connection, block: str, actor: str) -> set[str]:
    """:func:`insert_staged` of a block of COPY lines already joined; returns the dispute ids
    inserted now as canonical UUID strings (no UUID objects are built)."""
    driver = conn.connection.driver_connection
    if driver is None:  # pragma: no cover - only after the connection was invalidated
        raise sa.exc.InvalidRequestError("connection has no live driver connection")
    with driver_errors(), driver.cursor() as cur:
        cur.execute(CREATE_STAGE)
        with cur.copy(COPY_STAGE) as copy:
            copy.write(block)
        cur.execute(INSERT_FROM_STAGE_TEXT_IDS,
                    {"status": Status.PENDING.value, "actor": actor})
        return {row[0] for row in cur.fetchall()}

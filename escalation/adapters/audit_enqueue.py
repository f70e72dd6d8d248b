"""The bulk ENQUEUED write: one ``COPY`` into a session staging table, then one statement
that inserts the new projection rows and their ENQUEUED ledger rows.

Why not the general row builders (``audit_writes.enqueue_rows`` + ``audit_rows.chained_row``
+ ``domain.audit_hash.canonical_bytes``) and ``unnest`` parameters: for the fixed shape of an
ENQUEUED row (seq 1, GENESIS ``prev_hash``, no ``from_tier`` or fence token) the canonical
bytes are a template with ten variable values, so :func:`enqueued_canonical_bytes` renders
them directly (byte-identical to ``audit_hash.reference_canonical_bytes``; the unit tests
compare both on generated rows), and the values reach PostgreSQL as one COPY text block built
here instead of psycopg's per-element array dumping. CHANGELOG.md, "CSV import: two streaming
passes".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.db import driver_errors
from escalation.domain import audit_hash
from escalation.domain.escalation import Escalation, Status

GENESIS_HEX = audit_hash.GENESIS.hex()

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
  INSERT INTO escalation_state (dispute_id, external_id, status, tier, ladder, ladder_version,
      due_at, entered_tier_at, materiality, source_hash, trace_id, regulatory_deadline,
      deadlines, institution_tz, institution_calendar, remaining_ms, last_seq, last_hash)
  SELECT dispute_id, external_id, %(status)s, tier, ladder, ladder_version, due_at,
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

_ISO_CACHE: dict[datetime, str] = {}
_ISO_CACHE_MAX = 65_536


def iso_utc(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of an aware datetime in UTC (the canonical form of
    ``domain.audit_hash``), memoised: a batch shares its decision instant and due times."""
    text = _ISO_CACHE.get(value)
    if text is None:
        if len(_ISO_CACHE) >= _ISO_CACHE_MAX:
            _ISO_CACHE.clear()
        text = value.astimezone(UTC).replace(tzinfo=None).isoformat(
            timespec="microseconds") + "Z"
        _ISO_CACHE[value] = text
    return text


def _plain_json(value: object) -> bool:
    """True when ``value`` holds only exact str/int/bool/None, str-keyed dicts and lists
    (where ``json.dumps`` already equals the canonical form); anything else (float,
    Decimal, datetime, subclasses) takes the general encoder."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        return all(type(k) is str and _plain_json(v)
                   for k, v in value.items())  # type: ignore[attr-defined]
    if kind is list or kind is tuple:
        return all(_plain_json(v) for v in value)  # type: ignore[attr-defined]
    return False


def _str_or_null(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _time_or_null(value: datetime | None) -> str:
    return "null" if value is None else '"' + iso_utc(value) + '"'


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

    ``esc``: a validated escalation (aware datetimes, Decimal cents); ``decided_at``: aware.
    Values outside the plain shape (a details value that is not plain JSON, a non-exact
    type) are rendered by ``audit_hash.canonical_bytes`` itself.

    Raises:
        InvalidInput: a value with no canonical form (only possible on the general path).
    """
    return _canonical(esc, actor, decided_at, calendar_version, details)[0]


def _canonical(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> tuple[bytes, str | None]:
    """(canonical bytes, the details' JSON text when the template rendered it, else None)."""
    if not (_plain_json(details) and type(esc.materiality.amount) is Decimal
            and esc.materiality.amount.is_finite() and type(esc.dispute_id) is UUID):
        return audit_hash.canonical_bytes(
            _ledger_fields(esc, actor, decided_at, calendar_version, details)), None
    due = iso_utc(esc.due_at)
    details_json = json.dumps(details, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False)
    text = "".join((
        '{"actor":', encode_basestring(actor),
        ',"calendar_version":', _str_or_null(calendar_version),
        ',"decided_at":"', iso_utc(decided_at),
        '","details":', details_json,
        ',"dispute_id":"', str(esc.dispute_id),
        '","due_at":"', due,
        '","event":"ENQUEUED","external_id":', _str_or_null(esc.external_id),
        ',"fence_token":null,"from_tier":null,"ladder":', encode_basestring(esc.ladder),
        ',"ladder_version":', int.__repr__(int(esc.ladder_version)),
        ',"match_decision":"ENQUEUED","materiality":"', format(esc.materiality.amount, "f"),
        '","next_due_at":"', due,
        '","regulatory_deadline":', _time_or_null(esc.regulatory_deadline),
        ',"seq":1,"source_hash":', encode_basestring(esc.source_hash),
        ',"to_tier":', encode_basestring(esc.tier),
        ',"trace_id":', encode_basestring(esc.trace_id),
        "}",
    ))
    return text.encode("utf-8"), details_json


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
    canonical, details_json = _canonical(esc, actor, decided_at, calendar_version, details)
    digest = hashlib.sha256(audit_hash.GENESIS + canonical).digest()
    if details_json is None:  # stored as JSONB: key order and spacing do not matter
        details_json = json.dumps(details, ensure_ascii=False)
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
    prototype only in its dispute id, external id, source hash and trace id: the rest of
    the line and of the hashed canonical bytes is rendered once, so a row costs a few string
    joins and one SHA-256 (about 3 us instead of about 16 us).

    Byte identity: the constant parts are cut out of :func:`stage_line`'s own rendering of
    the prototype with sentinel values, and :meth:`render` of the prototype's real values is
    checked against :func:`stage_line` when the template is made; a prototype whose row does
    not fit (details outside plain JSON, a sentinel colliding with another value) gets
    ``ok = False`` and every row is then rendered by :func:`stage_line` itself.
    """

    def __init__(self, proto: Escalation, actor: str, decided_at: datetime,
                 calendar_version: str | None, extra: Mapping[str, object] | None) -> None:
        """``proto``: a validated pending escalation; the other arguments as for
        :func:`stage_line`. Until :meth:`prepare` has run, rows are rendered by
        :func:`stage_line` itself (a shape seen once pays nothing for the template)."""
        self._proto = proto
        self._args = (actor, decided_at, calendar_version, extra)
        self._canon: list[str] = []
        self._line: list[str] = []
        self.ok = False

    def prepare(self) -> None:
        """Cut the template out (about five :func:`stage_line` renderings); sets ``ok``."""
        proto = self._proto
        actor, decided_at, calendar_version, extra = self._args
        marked = replace(proto, dispute_id=_SENTINEL_ID, source_hash=_SENTINEL_HASH,
                         trace_id=_SENTINEL_TRACE, external_id=_SENTINEL_EXT)
        canonical, details_json = _canonical(marked, actor, decided_at, calendar_version,
                                             enqueued_details(marked, extra))
        if details_json is None:  # the general encoder's shape: no template
            return
        line, digest = stage_line(marked, actor, decided_at, calendar_version, extra)
        canon = _cut(canonical.decode("utf-8"), (
            str(_SENTINEL_ID), encode_basestring(_SENTINEL_EXT),
            encode_basestring(_SENTINEL_HASH), encode_basestring(_SENTINEL_TRACE)))
        cut = _cut(line, (str(_SENTINEL_ID), _SENTINEL_EXT, _SENTINEL_HASH, _SENTINEL_TRACE,
                          digest.hex()))
        if canon is None or cut is None:
            return
        self._canon, self._line = canon, cut
        did = str(proto.dispute_id)
        self.ok = all(
            self._fill(did, ext, proto.source_hash, proto.trace_id)
            == self._reference(did, ext, proto.source_hash, proto.trace_id)
            for ext in (proto.external_id, None, "x\t\\y\"z\u00e9"))

    def _reference(self, dispute_id: str, external_id: str | None, source_hash: str,
                   trace_id: str) -> str:
        """:func:`stage_line` of the prototype with the given per-row values."""
        esc = replace(self._proto, dispute_id=UUID(dispute_id), external_id=external_id,
                      source_hash=source_hash, trace_id=trace_id)
        actor, decided_at, calendar_version, extra = self._args
        return stage_line(esc, actor, decided_at, calendar_version, extra)[0]

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str) -> str:
        """The COPY line (with its newline) of the prototype with these per-row values.

        ``dispute_id``: the canonical UUID string (``str(UUID)``); ``source_hash``: lower
        hex (as validated); ``trace_id``: 1-64 characters without control characters.
        """
        if not self.ok:
            return self._reference(dispute_id, external_id, source_hash, trace_id)
        return self._fill(dispute_id, external_id, source_hash, trace_id)

    def _fill(self, dispute_id: str, external_id: str | None, source_hash: str,
              trace_id: str) -> str:
        """The template filled in (no check)."""
        c = self._canon
        ln = self._line
        if external_id is None:
            ext_json, ext_copy = "null", "\\N"
        else:
            ext_json, ext_copy = encode_basestring(external_id), _copy_text(external_id)
        hash_json = encode_basestring(source_hash)
        trace_json = encode_basestring(trace_id)
        canonical = "".join((c[0], dispute_id, c[1], ext_json, c[2], hash_json, c[3],
                             trace_json, c[4]))
        digest = hashlib.sha256(_GENESIS + canonical.encode("utf-8")).hexdigest()
        return "".join((ln[0], dispute_id, ln[1], ext_copy, ln[2], _copy_text(source_hash),
                        ln[3], _copy_text(trace_id), ln[4], digest, ln[5]))


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

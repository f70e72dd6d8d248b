"""Request and response bodies of the HTTP API (pydantic; the OpenAPI schemas).

The request models check JSON *types* only (a string where a string is due, no unknown
fields, at most 1,000 batch items). Every rule about values -- aware datetimes, decimal
money, UUIDs, hex source hashes, known tiers and ladders -- is the domain's, applied by the
same service-layer functions the CLI calls (``service_layer.enqueue.build_escalation``), so
the API and the CLI refuse the same inputs with the same messages.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema

from escalation.domain.obligations import Outcome
from escalation.domain.source_attributes import (
    MAX_NAME_CHARS,
    MAX_SOURCE_ATTRIBUTES,
    MAX_VALUE_CHARS,
)

MAX_BATCH = 1000
RESOLVE_OUTCOMES: list[JsonValue] = [o.value for o in Outcome if o is not Outcome.UNSTATED]
"""The outcome codes a resolve may state (``unstated`` is a cancel's)."""
_EXAMPLE_ID = "6f1c2f4e-8a51-4c7e-9a53-2d1b7e0c9f10"

# Text the domain parses with its own messages (the API and the CLI refuse the same inputs
# alike); the schema still says what a valid value looks like.
UuidText = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]
"""A dispute UUID, as text."""
InstantText = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""An instant, ISO-8601 / RFC 3339 with its UTC offset (a date alone is refused)."""
SourceText = Annotated[str, WithJsonSchema({
    "type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"})]
"""A source system name (``service_layer.disputes.SOURCE_RE``)."""
ExternalIdText = Annotated[str, WithJsonSchema({
    "type": "string", "minLength": 1, "maxLength": 200})]
"""A source system's dispute id (``domain.escalation.MAX_EXTERNAL_ID_LEN``)."""
HexText = Annotated[str, WithJsonSchema({
    "type": "string", "pattern": "^[0-9a-fA-F]{1,128}$"})]
"""A hex digest (1-128 hex digits)."""
SOURCE_ATTRIBUTES_SCHEMA: dict[str, Any] = {
    "type": "object", "maxProperties": MAX_SOURCE_ATTRIBUTES,
    "propertyNames": {"minLength": 1, "maxLength": MAX_NAME_CHARS},
    "additionalProperties": {"type": "string", "maxLength": MAX_VALUE_CHARS}}
"""The bounds of ``domain.source_attributes`` as JSON Schema (the domain enforces them; the
schema says them)."""
SourceAttributes = Annotated[dict[str, str], WithJsonSchema(SOURCE_ATTRIBUTES_SCHEMA)]
"""A dispute's source attributes: name -> text."""
DISPUTE_NAMED_ONCE: dict[str, Any] = {
    "oneOf": [
        {"required": ["dispute_id"], "properties": {"dispute_id": {"type": "string"}}},
        {"required": ["source", "external_id"],
         "properties": {"source": {"type": "string"}, "external_id": {"type": "string"}}}],
}
"""JSON Schema of a body naming its dispute by ``dispute_id`` or by ``source`` +
``external_id``, never both (a null member counts as absent)."""


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EscalationIn(_In):
    """One escalation to schedule. Name the dispute by ``dispute_id`` or by ``source`` +
    ``external_id``; give exactly one of ``due_at``, ``due_in`` and ``opened_at``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={**DISPUTE_NAMED_ONCE, "examples": [
        {"dispute_id": _EXAMPLE_ID, "source_hash": "9f86d081884c7d65", "materiality": "1250.00",
         "tier": "standard", "opened_at": "2026-03-02T09:00:00+00:00"},
        {"source": "cfpb", "external_id": "2026-0417-0093", "source_hash": "ab12",
         "materiality": "80.00", "ladder": "cfpb_complaint_response",
         "due_at": "2026-03-09T17:00:00-05:00"},
    ]})

    dispute_id: UuidText | None = Field(None, description="Dispute UUID (or source and "
                                        "external_id, not both).")
    source: SourceText | None = Field(None, description="Source system name (with "
                                      "external_id: both or neither).")
    external_id: ExternalIdText | None = Field(
        None, description="The source system's dispute id; with source it names the dispute.")
    source_hash: HexText = Field(description="Hex digest of the source record (1-128 hex "
                                 "chars).")
    materiality: str = Field("0.00", description="Disputed amount, a decimal string "
                             "(JSON numbers are refused: money is never a float).")
    tier: str | None = Field(None, description="Current tier id (default: the ladder's "
                             "first, or the materiality band's start tier).")
    due_at: InstantText | None = Field(None, description="Breach time, ISO-8601 with offset (an "
                               "instant: a date alone is refused). More than 5 minutes "
                               "before now: accepted and flagged (past_due_ms), as is a due "
                               "time from opened_at that lies there; more than 3650 days "
                               "after now: refused.")
    due_in: str | None = Field(None, description="Breach delay from now (the server's clock, "
                               "Redis TIME): 36h, 2d, 1h30m, or ISO 8601 days and time such "
                               "as PT36H, at most 3650 days; instead of due_at / opened_at.")
    opened_at: InstantText | None = Field(None, description="Tier entry time, ISO-8601 with offset "
                                  "(a date alone is refused); due = opened_at + the tier's "
                                  "SLA window.")
    notice_at: InstantText | None = Field(
        None, description="Regulatory anchor event time, ISO-8601 with offset, a date alone "
        "is refused (default: tier entry).")
    ladder: str | None = Field(None, description="Ladder name (default: the configured one).")
    trace_id: str | None = Field(None, description="Correlation id (1-64 chars).")
    timezone: str | None = Field(None, description="Institution zone of this dispute (IANA; "
                                 "default: the ladder version's, else the deployment's).")
    calendar: str | None = Field(None, description="Base business calendar of this dispute "
                                 "(default: the ladder version's, else the deployment's).")
    attributes: dict[str, str | bool | int] | None = Field(
        None, description="Dispute attributes the ladder's deadlines need, e.g. "
        "{\"cycle_closing_day\": 6} (Reg Z) or {\"new_account\": false, \"point_of_sale\": "
        "false, \"foreign_initiated\": false} (Reg E); a missing one is refused.")
    source_attributes: SourceAttributes | None = Field(
        None, description="The source system's own facts about the dispute, shown with it "
        "and recorded in its ENQUEUED ledger row (under the row hash); nothing acts on them, "
        "e.g. {\"product\": \"Checking or savings account\", \"company\": \"Example "
        f"Bank\", \"state\": \"FL\"}}. At most {MAX_SOURCE_ATTRIBUTES} names of 1-"
        f"{MAX_NAME_CHARS} characters, values of at most {MAX_VALUE_CHARS} characters, "
        "single-line text; past a bound: 422 naming source_attributes (or "
        "source_attributes.<name>).")


class BatchIn(_In):
    """Up to 1,000 escalations; all are validated first and nothing is written if one is bad."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"items": [{"dispute_id": _EXAMPLE_ID, "source_hash": "9f86d081",
                    "materiality": "99.95", "due_at": "2026-03-02T17:00:00+00:00"}]},
    ]})

    items: list[EscalationIn] = Field(min_length=1, max_length=MAX_BATCH)


class CancelIn(_In):
    """Why the escalation is cancelled (recorded in the ledger)."""

    reason: str = Field("resolved", min_length=1, max_length=500)


class PauseIn(_In):
    """Why the SLA clock stops (recorded in the ledger)."""

    reason: str = Field("paused", min_length=1, max_length=500)


class EvidenceIn(_In):
    """The document that shows an action happened."""

    ref: str = Field(description="Document id or URI (1-1000 characters).")
    sha256: str | None = Field(None, description="SHA-256 of the document, 64 hex digits.")


class ActionIn(_In):
    """One action on a dispute (docs/adr/0010-obligations-and-resolution.md). ``action`` is
    an id the dispute's ladder version declares (``[[actions]]``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"action": "provisional_credit", "occurred_at": "2026-03-04T15:00:00-05:00",
         "amount": "125.50", "currency": "USD", "idempotency_key": "pc-2026-0417-0093",
         "evidence": {"ref": "ledger://credits/88121"}},
    ]})

    action: str = Field(description="Action id declared by the dispute's ladder version.")
    occurred_at: InstantText = Field(description="When the action happened, ISO-8601 with offset; "
                             "not in the future, not before the dispute's anchor, nor before "
                             "the dispute was opened.")
    evidence: EvidenceIn | None = None
    amount: str | None = Field(None, description="Decimal string, required for a money "
                               "action (JSON numbers, NaN and negatives are refused).")
    currency: str | None = Field(None, description="An active ISO 4217 code in capitals "
                                   "(USD), with amount.")
    note: str | None = Field(None, description="One line, at most 500 characters.")
    idempotency_key: str | None = Field(
        None, description="Required here or as the Idempotency-Key header (1-200 "
        "characters); the same key with the same content is a replay (200).")


class ResolveIn(_In):
    """A dispute's resolution, from pending, paused or terminal."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"outcome": "error_corrected", "reason": "credit made final",
         "occurred_at": "2026-03-20T10:00:00-04:00", "idempotency_key": "resolve-0093"},
    ]})

    outcome: str = Field(description="Outcome code (docs/sla.md \"Resolution outcomes\").",
                         json_schema_extra={"enum": RESOLVE_OUTCOMES})
    reason: str | None = Field(None, description="One line, at most 500 characters.")
    occurred_at: InstantText | None = Field(None, description="When it was resolved, ISO-8601 with "
                                    "offset (default: now); not before the dispute's anchor, "
                                    "nor before the dispute was opened.")
    idempotency_key: str | None = Field(
        None, description="Required here or as the Idempotency-Key header.")


class MetByOut(BaseModel):
    """The action that met a deadline (on time, or late when the state is ``missed``)."""

    action: str = Field(description="Action id, or 'resolution'.")
    occurred_at: datetime | None = Field(description="Null: a source asserted it without "
                                         "an instant.")
    actor: str
    recorded_at: datetime | None = Field(
        default=None, description="When the ledger recorded it (an action entered after "
        "the fact says so here).")
    amount_unchecked: bool = Field(
        default=False, description="True: the action needs the whole disputed amount and "
        "the dispute has none on record (materiality 0.00), so its amount was not checked.")


class DeadlineOut(BaseModel):
    """One regulatory deadline and its state at the time of the request
    (``domain.obligations.assess``, the words ``report sla`` and the console use).

    ``state``: ``met`` (an action it names happened before it), ``missed`` (it passed
    without one, or the action came late: ``late_seconds``), ``at_risk`` (open, due within
    48 h), ``pending`` (open, further out), ``undetermined`` (closed per an imported source
    that gives no instant).
    """

    name: str
    citation: str = Field(description="The rule's source, e.g. 12 CFR 1005.11(c)(1).")
    deadline_at: datetime | None = Field(description="Null when the action starting the "
                                         "clock has no known instant.")
    at: datetime | None = Field(description="Same as deadline_at (kept for older clients).")
    state: Literal["met", "missed", "at_risk", "pending", "undetermined"]
    basis: Literal["record", "source"] | None = Field(
        description="record: the ledger holds the action with its instant; source: an "
        "import asserted it. Null while open.")
    met_by: MetByOut | None
    late_seconds: float | None = Field(description="Missed only: seconds late (up to the "
                                       "late action, or up to now while open); null if the "
                                       "source does not say.")
    rule: str = Field(description="Why it falls there when not the ladder's own rule, e.g. "
                      "'no timely provisional_credit: due with "
                      "determine_or_provisionally_credit'; else ''.")


class EscalationOut(BaseModel):
    """An escalation's recorded state (PostgreSQL projection). Times are UTC."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "dispute_id": _EXAMPLE_ID, "external_id": None, "status": "pending",
        "tier": "standard", "ladder": "dispute_review", "ladder_version": 1, "seq": 1,
        "due_at": "2026-03-03T09:00:00Z", "entered_tier_at": "2026-03-02T09:00:00Z",
        "materiality": "1250.00", "regulatory_deadline": None, "deadlines": [],
        "trace_id": "4b1e0f0c8d2a4f0e9b7c6a5d4e3f2a1b", "created": True,
        "source_hash_differs": False,
    }]})

    dispute_id: UuidText
    external_id: str | None
    status: str
    tier: str
    ladder: str
    ladder_version: int
    seq: int
    due_at: datetime | None = Field(
        description="Breach time of the current tier while pending; null when paused (the "
                    "SLA clock is stopped: remaining_ms is what is left), terminal, "
                    "cancelled or resolved.")
    entered_tier_at: datetime
    materiality: str
    regulatory_deadline: datetime | None
    deadlines: list[DeadlineOut]
    trace_id: str
    source_attributes: dict[str, str] | None = Field(
        None, description="The source attributes recorded on the dispute's ENQUEUED ledger "
        "row; null when it was enqueued without any.")
    created: bool | None = Field(None, description="Create only: false = already there.")
    source_hash_differs: bool | None = Field(
        None, description="Create only: true = the dispute was already there with another "
        "source_hash; this request changed nothing (an escalation is never rewritten: cancel "
        "it and create it again to apply the new content).")
    past_due_ms: int | None = Field(
        None, description="Create only: the request's due time (its due_at, or opened_at + "
        "the tier's SLA window) lay this long (ms) before now, more than the 5 min tolerance; "
        "accepted, escalated at once, and flagged past_due on its ENQUEUED ledger row.")
    remaining_ms: int | None = Field(None, description="Pause/resume: SLA window left (ms).")
    basis: str | None = Field(None, description="Pause/resume: 'open' or 'elapsed' time.")
    recorded_seq: int | None = Field(None, description="Actions/resolve: seq of the ledger "
                                     "row recorded (on a replay, the first one's).")
    replayed: bool | None = Field(None, description="Actions/resolve: true = the idempotency "
                                  "key was used with the same content; nothing written.")


class BatchItemOut(BaseModel):
    """Per item of a batch: the dispute, whether it was created, its status, and whether
    its source hash differs from the one recorded (then the item changed nothing)."""

    dispute_id: UuidText
    created: bool
    status: str
    source_hash_differs: bool = Field(
        description="true = the dispute was already there (or earlier in this batch) with "
        "another source_hash; this item changed nothing.")
    past_due_ms: int | None = Field(
        None, description="The item's due time (its due_at, or opened_at + the tier's SLA "
        "window) lay this long (ms) before now, more than the 5 min tolerance: created and "
        "flagged past_due on its ledger row.")


class BatchOut(BaseModel):
    """Counts and per-item results, in request order."""

    created: int
    existing: int
    results: list[BatchItemOut]


class AuditPage(BaseModel):
    """A page of ledger rows; pass ``next_cursor`` back as ``cursor`` for the next page
    (null = no more rows)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None


class FieldError(BaseModel):
    """One bad input of a 422: the body field, query parameter or header at fault (its name
    in this API: ``due_at``, ``items[3].due_at``, ``from``, ``Content-Type``; null when no
    one field is), and why."""

    field: str | None = None
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details; 422 adds ``errors`` naming each bad field."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "type": "/problems/invalid-input", "title": "Invalid input; nothing was written",
        "status": 422, "detail": "due_at must be timezone-aware (got naive 2026-03-02T09:00:00)",
        "instance": "/v1/escalations",
        "errors": [{"field": "due_at",
                    "message": "due_at must be timezone-aware (got naive 2026-03-02T09:00:00)"}],
    }]})

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None
    error_count: int | None = Field(None, description="422: how many errors were found, when "
                                    "more than `errors` lists.")
    errors_truncated: bool | None = Field(None, description="422: true when `errors` lists "
                                          "only the first `api_max_errors`.")
    accepted: list[str] | None = Field(None, description="422 for an undeclared query "
                                       "parameter: the ones the route accepts.")


class Liveness(BaseModel):
    """``GET /livez`` and ``/healthz``: the process serves requests."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: Literal["ok"]


class Readiness(BaseModel):
    """``GET /readyz``: up or down; ``checks`` only for a request with a valid token."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"status": "not ready"},
        {"status": "not ready", "checks": {"redis": "unreachable", "postgres": "ok",
                                           "ladders": "ok"}}]})

    status: Literal["ready", "not ready"]
    checks: dict[str, Any] | None = Field(
        None, description="Each check: `ok`, or what failed (`unreachable`, `timeout`, "
        "`schema not at head ...`, the ladder file errors); never an address. Only with a "
        "token.")

"""Use cases: record an action that meets (or starts) a regulatory clock, and resolve a
dispute from any tier (docs/adr/0010-obligations-and-resolution.md, docs/sla.md
"Obligations").

Both follow the order every other use case keeps: read the projection and the trail, decide
(``domain.obligations``), append one ledger row under a compare-and-set on the dispute's seq
(the projection's binding clocks, due time and status change in the same transaction), then
bring Redis in line owner-less. Redis ``TIME`` is the clock (ADR 0005).

* ``record_action`` appends ``ACTION_RECORDED`` and re-plans. A met clock stops capping the
  tiers, and a clock the action starts caps them from now on. The due time of a pending
  escalation moves later only when a cap that no longer binds had set it, and never past a
  cap that still binds.
* ``resolve`` appends ``RESOLVED`` with an outcome code from pending, paused or terminal,
  and removes the dispute from Redis as ``cancel`` does.

An idempotency key makes both safe to retry. A replay with the same content returns the first
row, and the same key with different content is a ``ConflictError``.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry, window_end
from escalation.domain.currencies import check_currency, minor_unit
from escalation.domain.errors import ConflictError, InvalidInput, InvalidParameter, NotFound
from escalation.domain.escalation import (
    ENDED,
    Escalation,
    Status,
    check_instant,
    check_text,
    parse_dispute_id,
)
from escalation.domain.ladder import RESOLUTION, ActionDef, Ladder
from escalation.domain.materiality import checked_decimal
from escalation.domain.obligations import (
    Assessment,
    Clock,
    Outcome,
    RecordedAction,
    assess,
    binding,
    check_resolvable,
    clocks,
    late_at,
)
from escalation.domain.sla_timing import cap_due, tier_cap, tier_window
from escalation.ports import (
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    EventLog,
    LadderSource,
    LedgerEvent,
    LedgerRow,
    Scheduler,
)
from escalation.service_layer.cancel import leave_redis
from escalation.service_layer.enqueue import OnScheduled
from escalation.service_layer.pause import _apply_owner_less

ACTION_EVENT = "ACTION_RECORDED"
RESOLVED_EVENT = "RESOLVED"
FUTURE_SKEW = timedelta(minutes=5)
"""How far past Redis TIME an action's instant may lie (the sender's clock drifts), as for
``opened_at`` at enqueue."""
CAS_RETRIES = 20
"""Attempts at the seq compare-and-set: concurrent writers to one dispute (a worker's
promotion, other actions) each win in turn; a short random pause spreads the retries."""
CAS_PAUSE_S = (0.005, 0.05)
MAX_KEY_CHARS = 200
MAX_NOTE_CHARS = 500
RESERVED_ACTORS = frozenset({"cli", "api", "worker", "system", ""})
"""Actor names that say nothing about who acted: refused."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_KEYS = frozenset({"action", "amount", "currency", "evidence", "note", "asserted",
                           "outcome", "reason"})
"""The request fields a replay must repeat (``occurred_at`` is compared when given: a
resolve without it means "now", which differs on a retry)."""


class ObligationStore(EventLog, Protocol):
    """What the two use cases need of the audit store: ``EventLog`` plus the read of
    decisions recorded but maybe never applied (a resolve that leaves Redis notifies them
    once, as ``cancel`` does)."""

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        """Latest PROMOTED/TERMINAL row with after < seq <= upto per range."""
        ...


@dataclass(frozen=True, slots=True)
class ObligationPorts:
    """What :func:`record_action` reads and writes.

    ``scheduler``: Redis (its TIME is the clock; a re-planned due time is applied there);
    ``store``: the ledger and projection (:class:`ObligationStore`); ``ladders``: the
    released ladder versions (the action's definition); ``calendars``: the calendars the
    dispute's clocks count in.
    """

    scheduler: Scheduler
    store: ObligationStore
    ladders: LadderSource
    calendars: CalendarRegistry


@dataclass(frozen=True, slots=True)
class RecordAction:
    """One action on a dispute, as a dispute service, an operator or an import states it.

    Attributes:
        dispute_id: the dispute (UUID or its text).
        action: an action id the dispute's ladder version declares (``[[actions]]``).
        occurred_at: aware instant the action happened. It may be in the past, but no later
            than Redis TIME + 5 min and never before the dispute's anchor (on a ladder
            without regulatory deadlines: never before its opened_at / enqueue instant).
            None only for an import's assertion (``asserted_timely`` or ``asserted_by``
            set), because no instant is ever invented.
        actor: who acted: an API token's name, or a named operator (``cli`` alone refused).
        idempotency_key: 1-200 printable characters; a replay returns the first result.
        evidence_ref: document id or URI of the evidence (optional).
        evidence_sha256: SHA-256 hex of the evidence document (optional, with a ref).
        amount: Decimal text, for an action with ``money = true`` (required there, refused
            elsewhere); floats, NaN and negatives refused.
        currency: an active ISO 4217 code (``domain.currencies``), with ``amount``.
        note: optional single-line text (at most 500 characters).
        asserted_timely: only for an import's assertion without an instant: did the source
            count the action timely (None: it does not say; the deadline is then
            ``undetermined``).
        asserted_by: the source of the assertion (e.g. the file's column); set alone, an
            assertion that says nothing of timeliness.
    """

    dispute_id: object
    action: str
    occurred_at: datetime | None
    actor: str
    idempotency_key: str
    evidence_ref: str | None = None
    evidence_sha256: str | None = None
    amount: object | None = None
    currency: str | None = None
    note: str | None = None
    asserted_timely: bool | None = None
    asserted_by: str | None = None


@dataclass(frozen=True, slots=True)
class Resolve:
    """A dispute's resolution.

    Attributes:
        dispute_id: the dispute (UUID or its text).
        outcome: an :class:`~escalation.domain.obligations.Outcome` value (not ``unstated``,
            which only a ``cancel`` records).
        actor: who resolved it (as for :class:`RecordAction`).
        idempotency_key: as for :class:`RecordAction`.
        occurred_at: aware instant of the resolution; None = now (Redis TIME), or, with
            ``asserted_timely`` or ``asserted_by``, an import's resolution whose instant the
            source omits (never set to now: a late one, ``asserted_timely`` False, included).
            A given instant is checked as :class:`RecordAction`'s (never before the dispute).
        reason: optional single-line text (at most 500 characters).
        asserted_timely / asserted_by: as for :class:`RecordAction`.
    """

    dispute_id: object
    outcome: str
    actor: str
    idempotency_key: str
    occurred_at: datetime | None = None
    reason: str | None = None
    asserted_timely: bool | None = None
    asserted_by: str | None = None


@dataclass(frozen=True, slots=True)
class ObligationResult:
    """What a recorded action or resolution left.

    Attributes:
        escalation: the dispute's state after the row (or after the first row, on a replay).
        seq: the ledger row's seq. replayed: True when the idempotency key had been used
            with the same content (nothing written).
        assessments: every clock's state now (``domain.obligations.assess``).
        due_before / due_after: the due time before and after the re-plan (None unless
            pending). redis: the Redis outcome (None when Redis was not touched).
    """

    escalation: Escalation
    seq: int
    replayed: bool
    assessments: list[Assessment]
    due_before: datetime | None = None
    due_after: datetime | None = None
    redis: ApplyOutcome | None = None


# ------------------------------------------------------------------------- ledger reading
def recorded_actions(rows: Sequence[Any]) -> list[RecordedAction]:
    """The actions and the resolution in a dispute's ledger rows (``LedgerRow`` or any row
    with ``event``, ``decided_at``, ``actor``, ``seq``, ``details``). A ``CANCELLED`` row is
    a resolution with its row instant and outcome ``unstated``."""
    out: list[RecordedAction] = []
    for r in rows:
        details = r.details or {}
        if r.event in (ACTION_EVENT, RESOLVED_EVENT):
            at = details.get("occurred_at")
            asserted = details.get("asserted") or {}
            out.append(RecordedAction(
                str(details.get("action", RESOLUTION)),
                None if at is None else datetime.fromisoformat(str(at)),
                r.actor, int(r.seq),
                asserted.get("timely") if isinstance(asserted, dict) else None,
                details.get("outcome"), r.decided_at, bool(details.get("partial")),
                bool(details.get("amount_unchecked"))))
        elif r.event == "CANCELLED":
            out.append(RecordedAction(RESOLUTION, r.decided_at, r.actor, int(r.seq),
                                      outcome=Outcome.UNSTATED.value,
                                      recorded_at=r.decided_at))
    return out


def base_clocks(
    rows: Sequence[Any], fallback: Sequence[tuple[str, datetime]],
) -> dict[str, datetime]:
    """The anchor clocks as computed at enqueue, by name: the ENQUEUED row's
    ``details.deadline_rules`` (each with its own window, a conditional one included), else
    its ``details.deadlines``, else ``fallback`` (rows older than either)."""
    for r in rows:
        if r.event != "ENQUEUED":
            continue
        details = r.details or {}
        rules = details.get("deadline_rules")
        if isinstance(rules, dict) and rules:
            return {n: datetime.fromisoformat(str(v["at"])) for n, v in rules.items()}
        flat = details.get("deadlines")
        if isinstance(flat, dict) and flat:
            return {n: datetime.fromisoformat(str(at)) for n, at in flat.items()}
        break
    return dict(fallback)


def _enqueued(rows: Sequence[Any]) -> dict[str, Any]:
    return next(((r.details or {}) for r in rows if r.event == "ENQUEUED"), {})


def deadline_states(
    ladders: LadderSource, trail: Sequence[Any], esc: Escalation,
    calendars: CalendarRegistry, now: datetime,
) -> list[Assessment]:
    """Every clock of ``esc`` and its state at ``now`` (aware UTC, Redis TIME), from the
    dispute's ledger ``trail`` (``[]`` for a dispute just created: its clocks are its
    projection's). The ``deadlines`` of the API's escalation answers and of the CLI's
    ``enqueue --json``.

    Raises:
        LadderReleaseError: the released ladder file of ``esc`` is missing or edited.
    """
    ladder = ladders.get(esc.ladder, esc.ladder_version)
    actions = recorded_actions(trail)
    placed = dispute_clocks(ladder, trail, actions, esc.calendars(calendars), esc.deadlines)
    return list(assess(ladder, placed, actions, now))


def dispute_clocks(
    ladder: Ladder, rows: Sequence[Any], actions: Sequence[RecordedAction],
    calendars: CalendarRegistry, fallback: Sequence[tuple[str, datetime]],
) -> list[Clock]:
    """:func:`domain.obligations.clocks` of one dispute from its ledger rows (``calendars``
    scoped to the dispute's institution)."""
    attributes = _enqueued(rows).get("attributes") or {}
    return clocks(ladder, base_clocks(rows, fallback), actions, calendars, attributes)


# ------------------------------------------------------------------------- validation
def _check_actor(actor: str) -> str:
    check_text(actor, "actor")
    if actor.strip().lower() in RESERVED_ACTORS or len(actor) > 200:
        raise InvalidInput("actor: name who acted (a token name, or an operator via --actor "
                           f"or ESCALATION_OPERATOR); {actor!r} says nothing of who did it",
                           field="actor")
    return actor


def _check_key(key: str) -> str:
    check_text(key, "idempotency_key")
    if not key.strip() or len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"idempotency_key: 1-{MAX_KEY_CHARS} characters, got {len(key)}",
                           field="idempotency_key")
    return key


def _check_note(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    check_text(value, name)
    if len(value) > MAX_NOTE_CHARS:
        raise InvalidInput(f"{name}: at most {MAX_NOTE_CHARS} characters, got {len(value)}",
                           field=name)
    return value


def _asserts(cmd: RecordAction | Resolve) -> bool:
    """True for an import's assertion: a timeliness or a source stated (an instant may then
    be absent, and none is invented)."""
    return cmd.asserted_timely is not None or cmd.asserted_by is not None


def _check_when(
    occurred_at: datetime | None, asserted: bool, now: datetime, enqueued: Mapping[str, Any],
) -> datetime | None:
    """The action's instant in UTC, checked (module doc); None only for an assertion.

    ``enqueued``: the ENQUEUED row's details. An instant before the dispute's anchor
    (``anchor_at``, ladders with regulatory deadlines) is refused; on a ladder without one,
    an instant before the dispute entered its first tier (``entered_tier_at``: its
    ``opened_at``, or the enqueue instant) is refused: nothing happens to a dispute before it
    exists. Rows without either field (none are written today) check neither.

    Raises:
        InvalidInput: naming ``occurred_at`` (the CLI's ``--at``)."""
    if occurred_at is None:
        if not asserted:
            raise InvalidInput("occurred_at: required (an aware ISO 8601 instant)",
                               field="occurred_at")
        return None
    at = check_instant(occurred_at, "occurred_at")
    if at > now + FUTURE_SKEW:
        raise InvalidInput(f"occurred_at: {at.isoformat()} is in the future (now "
                           f"{now.isoformat()})", field="occurred_at")
    anchor, opened = enqueued.get("anchor_at"), enqueued.get("entered_tier_at")
    if anchor is not None:
        if at < datetime.fromisoformat(anchor):
            raise InvalidInput(f"occurred_at: {at.isoformat()} is before the dispute's "
                               f"anchor {anchor}", field="occurred_at")
    elif opened is not None and at < datetime.fromisoformat(opened):
        raise InvalidInput(f"occurred_at: {at.isoformat()} is before the dispute was opened "
                           f"({opened}, its entry into its first tier)", field="occurred_at")
    return at


def _money(cmd: RecordAction, act: ActionDef, disputed: Decimal) -> dict[str, Any]:
    """The money fields of an action, checked: an amount > 0 with a currency for a money
    action, none otherwise; ``partial`` when the ladder needs the full disputed amount and
    the amount is below it (recorded, but it meets nothing: ``obligations.effective``)."""
    if not act.money:
        if cmd.amount is not None or cmd.currency is not None:
            raise InvalidInput(f"amount: the action {cmd.action!r} carries no amount",
                               field="amount")
        return {}
    if cmd.amount is None:
        raise InvalidInput(f"amount: required for the action {cmd.action!r} (Decimal text)",
                           field="amount")
    try:  # floats, NaN, negatives refused
        amount = checked_decimal(cmd.amount)
    except InvalidInput as exc:  # its messages say "materiality"; this field is the amount
        raise InvalidInput("amount: " + str(exc).replace("materiality", "the amount"),
                           field="amount") from None
    if amount <= 0:
        raise InvalidInput(f"amount: must be greater than 0 for the action {cmd.action!r}",
                           field="amount")
    if cmd.currency is None:
        raise InvalidParameter("{currency} is required with {amount}: an active ISO 4217 "
                               "code such as USD", "currency", "amount")
    check_currency(cmd.currency)  # an active ISO 4217 code (domain.currencies)
    places = minor_unit(cmd.currency)
    if places is not None:  # never rounded: digits below the currency's minor unit refused
        exact = amount.quantize(Decimal(1).scaleb(-places))
        if exact != amount:
            raise InvalidInput(
                f"amount: {cmd.amount!r} has digits below the {cmd.currency} minor unit "
                f"({places} decimal place{'' if places == 1 else 's'}, ISO 4217); money is "
                "never rounded", field="amount")
        amount = exact
    out: dict[str, Any] = {"amount": format(amount, "f"), "currency": cmd.currency}
    if act.full_amount and disputed == 0:
        out["amount_unchecked"] = True  # no disputed amount on record to compare with
    elif act.full_amount and cmd.currency != act.currency:
        # the disputed amount is in the ladder's currency: another one is not compared
        out["amount_unchecked"] = True
    elif act.full_amount and amount < disputed:
        out["partial"] = True
    return out


def _evidence(ref: str | None, sha: str | None) -> dict[str, str] | None:
    if ref is None:
        if sha is not None:
            raise InvalidInput("evidence_ref: required with evidence_sha256 (the digest of the "
                               "evidence it names)", field="evidence_ref")
        return None
    check_text(ref, "evidence_ref")
    if not ref.strip() or len(ref) > 1000:
        raise InvalidInput("evidence_ref: 1-1000 characters", field="evidence_ref")
    out = {"ref": ref}
    if sha is not None:
        if not _SHA256.match(sha.lower()):
            raise InvalidInput("evidence_sha256: 64 hexadecimal characters (SHA-256)",
                               field="evidence_sha256")
        out["sha256"] = sha.lower()
    return out


# ------------------------------------------------------------------------- the use cases
def _current(store: EventLog, did: UUID) -> tuple[Escalation, Status]:
    got = store.get(did)
    if got is None:
        raise NotFound(f"no escalation recorded for dispute {did}")
    return got


def _replay(
    rows: Sequence[LedgerRow], key: str, content: Mapping[str, Any], actor: str,
) -> LedgerRow | None:
    """The row already written under ``key`` (same content, same actor), else None. Keys
    are one space per dispute, shared by its actions and its resolution.

    Raises:
        ConflictError: the key was used for other content, or by another actor.
    """
    for r in rows:
        if r.event in (ACTION_EVENT, RESOLVED_EVENT) and r.details.get("idempotency_key") == key:
            if r.actor != actor:
                raise ConflictError(f"idempotency_key {key!r} was used by another actor "
                                    f"(seq {r.seq}); nothing written")
            # a field the first request had and this one lacks is other content too
            keys = set(content) | (_CONTENT_KEYS & set(r.details))
            first = {k: r.details.get(k) for k in keys}
            content = {k: content.get(k) for k in keys}
            if first != dict(content):
                raise ConflictError(f"idempotency_key {key!r} was used for different content "
                                    f"(seq {r.seq}); nothing written")
            return r
    return None


def _replan(
    current: tuple[Escalation, Status], ladder: Ladder,
    bind: tuple[tuple[str, datetime], ...], calendars: CalendarRegistry, now: datetime,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Projection changes for the new binding clocks of ``current`` (the state and status
    :func:`_current` read), and the ``replan`` details (None when the due time did not
    move)."""
    esc, status = current
    new_cap, new_deadline = tier_cap(ladder, esc.tier, dict(bind), calendars)
    changes: dict[str, Any] = {"deadlines": bind, "regulatory_deadline": new_deadline}
    if status is not Status.PENDING:
        return changes, None
    old_cap, _ = tier_cap(ladder, esc.tier, dict(esc.deadlines), calendars)
    candidate = esc.due_at
    if (old_cap is not None and esc.due_at >= old_cap  # the old cap had set the due time
            and (new_cap is None or new_cap > old_cap)):  # and no longer binds there
        natural = window_end(esc.entered_tier_at,
                             tier_window(ladder, esc.tier, esc.materiality.amount), calendars)
        candidate = max(esc.due_at, natural)
    due = cap_due(candidate, new_cap, now)
    changes["due_at"] = due
    if due == esc.due_at:
        return changes, None
    why = ("a regulatory cap that set it no longer binds" if due > esc.due_at
           else "a clock the action started caps the tier")
    capped = new_cap is not None and due >= new_cap  # else the tier window set it
    return changes, {"due_at_before": esc.due_at.isoformat(), "due_at_after": due.isoformat(),
                     "why": why, "capped_by": None if not capped else next(
                         (n for n, at in bind if at == new_deadline), None)}


def _clock_details(placed: Sequence[Clock]) -> dict[str, Any]:
    return {c.name: {"at": None if c.at is None else c.at.isoformat(),
                     **({"rule": c.rule} if c.rule else {})} for c in placed}


def record_action(
    cmd: RecordAction, ports: ObligationPorts, on_replanned: OnScheduled | None = None,
) -> ObligationResult:
    """Record one action and re-plan the dispute's clocks and due time (module doc).

    ``ports``: the scheduler, the ledger, the ladders and the calendars
    (:class:`ObligationPorts`).

    ``on_replanned``: called with the pending state when the due time moved, after Redis
    holds it (the pre-breach warnings of the re-planned window are scheduled there, keyed by
    the new row's seq; the earlier ones of the tier are dropped when they come due because a
    row that moved the due time follows them: ``warnings._moved_on``).

    Raises:
        InvalidInput: a field is malformed (the message names it: action, occurred_at,
            actor, idempotency_key, amount, currency, evidence_ref, evidence_sha256, note);
            nothing written.
        NotFound: no escalation for the dispute.
        ConflictError: the idempotency key was used for different content, or the seq kept
            moving under concurrent writes.
    """
    did = parse_dispute_id(cmd.dispute_id)
    _check_actor(cmd.actor)
    _check_key(cmd.idempotency_key)
    _check_note(cmd.note, "note")
    check_text(cmd.action, "action")
    evidence = _evidence(cmd.evidence_ref, cmd.evidence_sha256)
    scheduler, store = ports.scheduler, ports.store
    for _ in range(CAS_RETRIES):
        esc, status = _current(store, did)
        ladder = ports.ladders.get(esc.ladder, esc.ladder_version)
        act = ladder.action(cmd.action)
        money = _money(cmd, act, esc.materiality.amount)
        rows = store.trail(did)
        if act.after is not None and not any(
                a.action == act.after and not a.partial for a in recorded_actions(rows)):
            raise InvalidInput(f"action: {cmd.action!r} needs a {act.after!r} on record first",
                               field="action")
        now = scheduler.time()
        at = _check_when(cmd.occurred_at, _asserts(cmd), now, _enqueued(rows))
        content: dict[str, Any] = {
            "action": cmd.action, "occurred_at": None if at is None else at.isoformat(),
            **money, "evidence": evidence, "note": cmd.note,
            "asserted": None if not _asserts(cmd) else {
                "timely": cmd.asserted_timely, "source": cmd.asserted_by or ""},
        }
        content = {k: v for k, v in content.items() if v is not None}
        scoped = esc.calendars(ports.calendars)
        first = _replay(rows, cmd.idempotency_key, content, cmd.actor)
        if first is not None:
            actions = recorded_actions(rows)
            placed = dispute_clocks(ladder, rows, actions, scoped, esc.deadlines)
            return ObligationResult(esc, first.seq, True, assess(ladder, placed, actions, now))
        actions = [*recorded_actions(rows), RecordedAction(
            cmd.action, at, cmd.actor, esc.seq + 1, cmd.asserted_timely, recorded_at=now,
            partial=bool(money.get("partial")), unchecked=bool(money.get("amount_unchecked")))]
        placed = dispute_clocks(ladder, rows, actions, scoped, esc.deadlines)
        bind = binding(ladder, placed, actions, now)
        changes, replan = _replan((esc, status), ladder, bind, scoped, now)
        changes["obligations"] = tuple((c.name, c.at) for c in placed if c.at is not None)
        details = {**content, "idempotency_key": cmd.idempotency_key,
                   "clocks": _clock_details(placed), "binding": [n for n, _ in bind],
                   **({"replan": replan} if replan is not None else {})}
        try:
            state = store.append_event(LedgerEvent(
                did, ACTION_EVENT, f"ACTION_{cmd.action.upper()}", cmd.actor, now, changes,
                details, expected_seq=esc.seq))
        except ConflictError:
            time.sleep(random.uniform(*CAS_PAUSE_S))
            continue
        outcome = None
        if status is Status.PENDING:
            outcome = _apply_owner_less(scheduler, ApplyOp(state, ApplyAction.RESCHEDULE))
            if replan is not None and on_replanned is not None:
                on_replanned([state])
        elif status is Status.PAUSED:
            outcome = _apply_owner_less(scheduler, ApplyOp(state, ApplyAction.PARK))
        return ObligationResult(
            state, state.seq, False, assess(ladder, placed, actions, now),
            esc.due_at if status is Status.PENDING else None,
            state.due_at if status is Status.PENDING else None, outcome)
    raise ConflictError(f"dispute {did}: state kept changing; action not recorded, try again")


def resolve(
    cmd: Resolve, *, scheduler: Scheduler, store: ObligationStore, ladders: LadderSource,
    calendars: CalendarRegistry,
) -> ObligationResult:
    """Resolve a dispute from pending, paused, terminal, or cancelled on a ladder version that
    declares actions (there a cancel records no finding): a ``RESOLVED`` row, the dispute out
    of Redis. The row lists the deadlines missed (``details.late``).

    Raises:
        InvalidInput: unknown or ``unstated`` outcome, or one the dispute's ladder version
            does not admit (``outcomes`` in the file); bad actor / key / instant / reason.
        NotFound: no escalation for the dispute.
        ConflictError: already resolved (unless this is a replay) or cancelled on a version
            that declares no actions (domain.obligations.check_resolvable), the key was used for
            other content, or the seq kept moving.
    """
    did = parse_dispute_id(cmd.dispute_id)
    _check_actor(cmd.actor)
    _check_key(cmd.idempotency_key)
    _check_note(cmd.reason, "reason")
    try:
        outcome = Outcome(cmd.outcome)
    except ValueError:
        outcome = None
    if outcome is None or outcome is Outcome.UNSTATED:
        codes = ", ".join(o.value for o in Outcome if o is not Outcome.UNSTATED)
        raise InvalidInput(f"outcome: one of {codes}; got {cmd.outcome!r}", field="outcome")
    for _ in range(CAS_RETRIES):
        esc, status = _current(store, did)
        ladder = ladders.get(esc.ladder, esc.ladder_version)
        if ladder.outcomes and outcome.value not in ladder.outcomes:
            raise InvalidInput(f"outcome: {outcome.value!r} is not an outcome of ladder "
                               f"{ladder.key}; one of {', '.join(ladder.outcomes)}",
                               field="outcome")
        rows = store.trail(did)
        now = scheduler.time()
        asserted = _asserts(cmd)
        when = cmd.occurred_at if cmd.occurred_at is not None or asserted else now
        # a resolution "now" is never before the dispute, which may have been enqueued with
        # an opened_at up to the clock skew ahead of now: only a given instant is checked
        at = _check_when(when, asserted, now,
                         _enqueued(rows) if cmd.occurred_at is not None else {})
        content: dict[str, Any] = {
            "action": RESOLUTION, "outcome": outcome.value,
            "occurred_at": None if at is None else at.isoformat(), "reason": cmd.reason,
            "asserted": None if not asserted else {
                "timely": cmd.asserted_timely, "source": cmd.asserted_by or ""},
        }
        content = {k: v for k, v in content.items() if v is not None}
        if cmd.occurred_at is None and not asserted:
            content.pop("occurred_at")  # "now" differs on a retry: not part of the content
        scoped = esc.calendars(calendars)
        first = _replay(rows, cmd.idempotency_key, content, cmd.actor)
        if first is not None:
            actions = recorded_actions(rows)
            placed = dispute_clocks(ladder, rows, actions, scoped, esc.deadlines)
            return ObligationResult(esc, first.seq, True, assess(ladder, placed, actions, now))
        check_resolvable(ladder, status, did)
        actions = [*recorded_actions(rows), RecordedAction(
            RESOLUTION, at, cmd.actor, esc.seq + 1, cmd.asserted_timely, outcome.value,
            recorded_at=now)]
        placed = dispute_clocks(ladder, rows, actions, scoped, esc.deadlines)
        states = assess(ladder, placed, actions, now)
        late = late_at(states)
        details = {**content, "occurred_at": None if at is None else at.isoformat(),
                   "idempotency_key": cmd.idempotency_key, "from_status": status.value,
                   "clocks": _clock_details(placed), "late": late}
        changes: dict[str, Any] = {
            "status": Status.RESOLVED, "deadlines": (),
            "obligations": tuple((c.name, c.at) for c in placed if c.at is not None)}
        try:
            state = store.append_event(LedgerEvent(
                did, RESOLVED_EVENT, f"RESOLVED_{outcome.value.upper()}", cmd.actor, now,
                changes, details, expected_seq=esc.seq))
        except ConflictError:
            time.sleep(random.uniform(*CAS_PAUSE_S))
            continue
        if status not in ENDED:
            leave_redis(scheduler, store, did, state.seq)
        return ObligationResult(state, state.seq, False, states,
                                esc.due_at if status is Status.PENDING else None, None)
    raise ConflictError(f"dispute {did}: state kept changing; resolution not recorded, "
                        "try again")


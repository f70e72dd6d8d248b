"""record_action and resolve (service_layer.obligations) on the in-memory fakes.

The re-plan of a pending escalation's due time, idempotency, every refused input (nothing
written), and resolution from pending and terminal. The same use cases run against real
PostgreSQL and Redis in tests/integration/test_obligations_store.py.

Instants (New York institution, Federal Reserve calendar; see tests/unit/test_obligations.py
for the calendar facts): anchor Mon 2026-01-05 10:00 EST; D10 (10 business days) = Tue
2026-01-20 17:00 EST = 22:00Z; INV45 = end of Thu 2026-02-19 EST = 2026-02-20 05:00Z.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import ConflictError, ErrorCode, InvalidInput, InvalidParameter
from escalation.domain.escalation import Escalation, Status
from escalation.domain.obligations import DeadlineState, check_resolvable
from escalation.domain.timeutil import to_ms
from escalation.service_layer.cancel import cancel
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.obligations import (
    ObligationPorts,
    ObligationResult,
    RecordAction,
    Resolve,
    record_action,
    resolve,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler

ROOT = Path(__file__).resolve().parents[2]
CATALOG = LadderCatalog.from_dir(ROOT / "ladders")
REG_E = CATALOG.get("reg_e_error_resolution", 3)
CFPB = CATALOG.get("cfpb_complaint_response", 4)
REVIEW = CATALOG.get("dispute_review", 1)  # declares no actions
CALS = builtin_calendars()
NY = ZoneInfo("America/New_York")
NO = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def L(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """New York wall time."""
    return datetime(y, mo, d, h, mi, tzinfo=NY)


def Z(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """An instant written in UTC."""
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


ANCHOR = L(2026, 1, 5, 10)
D10, INV45 = Z(2026, 1, 20, 22), Z(2026, 2, 20, 5)
# The compliance tier's window: 25 calendar days from entry Mon Jan 5 10:00 EST ->
# Fri 2026-01-30 10:00 EST = 15:00Z (the natural end of the tier).
NATURAL = Z(2026, 1, 30, 15)
# Its cap by the conservative investigation (at D10 until a timely provisional credit),
# buffer 3 calendar days: the latest t with t + 3 days <= Tue Jan 20 17:00 EST is Sat Jan 17
# 17:00 EST = 22:00Z.
CONSERVATIVE_CAP = Z(2026, 1, 17, 22)


class World:
    """A scheduler, an audit log and the shipped ladders, the clock at the anchor."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=ANCHOR.astimezone(UTC))
        self.store = FakeAuditLog()
        self.ladders = FakeLadders([REG_E, CFPB, REVIEW])

    def kw(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "store": self.store, "ladders": self.ladders,
                "calendars": CALS}

    def enqueue(self, tier: str = "compliance", ladder: str = "reg_e_error_resolution",
                attributes: dict[str, object] | None = None,
                materiality: str = "125.00") -> Escalation:
        req = EnqueueRequest(
            dispute_id=uuid.uuid4(), materiality=materiality, source_hash="ab" * 32, tier=tier,
            opened_at=ANCHOR, anchor_at=ANCHOR, ladder=ladder, timezone="America/New_York",
            calendar="us_federal_reserve",
            attributes=NO if attributes is None else attributes)
        return enqueue_on_breach(EnqueueOne(req, "svc", ladder),
                                 CorePorts(**self.kw())).escalation

    def at(self, when: datetime) -> None:
        self.scheduler.now = when.astimezone(UTC)

    def record(self, did: uuid.UUID, action: str, when: datetime, key: str,
               **kw: Any) -> ObligationResult:
        if action in ("provisional_credit", "correction", "provisional_credit_reversal"):
            kw.setdefault("amount", "125.00")
            kw.setdefault("currency", "USD")
        return record_action(RecordAction(did, action, when, "ops.alice", key, **kw),
                             ObligationPorts(**self.kw()))

    def rows(self, did: uuid.UUID) -> int:
        return len(self.store.trail(did))


# ------------------------------------------------------------------------- re-plan
def test_enqueued_compliance_tier_is_capped_by_the_conservative_investigation() -> None:
    w = World()
    esc = w.enqueue()
    assert dict(esc.deadlines) == {"determine_or_provisionally_credit": D10,
                                   "investigation": D10}
    assert esc.due_at == CONSERVATIVE_CAP
    assert w.scheduler.scores[str(esc.dispute_id)] == to_ms(CONSERVATIVE_CAP)


def test_timely_provisional_credit_moves_the_due_later_but_not_past_the_notice_clock() -> None:
    """PC Thu Jan 15 11:00 EST (< D10: timely). The investigation opens to INV45 (cap Feb 17
    05:00Z), which no longer sets the due time; the 2-bd notice clock starts: Fri 16 (1), Mon
    19 MLK closed, Tue 20 (2) -> Tue Jan 20 17:00 EST = 22:00Z, buffer 0, caps every tier.
    So the due moves later, from Jan 17 to Jan 20 22:00Z, and not to the natural Jan 30."""
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 15, 12))
    res = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 15, 11), "pc-1")
    notice = Z(2026, 1, 20, 22)
    assert (res.due_before, res.due_after) == (CONSERVATIVE_CAP, notice)
    state = w.store.states[esc.dispute_id]
    assert state.due_at == notice
    assert dict(state.deadlines) == {"investigation": INV45,
                                     "provisional_credit_notice": notice}
    assert state.regulatory_deadline == notice
    assert w.scheduler.scores[str(esc.dispute_id)] == to_ms(notice)
    row = w.store.trail(esc.dispute_id)[-1]
    assert (row.event, row.match_decision) == ("ACTION_RECORDED", "ACTION_PROVISIONAL_CREDIT")
    assert row.details["replan"] == {
        "due_at_before": CONSERVATIVE_CAP.isoformat(), "due_at_after": notice.isoformat(),
        "why": "a regulatory cap that set it no longer binds",
        "capped_by": "provisional_credit_notice"}
    assert row.details["binding"] == ["investigation", "provisional_credit_notice"]
    assert row.details["amount"] == "125.00" and row.details["currency"] == "USD"
    assert row.details["occurred_at"] == L(2026, 1, 15, 11).astimezone(UTC).isoformat()
    assert row.details["clocks"]["investigation"] == {"at": INV45.isoformat()}

    # The notice on Fri Jan 16: the notice clock is met and stops capping; the cap that set
    # the due time no longer binds, so it moves to the tier's natural end (Jan 30 15:00Z),
    # which is before the investigation's cap (Feb 17): nothing caps it any more.
    w.at(L(2026, 1, 16, 12))
    res = w.record(esc.dispute_id, "provisional_credit_notice", L(2026, 1, 16, 11), "pcn-1")
    assert (res.due_before, res.due_after) == (notice, NATURAL)
    assert w.scheduler.scores[str(esc.dispute_id)] == to_ms(NATURAL)
    replan = w.store.trail(esc.dispute_id)[-1].details["replan"]
    assert replan["why"] == "a regulatory cap that set it no longer binds"
    assert replan["capped_by"] is None
    assert w.store.states[esc.dispute_id].deadlines == (("investigation", INV45),)


def test_a_clock_started_by_the_action_pulls_the_due_earlier() -> None:
    """PC on day 3 (Thu Jan 8 11:00 EST): its notice clock, Mon Jan 12 17:00 EST = 22:00Z,
    caps the compliance tier earlier than the conservative Jan 17 cap."""
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 8, 12))
    res = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "pc-1")
    assert res.due_after == Z(2026, 1, 12, 22)
    replan = w.store.trail(esc.dispute_id)[-1].details["replan"]
    assert replan["why"] == "a clock the action started caps the tier"
    assert replan["capped_by"] == "provisional_credit_notice"
    assert w.scheduler.scores[str(esc.dispute_id)] == to_ms(Z(2026, 1, 12, 22))


def test_an_action_that_changes_no_binding_cap_leaves_the_due_alone() -> None:
    """A correction meets no clock: the due time stays; no replan in the row."""
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 6, 12))
    res = w.record(esc.dispute_id, "correction", L(2026, 1, 6, 11), "c-1")
    assert res.due_before == res.due_after == CONSERVATIVE_CAP
    assert "replan" not in w.store.trail(esc.dispute_id)[-1].details


def test_a_late_provisional_credit_keeps_the_conservative_investigation_binding() -> None:
    """PC on Wed Jan 21 (after D10): not timely, the investigation stays at D10, missed
    while open. The cap that set the due time (Jan 17 22:00Z) still binds, so the due time
    stays there (already due) and the row claims no re-plan."""
    w = World()
    esc = w.enqueue()
    now = L(2026, 1, 21, 12)
    w.at(now)
    res = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 21, 11), "pc-late")
    state = w.store.states[esc.dispute_id]
    assert dict(state.deadlines)["investigation"] == D10
    assert res.due_after == CONSERVATIVE_CAP  # already due: not moved later
    assert "replan" not in w.store.trail(esc.dispute_id)[-1].details
    states = {a.name: a.state for a in res.assessments}
    assert states["determine_or_provisionally_credit"] is DeadlineState.MISSED
    assert states["investigation"] is DeadlineState.MISSED


# ------------------------------------------------------------------------- idempotency
def test_replay_returns_the_first_seq_and_writes_nothing() -> None:
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 8, 12))
    first = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "pc-1",
                     evidence_ref="doc://credit/1", evidence_sha256="AB" * 32, note="ok")
    w.at(L(2026, 1, 9, 12))
    rows = w.rows(esc.dispute_id)
    again = w.record(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "pc-1",
                     evidence_ref="doc://credit/1", evidence_sha256="ab" * 32, note="ok")
    assert again.replayed and not first.replayed
    assert again.seq == first.seq == 2
    assert w.rows(esc.dispute_id) == rows
    assert w.store.trail(esc.dispute_id)[-1].details["evidence"] == {
        "ref": "doc://credit/1", "sha256": "ab" * 32}


@pytest.mark.parametrize("change", [
    {"occurred_at": L(2026, 1, 8, 10)}, {"amount": "126.00"}, {"note": "other"},
    {"action": "determination", "amount": None, "currency": None},
])
def test_same_key_other_content_is_a_conflict_and_writes_nothing(change: dict[str, Any]) -> None:
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 8, 12))
    cmd = RecordAction(esc.dispute_id, "provisional_credit", L(2026, 1, 8, 11), "ops.alice",
                       "pc-1", amount="125.00", currency="USD")
    record_action(cmd, ObligationPorts(**w.kw()))
    rows, state = w.rows(esc.dispute_id), w.store.states[esc.dispute_id]
    with pytest.raises(ConflictError, match="idempotency_key"):
        record_action(replace(cmd, **change), ObligationPorts(**w.kw()))
    assert w.rows(esc.dispute_id) == rows
    assert w.store.states[esc.dispute_id] == state


# ------------------------------------------------------------------------- bad input
GOOD = {"action": "provisional_credit", "occurred_at": L(2026, 1, 8, 11),
        "actor": "ops.alice", "idempotency_key": "k", "amount": "125.00", "currency": "USD"}
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("naive instant", {"occurred_at": datetime(2026, 1, 8, 11)}, "occurred_at"),
    ("beyond 5 min in the future", {"occurred_at": L(2026, 1, 8, 12, 6)}, "occurred_at"),
    ("before the anchor", {"occurred_at": L(2026, 1, 5, 9, 59)}, "occurred_at"),
    ("no instant and no assertion", {"occurred_at": None}, "occurred_at"),
    ("float amount", {"amount": 125.0}, "amount"),
    ("NaN", {"amount": "NaN"}, "amount"),
    ("Decimal NaN", {"amount": Decimal("NaN")}, "amount"),
    ("negative", {"amount": "-1.00"}, "amount"),
    ("below a cent", {"amount": "1.001"}, "amount"),
    ("missing amount on a money action", {"amount": None}, "amount"),
    ("amount on a non-money action",
     {"action": "provisional_credit_notice"}, "amount"),
    ("lower-case currency", {"currency": "usd"}, "currency"),
    ("missing currency", {"currency": None}, "currency"),
    ("bad sha256", {"evidence_ref": "doc://1", "evidence_sha256": "ab" * 31}, "evidence_sha256"),
    ("sha256 without a ref", {"evidence_sha256": "ab" * 32}, "evidence_ref"),
    ("unknown action", {"action": "refund"}, "action"),
    ("cli as actor", {"actor": "cli"}, "actor"),
    ("blank actor", {"actor": " "}, "actor"),
    ("empty key", {"idempotency_key": ""}, "idempotency_key"),
    ("long note", {"note": "x" * 501}, "note"),
]


@pytest.mark.parametrize(("why", "change", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_field_and_writes_nothing(
    why: str, change: dict[str, Any], field: str,
) -> None:
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 8, 12))
    rows, state = w.rows(esc.dispute_id), w.store.states[esc.dispute_id]
    score = w.scheduler.scores[str(esc.dispute_id)]
    with pytest.raises(InvalidInput) as err:
        record_action(RecordAction(esc.dispute_id, **{**GOOD, **change}), ObligationPorts(**w.kw()))
    assert str(err.value).startswith(field) or f"{field}:" in str(err.value) \
        or f" {field} " in str(err.value), f"{why}: {err.value}"
    assert "materiality" not in str(err.value), why
    assert w.rows(esc.dispute_id) == rows
    assert w.store.states[esc.dispute_id] == state
    assert w.scheduler.scores[str(esc.dispute_id)] == score


def test_an_amount_without_a_currency_says_the_currency_is_required() -> None:
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 8, 12))
    with pytest.raises(InvalidParameter) as err:
        record_action(RecordAction(esc.dispute_id, **{**GOOD, "currency": None}),
                      ObligationPorts(**w.kw()))
    assert err.value.field == "currency"
    assert str(err.value).startswith("currency is required with amount")
    assert "None" not in str(err.value)


@pytest.mark.parametrize("outcome", ["unstated", "fixed", ""])
def test_resolve_refuses_an_unknown_or_unstated_outcome(outcome: str) -> None:
    w = World()
    esc = w.enqueue()
    rows = w.rows(esc.dispute_id)
    with pytest.raises(InvalidInput, match=r"^outcome"):
        resolve(Resolve(esc.dispute_id, outcome, "ops.alice", "r-1"), **w.kw())
    assert w.rows(esc.dispute_id) == rows
    assert str(esc.dispute_id) in w.scheduler.scores


def test_resolve_refuses_cli_as_actor() -> None:
    w = World()
    esc = w.enqueue()
    with pytest.raises(InvalidInput, match=r"^actor"):
        resolve(Resolve(esc.dispute_id, "no_error_found", "cli", "r-1"), **w.kw())
    assert w.rows(esc.dispute_id) == 1


# ------------------------------------------------------------------------- resolve
def test_resolve_from_pending_leaves_redis_and_records_the_late_deadlines() -> None:
    """Nothing done by Wed Jan 21 10:00 EST: both Reg E clocks (at D10) are missed; the
    resolution lists them in details.late."""
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 21, 10))
    res = resolve(Resolve(esc.dispute_id, "error_corrected", "ops.alice", "r-1",
                          reason="credited"), **w.kw())
    member = str(esc.dispute_id)
    assert member not in w.scheduler.scores and member not in w.scheduler.payloads
    state = w.store.states[esc.dispute_id]
    assert state.status is Status.RESOLVED and state.deadlines == ()
    row = w.store.trail(esc.dispute_id)[-1]
    assert (row.event, row.match_decision) == ("RESOLVED", "RESOLVED_ERROR_CORRECTED")
    assert row.details["late"] == ["determine_or_provisionally_credit", "investigation"]
    assert row.details["from_status"] == "pending"
    assert row.details["occurred_at"] == L(2026, 1, 21, 10).astimezone(UTC).isoformat()
    assert res.due_before == CONSERVATIVE_CAP


def test_resolve_on_time_lists_nothing_late() -> None:
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 16, 10))
    resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-1"), **w.kw())
    assert w.store.trail(esc.dispute_id)[-1].details["late"] == []


def test_resolve_from_terminal_then_twice_is_a_conflict() -> None:
    """A CFPB complaint in its terminal tier fires (TERMINAL), then is resolved on day 70:
    both clocks (15 and 60 days) were missed."""
    w = World()
    esc = w.enqueue(tier="compliance", ladder="cfpb_complaint_response", attributes={})
    w.at(L(2026, 3, 16, 10))
    report = fire_due(
        FireDue(batch_size=10, lease_ms=30_000, worker_id="w1"),
        CorePorts(scheduler=w.scheduler, store=w.store, ladders=w.ladders, calendars=CALS),
    )
    assert report.recorded == 1
    assert w.store.states[esc.dispute_id].status is Status.TERMINAL
    res = resolve(Resolve(esc.dispute_id, "closed_with_explanation", "ops.alice", "r-1"),
                  **w.kw())
    assert res.escalation.status is Status.RESOLVED
    row = w.store.trail(esc.dispute_id)[-1]
    assert row.details["from_status"] == "terminal"
    assert row.details["late"] == ["company_response", "final_response"]
    # the same key and content: a replay; another key: already resolved, nothing written
    again = resolve(Resolve(esc.dispute_id, "closed_with_explanation", "ops.alice", "r-1"),
                    **w.kw())
    assert again.replayed and again.seq == res.seq
    rows = w.rows(esc.dispute_id)
    with pytest.raises(ConflictError, match="already resolved"):
        resolve(Resolve(esc.dispute_id, "closed_with_explanation", "ops.alice", "r-2"),
                **w.kw())
    assert w.rows(esc.dispute_id) == rows


def test_resolve_after_a_cancel_is_refused_where_the_cancel_is_the_resolution() -> None:
    """dispute_review v1 declares no actions: its cancel counts as the resolution
    (docs/sla.md, "What a cancel meets"), so a later resolve is a conflict, nothing written."""
    assert not REVIEW.actions
    w = World()
    esc = w.enqueue(tier="standard", ladder="dispute_review", attributes={})
    cancel(esc.dispute_id, scheduler=w.scheduler, store=w.store, actor="ops.alice",
           reason="dup")
    rows = w.rows(esc.dispute_id)
    with pytest.raises(ConflictError, match="cancel is its resolution") as caught:
        resolve(Resolve(esc.dispute_id, "closed", "ops.alice", "r-1"), **w.kw())
    assert caught.value.code is ErrorCode.CONFLICT
    assert w.rows(esc.dispute_id) == rows
    assert w.store.states[esc.dispute_id].status is Status.CANCELLED


def test_resolve_after_a_cancel_is_recorded_where_the_ladder_declares_actions() -> None:
    """Reg E v3 declares actions: its cancel records no finding, and a resolve may follow."""
    w = World()
    esc = w.enqueue()
    cancel(esc.dispute_id, scheduler=w.scheduler, store=w.store, actor="ops.alice",
           reason="dup")
    res = resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-1"), **w.kw())
    assert res.escalation.status is Status.RESOLVED
    assert w.store.trail(esc.dispute_id)[-1].details["from_status"] == "cancelled"


@pytest.mark.parametrize(("status", "refused"), [
    (Status.PENDING, False), (Status.PAUSED, False), (Status.TERMINAL, False),
    (Status.RESOLVED, True), (Status.CANCELLED, True)])
def test_check_resolvable_on_a_ladder_without_actions(status: Status, refused: bool) -> None:
    if refused:
        with pytest.raises(ConflictError):
            check_resolvable(REVIEW, status, "d")
    else:
        check_resolvable(REVIEW, status, "d")
    # on a version that declares actions only a resolved dispute is refused
    if status is Status.RESOLVED:
        with pytest.raises(ConflictError):
            check_resolvable(REG_E, status, "d")
    else:
        check_resolvable(REG_E, status, "d")


def test_an_action_after_the_resolution_is_recorded() -> None:
    """A results notice is owed after the determination that resolved the case."""
    w = World()
    esc = w.enqueue()
    w.at(L(2026, 1, 16, 12))
    w.record(esc.dispute_id, "determination", L(2026, 1, 16, 10), "d-1")
    resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-1"), **w.kw())
    w.at(L(2026, 1, 20, 12))
    res = w.record(esc.dispute_id, "results_notice", L(2026, 1, 20, 11), "rn-1")
    assert w.store.states[esc.dispute_id].status is Status.RESOLVED
    assert res.due_before is None and res.redis is None
    assert {a.name: a.state for a in res.assessments}["results_notice"] is DeadlineState.MET
    assert str(esc.dispute_id) not in w.scheduler.payloads


# ------------------------------------------------------------- nothing before the dispute
DISPUTE_REVIEW = CATALOG.get("dispute_review", 1)
# Reg E v3's actions on a version without regulatory deadlines: no anchor is recorded, so
# the floor of an action's instant is the dispute's entry into its first tier (opened_at).
NO_DEADLINES = replace(REG_E, name="actions_only", version=1, previous_version=None,
                       regulatory=None, deadlines=())


def _opened_without_anchor(ladder: str) -> tuple[World, Escalation]:
    """A dispute enqueued with ``opened_at`` = ANCHOR on ``ladder`` (no deadlines, so its
    ENQUEUED row has no ``anchor_at``); the clock a day later."""
    w = World()
    w.ladders.ladders.extend([DISPUTE_REVIEW, NO_DEADLINES])
    esc = w.enqueue(tier="standard", ladder=ladder, attributes={})
    assert "anchor_at" not in w.store.trail(esc.dispute_id)[0].details
    w.at(L(2026, 1, 6, 10))
    return w, esc


@pytest.mark.parametrize("when", [Z(2020, 1, 1), L(2026, 1, 5, 9, 59)],
                         ids=["years_before", "a_minute_before"])
def test_a_resolution_before_the_dispute_was_opened_is_refused_on_every_ladder(
    when: datetime,
) -> None:
    """dispute_review has no anchor: the resolution's instant may not precede the dispute's
    opened_at (Mon Jan 5 10:00 EST); the message names occurred_at, nothing is written and
    the dispute stays scheduled."""
    w, esc = _opened_without_anchor("dispute_review")
    rows, score = w.rows(esc.dispute_id), w.scheduler.scores[str(esc.dispute_id)]
    with pytest.raises(InvalidInput, match=r"^occurred_at: .* before the dispute was opened"):
        resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-early",
                        occurred_at=when), **w.kw())
    assert w.rows(esc.dispute_id) == rows
    assert w.scheduler.scores[str(esc.dispute_id)] == score
    # at the instant it was opened, or later, it is accepted
    res = resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-ok",
                          occurred_at=ANCHOR), **w.kw())
    assert res.escalation.status is Status.RESOLVED


def test_a_resolution_without_an_instant_is_now_and_accepted() -> None:
    w, esc = _opened_without_anchor("dispute_review")
    res = resolve(Resolve(esc.dispute_id, "no_error_found", "ops.alice", "r-now"), **w.kw())
    assert res.escalation.status is Status.RESOLVED


def test_an_action_before_the_dispute_was_opened_is_refused_without_an_anchor() -> None:
    w, esc = _opened_without_anchor("actions_only")
    rows = w.rows(esc.dispute_id)
    with pytest.raises(InvalidInput, match=r"^occurred_at: .* before the dispute was opened"):
        w.record(esc.dispute_id, "determination", L(2025, 12, 31, 10), "d-early")
    assert w.rows(esc.dispute_id) == rows
    w.record(esc.dispute_id, "determination", L(2026, 1, 5, 10, 1), "d-ok")
    assert w.rows(esc.dispute_id) == rows + 1

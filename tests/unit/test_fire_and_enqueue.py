"""Every branch of service_layer fire_due and enqueue, on the in-memory fakes (tests/fakes.py).

The same protocol runs against real Redis and PostgreSQL in tests/e2e/test_firing_protocol.py;
here each branch is set up directly and checked in milliseconds.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars
from escalation.domain.decide import Decision, DecisionKind
from escalation.domain.errors import (
    ConflictError,
    ErrorCode,
    InvalidInput,
    InvalidItems,
    InvalidParameter,
    UnknownTier,
)
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.record_rule import (
    ProjectionHead,
    RecordRequest,
    RecordStatus,
    plan_record,
)
from escalation.domain.timeutil import to_ms
from escalation.ports import ClaimedItem
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import (
    EnqueueMany,
    EnqueueOne,
    EnqueueRequest,
    enqueue_many,
    enqueue_on_breach,
    validation_errors,
)
from escalation.service_layer.fire import FireDue, FiringHooks, fire_due
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler

CALS = builtin_calendars()
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LEASE_MS = 30_000
LADDER = Ladder(
    name="dispute_review",
    version=1,
    tiers=(
        Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
        Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS)),
        Tier("compliance", "Compliance", 30, SlaWindow(72, WindowUnit.CALENDAR_HOURS)),
    ),
    terminal_tier="compliance",
)


class World:
    """One scheduler, audit log and ladder set, with the clock at ``T0``."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.ladders = FakeLadders([LADDER])
        self.events: list[tuple[str, dict[str, object]]] = []
        self.poisoned: list[tuple[ClaimedItem, ErrorCode, str]] = []

    def enqueue(self, tier: str = "standard", due: datetime = T0, **kw: object) -> Escalation:
        req = EnqueueRequest(dispute_id=kw.pop("dispute_id", uuid.uuid4()), materiality="10.00",
                             source_hash="ab" * 32, tier=tier, due_at=due)
        return enqueue_on_breach(
            EnqueueOne(request=req, actor="svc", default_ladder="dispute_review"),
            CorePorts(scheduler=self.scheduler, store=self.store, ladders=self.ladders,
                      calendars=CALS),
        ).escalation

    def fire(self, batch_size: int = 10, worker: str = "w1", crash_at: str = "",  # type: ignore[no-untyped-def]
             decision_events: bool = True):
        def crashpoint(name: str) -> None:
            if name == crash_at:
                raise RuntimeError(f"crash {name}")

        return fire_due(
            FireDue(batch_size=batch_size, lease_ms=LEASE_MS, worker_id=worker,
                    decision_events=decision_events),
            CorePorts(scheduler=self.scheduler, store=self.store, ladders=self.ladders,
                      calendars=CALS),
            FiringHooks(emit=lambda event, **fields: self.events.append((event, fields)),
                        crashpoint=crashpoint,
                        on_poison=lambda item, code, error: self.poisoned.append(
                            (item, code, error))),
        )

    def event_names(self) -> list[str]:
        """Per-decision events (the one ``worker.batch`` summary line per batch left out)."""
        return [name for name, _ in self.events if name != "worker.batch"]


# ----------------------------------------------------------------------------- fire_due
def test_nothing_due_claims_nothing_and_reports_the_next_due_time() -> None:
    w = World()
    esc = w.enqueue(due=T0 + timedelta(hours=1))
    report = w.fire()
    assert (report.claimed, report.recorded, report.next_due_ms) == (0, 0, to_ms(esc.due_at))
    assert w.store.events(esc.dispute_id) == ["ENQUEUED"]


def test_due_member_is_promoted_recorded_then_applied_with_a_notification() -> None:
    w = World()
    esc = w.enqueue()
    report = w.fire()
    assert (report.claimed, report.recorded, report.applied) == (1, 1, 1)
    assert report.decisions == {"PROMOTED_TO_SENIOR": 1}
    state = w.store.states[esc.dispute_id]
    assert (state.tier, state.seq, state.status) == ("senior", 2, Status.PENDING)
    assert state.due_at == T0 + timedelta(hours=48)
    member = str(esc.dispute_id)
    assert w.scheduler.payloads[member].seq == 2
    assert w.scheduler.scores[member] == to_ms(state.due_at)
    assert member not in w.scheduler.locks
    assert [n["idempotency_key"] for n in w.scheduler.review] == [f"{member}:2"]
    assert w.event_names() == ["escalation.promoted"]
    assert [name for name, _ in w.events].count("worker.batch") == 1
    assert w.store.ledger[-1].fence_token == 1


def test_without_decision_events_nothing_per_decision_is_built_but_the_batch_line_is() -> None:
    """Above DEBUG the worker passes decision_events=False: the per-decision events are not
    built at all (they cost CPU on the firing path); the decision itself is unchanged."""
    w = World()
    esc = w.enqueue()
    report = w.fire(decision_events=False)
    assert (report.recorded, report.applied) == (1, 1)
    assert w.store.states[esc.dispute_id].seq == 2
    assert w.event_names() == []
    batch = [fields for name, fields in w.events if name == "worker.batch"]
    assert len(batch) == 1 and batch[0]["decisions"] == {"PROMOTED_TO_SENIOR": 1}


def test_terminal_decision_removes_the_member_and_never_reschedules_it() -> None:
    w = World()
    esc = w.enqueue(tier="compliance")
    report = w.fire()
    assert report.decisions == {"TERMINAL_ESCALATION": 1}
    assert w.store.states[esc.dispute_id].status is Status.TERMINAL
    assert str(esc.dispute_id) not in w.scheduler.scores
    assert str(esc.dispute_id) not in w.scheduler.payloads
    assert w.event_names() == ["escalation.terminal"]


def test_claimed_before_its_due_time_is_handed_back_unrecorded() -> None:
    w = World()
    esc = w.enqueue(due=T0 + timedelta(hours=1))
    member = str(esc.dispute_id)
    w.scheduler.scores[member] = to_ms(T0)  # a score earlier than the payload's due time
    report = w.fire()
    assert (report.claimed, report.recorded, report.applied) == (1, 0, 0)
    assert w.store.events(esc.dispute_id) == ["ENQUEUED"]
    assert w.scheduler.scores[member] == to_ms(esc.due_at)  # back at its payload due time
    assert member not in w.scheduler.locks


def test_poison_member_is_reported_not_recorded_and_stays_leased() -> None:
    w = World()
    esc = w.enqueue()
    member = str(esc.dispute_id)
    w.scheduler.payloads[member] = esc.with_changes(seq=1, ladder_version=9)  # unknown version
    report = w.fire()
    assert (report.claimed, report.poison, report.recorded) == (1, 1, 0)
    assert [str(item.escalation.dispute_id) for item, _, _ in w.poisoned] == [member]
    assert w.poisoned[0][1] is ErrorCode.LADDER_INVALID
    assert "dispute_review" in w.poisoned[0][2]
    assert w.event_names() == ["escalation.decision_failed"]
    assert w.store.events(esc.dispute_id) == ["ENQUEUED"]
    assert w.scheduler.scores[member] == to_ms(T0) + LEASE_MS  # due again after the lease
    assert member in w.scheduler.locks


def test_stale_claim_applies_the_newer_recorded_state_instead_of_deciding_again() -> None:
    w = World()
    esc = w.enqueue()
    state = w.store.states[esc.dispute_id]
    # someone else moved the projection on (e.g. a ladder migration) without Redis seeing it
    w.store.append(state, "LADDER_MIGRATED", "admin", T0, due_at=T0 + timedelta(hours=5))
    report = w.fire()
    assert (report.stale, report.recorded, report.applied) == (1, 0, 1)
    assert w.store.events(esc.dispute_id) == ["ENQUEUED", "LADDER_MIGRATED"]
    member = str(esc.dispute_id)
    assert w.scheduler.payloads[member].seq == 2
    assert w.scheduler.scores[member] == to_ms(T0 + timedelta(hours=5))
    assert w.event_names() == ["escalation.stale_claim"]
    assert w.scheduler.review == []  # no PROMOTED/TERMINAL row was left unapplied


def test_decision_recorded_but_never_applied_is_applied_with_its_notification() -> None:
    w = World()
    esc = w.enqueue()
    member = str(esc.dispute_id)
    with pytest.raises(RuntimeError, match="after_record"):  # worker dies before apply
        w.fire(crash_at="after_record")
    assert w.scheduler.payloads[member].seq == 1 and w.scheduler.review == []
    w.scheduler.advance(timedelta(milliseconds=LEASE_MS))  # the lease runs out
    report = w.fire(worker="w2")
    assert (report.stale, report.recorded, report.applied) == (1, 0, 1)
    assert w.store.events(esc.dispute_id) == ["ENQUEUED", "PROMOTED"]  # decided once
    assert w.scheduler.payloads[member].tier == "senior"
    assert [n["match_decision"] for n in w.scheduler.review] == ["PROMOTED_TO_SENIOR"]


def test_already_decided_closed_projection_removes_the_member() -> None:
    w = World()
    esc = w.enqueue()
    state = w.store.states[esc.dispute_id]
    w.store.append(state, "CANCELLED", "admin", T0, status=Status.CANCELLED)  # Redis missed it
    report = w.fire()
    assert (report.stale, report.recorded) == (1, 0)
    assert str(esc.dispute_id) not in w.scheduler.scores
    assert str(esc.dispute_id) not in w.scheduler.payloads
    assert w.store.events(esc.dispute_id) == ["ENQUEUED", "CANCELLED"]


def test_unknown_member_without_a_projection_is_removed_as_zset_drift() -> None:
    w = World()
    esc = w.enqueue()
    del w.store.states[esc.dispute_id]  # PostgreSQL never heard of it
    report = w.fire()
    assert (report.claimed, report.recorded, report.stale) == (1, 0, 0)
    assert str(esc.dispute_id) not in w.scheduler.scores
    unknown = [f for name, f in w.events if name == "escalation.unknown_member"]
    assert [f["match_decision"] for f in unknown] == ["ZSET_DRIFT"]


def test_stuck_member_is_recorded_and_restored_from_the_projection() -> None:
    w = World()
    esc = w.enqueue()
    member = str(esc.dispute_id)
    del w.scheduler.payloads[member]  # payload lost
    report = w.fire()
    assert (report.stuck, report.claimed) == (1, 0)
    assert w.store.events(esc.dispute_id) == ["ENQUEUED", "STUCK_MEMBER"]
    assert w.scheduler.payloads[member].seq == 2
    assert w.scheduler.scores[member] == to_ms(esc.due_at)
    stuck = [f for name, f in w.events if name == "escalation.stuck_member"]
    assert [f["repaired"] for f in stuck] == [True]


def test_stuck_member_repair_sends_its_lost_decision_entry_once() -> None:
    w = World()
    esc = w.enqueue()
    member = str(esc.dispute_id)
    w.fire()  # PROMOTED at seq 2, its entry sent
    kept = w.scheduler.review
    w.scheduler.review = []  # payload and entry lost, member left and due
    del w.scheduler.payloads[member]
    w.scheduler.scores[member] = to_ms(T0)
    assert w.fire().stuck == 1
    assert w.scheduler.review == kept  # the same entry, once
    assert w.scheduler.payloads[member].seq == 3
    del w.scheduler.payloads[member]  # payload lost again, entry kept: nothing re-sent
    w.scheduler.scores[member] = to_ms(T0)
    assert w.fire().stuck == 1
    assert w.scheduler.review == kept


def test_stuck_member_unknown_to_postgres_or_not_a_uuid_is_reported_unrepaired() -> None:
    w = World()
    w.scheduler.scores["not-a-uuid"] = to_ms(T0)
    w.scheduler.scores[str(uuid.uuid4())] = to_ms(T0)
    report = w.fire()
    assert report.stuck == 2
    stuck = [f for name, f in w.events if name == "escalation.stuck_member"]
    assert [f["repaired"] for f in stuck] == [False, False]
    assert w.store.ledger == [] and w.scheduler.scores == {}


def test_contended_member_is_skipped_and_a_stale_worker_is_refused() -> None:
    w = World()
    esc = w.enqueue()
    member = str(esc.dispute_id)
    first = w.scheduler.claim(10, LEASE_MS, "w-slow")  # w-slow holds the lock
    assert w.fire(worker="w2").claimed == 0
    assert w.scheduler.claim(10, LEASE_MS, "w3").contended == 0  # re-scored: not due yet
    w.scheduler.advance(timedelta(milliseconds=LEASE_MS))  # w-slow's lease ends
    assert w.fire(worker="w2").recorded == 1
    # w-slow wakes up and records against seq 1: the record rule calls it stale
    decision = Decision(DecisionKind.PROMOTED, "PROMOTED_TO_SENIOR", "standard", "senior",
                        T0 + timedelta(hours=1), T0)
    outcome = w.store.record_decisions([(first.items[0], decision)], "w-slow")[0]
    assert outcome.status is RecordStatus.STALE
    assert w.store.events(esc.dispute_id) == ["ENQUEUED", "PROMOTED"]
    assert w.scheduler.payloads[member].seq == 2


def test_batch_size_limits_a_claim() -> None:
    w = World()
    for _ in range(3):
        w.enqueue()
    assert w.fire(batch_size=2).recorded == 2
    assert w.fire(batch_size=2).recorded == 1


# ----------------------------------------------------------------------------- enqueue
def _req(**kw: object) -> EnqueueRequest:
    base: dict[str, object] = {"dispute_id": uuid.uuid4(), "materiality": "10.00",
                               "source_hash": "ab" * 32, "due_at": T0}
    base.update(kw)
    return EnqueueRequest(**base)  # type: ignore[arg-type]


def _enqueue(w: World, reqs: list[EnqueueRequest], seen: list[Escalation] | None = None):  # type: ignore[no-untyped-def]
    return enqueue_many(
        EnqueueMany(requests=reqs, actor="svc", default_ladder="dispute_review"),
        CorePorts(scheduler=w.scheduler, store=w.store, ladders=w.ladders, calendars=CALS),
        None if seen is None else seen.extend,
    )


def test_enqueue_records_first_then_schedules_and_reports_new_members() -> None:
    w = World()
    seen: list[Escalation] = []
    req = _req(opened_at=T0, due_at=None)
    (res,) = _enqueue(w, [req], seen)
    assert (res.created, res.status, res.escalation.seq) == (True, Status.PENDING, 1)
    assert res.escalation.due_at == T0 + timedelta(hours=24)  # opened_at + the SLA window
    assert w.scheduler.scores[str(req.dispute_id)] == to_ms(T0 + timedelta(hours=24))
    assert [e.dispute_id for e in seen] == [req.dispute_id]


def test_repeat_enqueue_is_idempotent_and_repairs_a_lost_redis_entry() -> None:
    w = World()
    seen: list[Escalation] = []
    req = _req()
    _enqueue(w, [req])
    w.scheduler.cancel(req.dispute_id)  # crash between record and schedule
    (res,) = _enqueue(w, [req], seen)
    assert (res.created, res.status) == (False, Status.PENDING)
    assert str(req.dispute_id) in w.scheduler.scores  # re-asserted
    assert w.store.events(req.dispute_id) == ["ENQUEUED"]
    (again,) = _enqueue(w, [req], seen)
    assert again.created is False
    assert len(seen) == 1  # on_scheduled only hears of members new in Redis


def test_enqueue_of_a_terminal_or_cancelled_dispute_is_a_conflict() -> None:
    w = World()
    esc = w.enqueue()
    w.store.append(w.store.states[esc.dispute_id], "CANCELLED", "admin", T0,
                   status=Status.CANCELLED)
    w.scheduler.cancel(esc.dispute_id)
    with pytest.raises(ConflictError, match="cancelled"):
        w.enqueue(dispute_id=esc.dispute_id)
    assert str(esc.dispute_id) not in w.scheduler.scores  # never brought back
    (res,) = _enqueue(w, [_req(dispute_id=esc.dispute_id)])  # the batch verb just says so
    assert (res.created, res.status) == (False, Status.CANCELLED)


def test_enqueue_of_a_paused_dispute_writes_nothing_to_redis() -> None:
    w = World()
    esc = w.enqueue()
    w.store.append(w.store.states[esc.dispute_id], "PAUSED", "admin", T0, status=Status.PAUSED)
    w.scheduler.cancel(esc.dispute_id)
    (res,) = _enqueue(w, [_req(dispute_id=esc.dispute_id)])
    assert (res.created, res.status) == (False, Status.PAUSED)
    assert str(esc.dispute_id) not in w.scheduler.scores


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"opened_at": T0}, "exactly one"),
        ({"due_at": None}, "exactly one"),
        ({"due_at": datetime(2026, 3, 2, 12, 0)}, "naive|timezone"),
        ({"materiality": "NaN"}, "(?i)nan|number|amount"),
        ({"tier": "nope"}, "nope"),
    ],
)
def test_a_bad_request_in_a_batch_writes_nothing(bad: dict[str, object], message: str) -> None:
    w = World()
    with pytest.raises((InvalidInput, UnknownTier), match=message) as info:
        _enqueue(w, [_req(), _req(**bad)])
    assert str(info.value).startswith("request 2: ") or isinstance(info.value, UnknownTier)
    assert w.store.ledger == [] and w.scheduler.scores == {}


def test_every_bad_request_of_a_batch_is_listed_with_its_item_and_field() -> None:
    w = World()
    with pytest.raises(InvalidItems) as info:
        _enqueue(w, [_req(materiality="NaN"), _req(), _req(materiality="-1")])
    errors = info.value.errors
    assert [(e.item, e.field) for e in errors] == [(0, "materiality"), (2, "materiality")]
    assert str(info.value).startswith("request 1: ") and "(and 1 more bad request)" in str(
        info.value)
    assert w.store.ledger == [] and w.scheduler.scores == {}
    # one bad request is raised as itself
    with pytest.raises(InvalidInput) as one:
        _enqueue(w, [_req(), _req(materiality="-1")])
    assert not isinstance(one.value, InvalidItems) and one.value.item == 1


def test_validation_errors_name_the_callers_positions_and_write_nothing() -> None:
    w = World()
    ports = CorePorts(scheduler=w.scheduler, store=w.store, ladders=w.ladders, calendars=CALS)

    def check(reqs: list[EnqueueRequest], positions: list[int]) -> list[tuple[int | None,
                                                                             str | None]]:
        cmd = EnqueueMany(requests=reqs, actor="svc", default_ladder="dispute_review")
        return [(e.item, e.field) for e in validation_errors(cmd, ports, positions)]

    assert check([_req(), _req(materiality="NaN"), _req(materiality="-1")], [0, 3, 5]) == [
        (3, "materiality"), (5, "materiality")]
    assert check([_req(materiality="NaN")], [4]) == [(4, "materiality")]
    assert check([_req()], [0]) == [] and check([], []) == []
    assert w.store.ledger == [] and w.scheduler.scores == {}


@pytest.mark.parametrize(("given", "field"), [
    ({"due_in": timedelta(hours=1)}, "due_in"),  # and the due_at of _req
    ({"opened_at": T0}, "opened_at"),
    ({"due_at": None}, "due_at"),  # none given
])
def test_due_at_due_in_opened_at_refused_together_name_a_field(
        given: dict[str, object], field: str) -> None:
    w = World()
    with pytest.raises(InvalidParameter) as info:
        _enqueue(w, [_req(**given)])
    assert info.value.field == field
    assert info.value.render(lambda p: "--" + p.replace("_", "-")).startswith(
        "give exactly one of --due-at (breach time), --due-in")
    assert "due_at" in str(info.value) and "--" not in str(info.value)


@pytest.mark.parametrize(("given", "field"), [
    ({"due_at": T0 + timedelta(days=3650, seconds=1)}, "due_at"),
    ({"due_at": None, "due_in": timedelta(days=3650, seconds=1)}, "due_in"),
])
def test_a_due_time_more_than_3650_days_ahead_is_refused_naming_its_field(
        given: dict[str, object], field: str) -> None:
    """One bound for every due instant (DUE_IN_MAX), whichever input gives it."""
    w = World()
    with pytest.raises(InvalidParameter, match="3650 days") as info:
        _enqueue(w, [_req(**given)])
    assert info.value.field == field
    assert w.store.ledger == [] and w.scheduler.scores == {}
    _enqueue(w, [_req(due_at=T0 + timedelta(days=3650))])  # the bound itself is accepted
    assert len(w.store.ledger) == 1


# ----------------------------------------------------------------------------- record rule
def _head(status: Status = Status.PENDING, seq: int = 1) -> ProjectionHead:
    return ProjectionHead(status, seq, "standard", T0, None)


PROMOTE = Decision(DecisionKind.PROMOTED, "PROMOTED_TO_SENIOR", "standard", "senior",
                   T0 + timedelta(hours=48), T0, "cal-1", T0 + timedelta(days=15))
TERMINATE = Decision(DecisionKind.TERMINAL, "TERMINAL_ESCALATION", "standard", None, None, T0)


def test_record_rule_records_a_promotion_at_the_next_seq() -> None:
    plan = plan_record(RecordRequest(_head(seq=3), 3, PROMOTE))
    assert plan.status is RecordStatus.RECORDED
    assert plan.entry is not None and plan.head is not None
    assert (plan.entry.seq, plan.entry.event, plan.entry.due_at) == (4, "PROMOTED", T0)
    assert (plan.head.tier, plan.head.status, plan.head.due_at) == (
        "senior", Status.PENDING, T0 + timedelta(hours=48))
    assert plan.head.regulatory_deadline == T0 + timedelta(days=15)
    assert plan.entered_tier_at == T0


def test_record_rule_terminal_keeps_the_tier_and_clears_the_due_time() -> None:
    plan = plan_record(RecordRequest(_head(), 1, TERMINATE))
    assert plan.head == ProjectionHead(Status.TERMINAL, 2, "standard", None, None)
    assert plan.entry is not None and plan.entry.event == "TERMINAL"


@pytest.mark.parametrize(
    ("head", "claimed", "status"),
    [
        (None, 1, RecordStatus.UNKNOWN),
        (_head(Status.TERMINAL), 1, RecordStatus.CLOSED),
        (_head(Status.CANCELLED), 1, RecordStatus.CLOSED),
        (_head(Status.PAUSED), 1, RecordStatus.STALE),
        (_head(seq=2), 1, RecordStatus.STALE),
        (_head(seq=1), 2, RecordStatus.STALE),
    ],
)
def test_record_rule_refuses_what_is_not_the_claimed_pending_seq(
    head: ProjectionHead | None, claimed: int, status: RecordStatus
) -> None:
    plan = plan_record(RecordRequest(head, claimed, PROMOTE))
    assert (plan.status, plan.entry, plan.head) == (status, None, head)


@pytest.mark.parametrize(
    "decision",
    [
        Decision(DecisionKind.NOT_DUE, "NOT_DUE", "standard", None, None, T0),
        Decision(DecisionKind.PROMOTED, "PROMOTED_TO_SENIOR", "standard", "senior", None, T0),
        Decision(DecisionKind.TERMINAL, "TERMINAL_ESCALATION", "standard", None, None,
                 datetime(2026, 3, 2)),
    ],
)
def test_record_rule_refuses_a_decision_with_nothing_to_record(decision: Decision) -> None:
    with pytest.raises(InvalidInput):
        plan_record(RecordRequest(_head(), 1, decision))


def test_a_decision_that_overflows_the_calendar_is_poison_and_the_batch_goes_on() -> None:
    # A due time past year 9999 cannot be computed: that one escalation is poison (dead-letter
    # path), never an OverflowError that kills the worker and strands the rest of its batch.
    w = World()
    esc = w.enqueue()
    member = str(esc.dispute_id)
    w.scheduler.now = datetime(9999, 12, 31, 12, tzinfo=UTC)  # promotion would add 48 h
    report = w.fire()
    assert (report.claimed, report.poison, report.recorded) == (1, 1, 0)
    assert [str(item.escalation.dispute_id) for item, _, _ in w.poisoned] == [member]
    assert w.poisoned[0][1] is ErrorCode.INTERNAL  # not an error raised on purpose
    assert w.event_names() == ["escalation.decision_failed"]


def test_an_sla_window_longer_than_a_century_is_refused() -> None:
    from escalation.domain.errors import InvalidInput

    assert SlaWindow(36_000, WindowUnit.CALENDAR_DAYS).amount == 36_000
    for amount, unit in ((99_999_999_999_999_999_999, WindowUnit.CALENDAR_DAYS),
                         (3_000_000, WindowUnit.CALENDAR_DAYS),
                         (1_000_000_000, WindowUnit.BUSINESS_DAYS)):
        with pytest.raises(InvalidInput, match="longer than about 100 years"):
            SlaWindow(amount, unit)

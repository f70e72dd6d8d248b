"""Per-deadline outcomes (service_layer.deadline_outcomes) through the ConsoleQueries port, on
the in-memory fakes: disputes enqueued and ended in a FakeAuditLog, read back as the console,
``report sla`` and ``audit search --deadlines`` read them. The pure rules over hand-built
chains are tests/unit/test_deadline_outcomes.py; the PostgreSQL queries (keyset pages,
counts) are tests/integration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from escalation.adapters.ladder_files import load_ladder_file
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import InvalidInput, LadderError
from escalation.domain.escalation import Status
from escalation.domain.ladder import Ladder
from escalation.service_layer.deadline_outcomes import (
    DeadlineOutcome,
    DeadlineSources,
    deadline_outcomes,
    open_misses,
)
from tests.fakes import FakeAuditLog, FakeConsoleQueries, pending

LADDER = load_ladder_file(Path(__file__).resolve().parents[2] / "ladders"
                          / "reg_e_error_resolution.v1.toml")
NAME = "determine_or_provisionally_credit"  # 12 CFR 1005.11(c)(1): 10 business days, met
CALS = builtin_calendars()                   # by the resolution (met_by default)

# Each notice of error arrives at 09:00 EST (14:00 UTC); the deadline is the close (17:00
# EST = 22:00 UTC) of the 10th business day after it on the Federal Reserve calendar, whose
# holiday here is Washington's Birthday, Mon 2024-02-19.
# A: notice Thu 02-01 -> Fri 2, Mon 5..Fri 9, Mon 12..Thu 15 = 10 -> Thu 02-15 22:00 UTC.
A_AT = datetime(2024, 2, 15, 22, tzinfo=UTC)
# B: notice Thu 02-08 -> Fri 9, Mon 12..Fri 16, (Mon 19 closed) Tue 20..Fri 23 -> Fri 02-23.
B_AT = datetime(2024, 2, 23, 22, tzinfo=UTC)
# C: notice Tue 02-13 -> 14, 15, 16, 20, 21, 22, 23, 26, 27, 28 -> Wed 02-28 22:00 UTC.
C_AT = datetime(2024, 2, 28, 22, tzinfo=UTC)
# D: notice Thu 02-15 -> 16, 20, 21, 22, 23, 26, 27, 28, 29, Fri 03-01 -> 03-01 22:00 UTC.
D_AT = datetime(2024, 3, 1, 22, tzinfo=UTC)
NOW = datetime(2024, 2, 27, 15, tzinfo=UTC)  # Tue 10:00 EST


def lookup(name: str, version: int) -> Ladder:
    if (name, version) != (LADDER.name, LADDER.version):
        raise LadderError(f"unknown ladder {name}@{version}")
    return LADDER


class World:
    """A FakeAuditLog and the ConsoleQueries over it at ``NOW``."""

    def __init__(self) -> None:
        self.log = FakeAuditLog()
        self.queries = FakeConsoleQueries(self.log, NOW)

    def enqueue(self, notice: datetime, deadline: datetime, external_id: str) -> UUID:
        """Record an escalation whose deadline enqueue computed at ``deadline`` (the
        ENQUEUED row's ``details.deadlines`` and the projection's ``deadlines``)."""
        esc = pending(LADDER, "standard", notice + timedelta(days=4), entered_tier_at=notice,
                      external_id=external_id).with_changes(deadlines=((NAME, deadline),))
        [(_, state)] = self.log.record_enqueue_many(
            [esc], "import", notice,
            details={esc.dispute_id: {"deadlines": {NAME: deadline.isoformat()}}})
        return state.dispute_id

    def cancel(self, did: UUID, at: datetime) -> None:
        self.log.append(self.log.states[did], "CANCELLED", "jane", at, status=Status.CANCELLED)

    def by_external(self, **kw: Any) -> dict[str | None, DeadlineOutcome]:
        got = deadline_outcomes(DeadlineSources(self.queries, lookup, CALS), **kw)
        return {o.external_id: o for o in got}


def _src(w: World) -> DeadlineSources:
    return DeadlineSources(w.queries, lookup, CALS)


def world() -> World:
    """A met, B missed by a late resolution, A2 missed and still open, C at risk, D pending
    (all at NOW)."""
    w = World()
    a = w.enqueue(datetime(2024, 2, 1, 14, tzinfo=UTC), A_AT, "A")
    w.cancel(a, A_AT - timedelta(seconds=1))  # strictly before the instant: met
    b = w.enqueue(datetime(2024, 2, 8, 14, tzinfo=UTC), B_AT, "B")
    w.cancel(b, datetime(2024, 2, 26, 15, tzinfo=UTC))  # Mon 10:00 EST: late
    w.enqueue(datetime(2024, 2, 1, 14, tzinfo=UTC), A_AT, "A2")  # never ended
    w.enqueue(datetime(2024, 2, 13, 14, tzinfo=UTC), C_AT, "C")
    w.enqueue(datetime(2024, 2, 15, 14, tzinfo=UTC), D_AT, "D")
    return w


def test_met_missed_and_open_per_regulatory_clock() -> None:
    got = world().by_external()
    assert {k: o.status for k, o in got.items()} == {
        "A": "met", "B": "missed", "A2": "missed", "C": "at_risk", "D": "pending"}
    assert {o.name for o in got.values()} == {NAME}
    assert got["A"].citation.startswith("12 CFR 1005.11(c)(1)")

    a = got["A"]
    assert (a.deadline, a.basis, a.action, a.actor) == (A_AT, "record", "resolution", "jane")
    assert (a.action_at, a.late_s, a.late_business_days) == (A_AT - timedelta(seconds=1),
                                                             0.0, 0)

    # B: resolved Mon 02-26 15:00 UTC, 2 d 17 h = 65 h after Fri 02-23 22:00 UTC; business
    # days after Fri's local date up to Mon's: Mon 26 only (the weekend is closed)
    b = got["B"]
    assert (b.deadline, b.late_s, b.late_business_days) == (B_AT, 65 * 3600.0, 1)
    assert (b.action, b.met_or_missed_at) == ("resolution", B_AT)
    assert not b.open_miss

    # A2: open at Tue 02-27 15:00 UTC, 11 d 17 h = 281 h after Thu 02-15 22:00 UTC; business
    # days: Fri 16, (Mon 19 holiday), Tue 20 .. Fri 23, Mon 26, Tue 27 = 7
    a2 = got["A2"]
    assert (a2.late_s, a2.late_business_days, a2.action, a2.resolved_at) == (
        281 * 3600.0, 7, None, None)
    assert a2.open_miss

    # C: Wed 02-28 22:00 UTC is 31 h after NOW, within the 48 h at-risk span; D: Fri 03-01
    # 22:00 UTC is 79 h after, beyond it
    assert got["C"].deadline == C_AT and got["D"].deadline == D_AT
    assert (got["C"].late_s, got["D"].late_s) == (0.0, 0.0)


def test_a_resolution_at_the_instant_itself_is_late() -> None:
    w = World()
    did = w.enqueue(datetime(2024, 2, 1, 14, tzinfo=UTC), A_AT, "A")
    w.cancel(did, A_AT)  # met needs strictly before (domain.obligations)
    [o] = deadline_outcomes(_src(w))
    assert (o.status, o.late_s, o.late_business_days) == ("missed", 0.0, 0)


def test_the_window_keeps_the_deadlines_falling_in_it() -> None:
    w = world()
    since, until = datetime(2024, 2, 20, tzinfo=UTC), C_AT  # [since, until): C_AT excluded
    assert set(w.by_external(since=since, until=until)) == {"B"}
    assert set(w.by_external(since=since)) == {"B", "C", "D"}
    assert set(w.by_external(until=datetime(2024, 2, 16, tzinfo=UTC))) == {"A", "A2"}


def test_a_disputes_other_deadlines_outside_the_window_are_dropped() -> None:
    # a dispute pinned to a ladder version this deployment does not know, with two recorded
    # deadlines: the query returns it for the one in the window, the other is dropped
    w = World()
    esc = pending(LADDER, "standard", A_AT, external_id="X").with_changes(
        ladder="gone", deadlines=(("first", A_AT), ("second", B_AT)))
    w.log.record_enqueue_many([esc], "import", A_AT - timedelta(days=10), details={
        esc.dispute_id: {"deadlines": {"first": A_AT.isoformat(),
                                       "second": B_AT.isoformat()}}})
    got = deadline_outcomes(_src(w), since=A_AT, until=B_AT)
    assert [(o.name, o.status) for o in got] == [("first", "missed")]  # B_AT excluded
    assert [o.name for o in deadline_outcomes(_src(w))] == ["first", "second"]


def test_one_dispute() -> None:
    w = world()
    did = next(d for d, e in w.log.states.items() if e.external_id == "C")
    assert [o.external_id for o in deadline_outcomes(_src(w),
                                                     dispute_id=did)] == ["C"]


def test_the_clock_is_the_databases_unless_given() -> None:
    w = world()
    later = C_AT + timedelta(hours=1)
    assert w.by_external(now=later)["C"].status == "missed"
    w.queries.now_at = later
    assert w.by_external()["C"].status == "missed"


def test_open_misses_are_the_deadlines_missed_and_still_open() -> None:
    w = world()
    assert [o.external_id for o in open_misses(_src(w), [LADDER])] == ["A2"]
    # without the known ladders the query also hands over the ended disputes (a superset):
    # the rule still drops B, missed but ended by its late resolution
    assert [o.external_id for o in open_misses(_src(w), [])] == ["A2"]
    # once C's instant passes with C still open, it joins them
    later = C_AT + timedelta(minutes=1)
    got = open_misses(_src(w), [LADDER], now=later)
    assert sorted(o.external_id or "" for o in got) == ["A2", "C"]


@pytest.mark.parametrize(("kw", "message"), [
    ({"since": datetime(2024, 2, 1)}, "from must carry a UTC offset"),
    ({"until": datetime(2024, 2, 1)}, "to must carry a UTC offset"),
    ({"since": D_AT, "until": A_AT}, "from must be before to"),
    ({"since": A_AT, "until": A_AT}, "from must be before to"),
])
def test_bad_bounds_are_refused_naming_the_field(kw: dict[str, datetime], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        deadline_outcomes(DeadlineSources(World().queries, lookup, CALS), **kw)  # type: ignore[arg-type]

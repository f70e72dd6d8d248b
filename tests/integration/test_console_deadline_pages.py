"""The deadline lists' keyset pages and the overview's counts on real PostgreSQL, against
the whole-ledger computation they replace (``deadline_outcomes`` + ``select``): for every
state, the pages walked one after another give exactly the same rows in the same order
(page boundaries inside runs of equal instants, pages cut short by the scan cap, both
directions), and the counts are the lengths of the same lists. ``escalation_clock`` (kept by
the migration 0017 triggers) holds exactly the clocks of the projection after enqueues
and cancels (before and after the clocks' instants).
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.console_queries import PostgresConsoleQueries
from escalation.adapters.ladder_files import load_ladder_file
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import LadderError
from escalation.domain.escalation import Escalation, NewEscalation
from escalation.domain.ladder import Ladder
from escalation.ports import ClockFilter, DeadlineList
from escalation.service_layer import deadline_outcomes as dl

LADDERS = Path(__file__).resolve().parents[2] / "ladders"
REG_E = load_ladder_file(LADDERS / "reg_e_error_resolution.v2.toml")
NAMES = [d.name for d in REG_E.deadlines]


def lookup(name: str, version: int) -> Ladder:
    if (name, version) != (REG_E.name, REG_E.version):
        raise LadderError(f"unknown ladder {name}@{version}")
    return REG_E


def seed(engine: sa.Engine, n: int = 90) -> datetime:
    """``n`` disputes, two clocks each at a few shared instants around now; a third
    cancelled before their first clock (met), a third after it (missed, late), the rest
    open (missed and still open, at risk or pending)."""
    with engine.connect() as conn:
        now: datetime = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    rnd = random.Random(31)
    store = PostgresAuditStore(engine)
    offsets = (timedelta(days=-6), timedelta(days=-2), timedelta(hours=5),
               timedelta(hours=30), timedelta(days=9))
    escs = []
    for i in range(n):
        first = now + rnd.choice(offsets[:4])
        second = first + rnd.choice((timedelta(days=1), timedelta(days=7)))
        entered = now - timedelta(days=10)
        escs.append(Escalation.new(NewEscalation(
            dispute_id=uuid.UUID(int=rnd.getrandbits(128)),
            tier="standard",
            due_at=now + timedelta(days=1),
            materiality="10.00",
            source_hash="ab" * 32,
            entered_tier_at=entered,
            trace_id=f"t{i}",
            external_id=f"X{i}",
            regulatory_deadline=first,
            deadlines=((NAMES[0], first), (NAMES[1], second))),
            REG_E))
    store.record_enqueue_many(escs, "seed", now - timedelta(days=10))
    for i, esc in enumerate(escs):
        first = esc.deadlines[0][1]
        if i % 3 == 0:
            store.record_cancel(esc.dispute_id, "ops", min(first, now) - timedelta(hours=1),
                                "done")
        elif i % 3 == 1 and first < now:
            store.record_cancel(esc.dispute_id, "ops", now - timedelta(minutes=5), "late")
    return now


@pytest.fixture(scope="module")
def ledger(server_urls: tuple[str, str]) -> Any:
    from escalation.adapters.db import make_engine
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_deadline_pages") as url:
        engine = make_engine(url)
        try:
            now = seed(engine)
            yield engine, PostgresConsoleQueries(engine), now
        finally:
            engine.dispose()


def _whole(q: PostgresConsoleQueries, now: datetime, **kw: Any) -> list[dl.DeadlineOutcome]:
    found = dl.deadline_outcomes(dl.DeadlineSources(q, lookup, builtin_calendars()), now=now)
    return dl.select(found, dl.Selection(sort="deadline_at", **kw))


def _pages(q: PostgresConsoleQueries, now: datetime, flt: ClockFilter, limit: int,
           cap: int, descending: bool = False) -> list[dl.DeadlineOutcome]:
    rows: list[dl.DeadlineOutcome] = []
    after = None
    for _ in range(10_000):
        page = dl.deadline_page(dl.DeadlineSources(q, lookup, builtin_calendars()),
                                DeadlineList(flt, now, descending=descending), after, limit,
                                scan_cap=cap)
        assert len(page.rows) <= limit
        rows += page.rows
        if page.next_key is None:
            return rows
        after = page.next_key
    raise AssertionError("the walk did not end")


def _key(o: dl.DeadlineOutcome) -> tuple[Any, ...]:
    return (o.dispute_id, o.name, o.status, o.deadline)


@pytest.mark.parametrize("status", [None, *dl.STATUSES])
@pytest.mark.parametrize(("limit", "cap"), [(7, 10_000), (5, 11), (500, 10_000)])
def test_pages_give_the_whole_list_in_order(ledger: Any, status: str | None, limit: int,
                                            cap: int) -> None:
    _engine, q, now = ledger
    want = [_key(o) for o in _whole(q, now, status=status)]
    assert want or status == "undetermined"  # the seed has every other state
    flt = ClockFilter(state=status, after_end=dl.after_end([REG_E]))
    assert [_key(o) for o in _pages(q, now, flt, limit, cap)] == want
    back = _pages(q, now, flt, limit, cap, descending=True)
    assert [_key(o) for o in back] == want[::-1]


def test_filters_by_ladder_deadline_and_period(ledger: Any) -> None:
    _engine, q, now = ledger
    since, until = now - timedelta(days=3), now + timedelta(days=2)
    want = [_key(o) for o in _whole(q, now, status="missed", deadline=NAMES[0])
            if o.deadline is not None and since <= o.deadline < until]
    assert want
    flt = ClockFilter(since, until, REG_E.name, NAMES[0], "missed")
    assert [_key(o) for o in _pages(q, now, flt, 4, 9)] == want
    assert _pages(q, now, ClockFilter(ladder="nope"), 10, 100) == []


def test_overview_counts_are_the_lengths_of_the_lists(ledger: Any) -> None:
    _engine, q, now = ledger
    src = dl.DeadlineSources(q, lookup, builtin_calendars())
    post = dl.after_end([REG_E])
    open_missed = dl.open_misses(src, [REG_E], now=now)
    assert open_missed
    assert dl.count_state(src, ClockFilter(state="open_miss", after_end=post),
                          now) == len(open_missed)
    at_risk = [o for o in _whole(q, now, status="at_risk")]
    assert at_risk
    assert dl.count_state(src, ClockFilter(state="at_risk", after_end=post),
                          now) == len(at_risk)
    hour = now + timedelta(hours=6)
    assert dl.count_state(src, ClockFilter(since=now, until=hour,
                                           state="at_risk", after_end=post),
                          now) == sum(o.deadline is not None and o.deadline < hour
                                      for o in at_risk)
    counts = dl.period_counts(src, now - timedelta(days=30), now, now)
    assert counts is not None
    past = [o for o in _whole(q, now) if o.deadline is not None
            and now - timedelta(days=30) <= o.deadline < now]
    assert counts == {s: sum(o.status == s for o in past) for s in dl.STATUSES}
    assert dl.period_counts(src, None, None, now, cap=10) is None


def test_the_clock_table_holds_the_projections_clocks(ledger: Any) -> None:
    engine, _q, _now = ledger
    with engine.connect() as conn:
        got = set(conn.execute(sa.text(
            "SELECT dispute_id, name, at, open, ended FROM escalation_clock")).all())
        rows = conn.execute(sa.text(
            "SELECT dispute_id, status, deadlines, obligations FROM escalation_state"))
        want = set()
        for did, status, deadlines, obligations in rows:
            binding = {n for n, _t in deadlines or []}
            for name, at in (obligations if obligations is not None else deadlines) or []:
                want.add((did, name, datetime.fromisoformat(at), name in binding,
                          status in ("resolved", "cancelled")))
    assert got == want
    assert any(ended for *_r, ended in got) and any(not ended for *_r, ended in got)

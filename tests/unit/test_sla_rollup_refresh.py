"""The SLA rollup's refresh (service_layer.sla_rollup.refresh) on the in-memory fakes: the
first refresh backfills every dispute with the rows the full recount's functions give; a
later one recomputes only the disputes with a row recorded since the watermark (less the
5 s overlap) and the deadlines the clock moved; an interrupted backfill resumes after its
last chunk. The figures the rollup
aggregates (percentiles, buckets) are PostgreSQL's: tests/integration/test_sla_rollup.py."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from escalation.service_layer.sla_report import rollup_rows
from escalation.service_layer.sla_rollup import RefreshRollup, RollupPorts, refresh
from tests.fakes import FakeAuditLog, FakeLedgerReports, FakeRollupStore, pending
from tests.unit.test_fire_and_enqueue import CALS, LADDER, T0

HORIZON = T0 + timedelta(days=2)


class World:
    """Three disputes enqueued at T0, the first promoted at T0 + 24 h; the horizon at
    T0 + 2 days."""

    def __init__(self) -> None:
        self.log = FakeAuditLog()
        self.ids = [uuid.UUID(int=n) for n in (1, 2, 3)]
        self.log.record_enqueue_many(
            [pending(LADDER, "standard", T0 + timedelta(hours=24), dispute_id=d)
             for d in self.ids], "svc", T0)
        first = self.log.states[self.ids[0]]
        self.log.append(first, "PROMOTED", "w1", T0 + timedelta(hours=24), tier="senior",
                        due_at=T0 + timedelta(hours=72))
        self.store = FakeRollupStore(FakeLedgerReports(self.log, HORIZON), HORIZON, HORIZON)


def test_the_first_refresh_backfills_every_dispute_with_the_recounts_rows() -> None:
    w = World()
    done = refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    assert (done.full, done.disputes, done.watermark) == (True, 3, HORIZON)
    assert w.store.st is not None and w.store.st[3] is None  # the backfill finished
    for d in w.ids:
        expected = rollup_rows(w.store.chains([d]), HORIZON, CALS, None)
        # the report's rows, then lateness and open miss (None on a stay row)
        assert [r[:7] for r in w.store.rows[d]] == [tuple(r) for r in expected]
        assert all(r[7:] == (None, None) for r in w.store.rows[d] if r[0] != "deadline")
    # the promoted dispute's standard stay ended at T0 + 24 h: one ended stay in its rows
    assert any(r[2] == "standard" and r[4] is not None for r in w.store.rows[w.ids[0]])


def test_a_later_refresh_reads_only_what_was_recorded_since_the_watermark() -> None:
    w = World()
    refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    w.store.replaced.clear()
    w.store.horizon_at = w.store.now_at = HORIZON + timedelta(hours=1)
    nothing = refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    assert (nothing.full, nothing.disputes, w.store.replaced) == (False, 0, [])
    # b's row recorded 3 s before the watermark is inside the 5 s overlap: read again;
    # c's row recorded 10 s before it was already read by the last refresh: not read
    b, c = w.log.states[w.ids[1]], w.log.states[w.ids[2]]
    w.log.append(b, "PROMOTED", "w1", HORIZON + timedelta(hours=1) - timedelta(seconds=3),
                 tier="senior")
    w.log.append(c, "PROMOTED", "w1", HORIZON + timedelta(hours=1) - timedelta(seconds=10),
                 tier="senior")
    w.store.horizon_at = w.store.now_at = HORIZON + timedelta(hours=2)
    done = refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    assert (done.full, done.disputes, w.store.replaced) == (False, 1, [[w.ids[1]]])
    # only the backfill (the first refresh) asked for the hour counts to be recounted:
    # the incremental ones keep them with each replace
    assert w.store.hours_recounted == 1


def test_an_interrupted_backfill_resumes_after_its_last_chunk() -> None:
    w = World()
    w.store.fail_on_replace = 2  # the second chunk's transaction fails
    with pytest.raises(RuntimeError, match="transaction failed"):
        refresh(RefreshRollup(chunk=1), RollupPorts(w.store, CALS, None))
    assert w.store.st is not None and w.store.st[3] == w.ids[0]  # resume point: chunk 1
    w.store.fail_on_replace = 0
    done = refresh(RefreshRollup(chunk=1), RollupPorts(w.store, CALS, None))
    assert (done.full, done.disputes) == (True, 2)  # the two chunks after it, not the first
    assert w.store.replaced == [[w.ids[0]], [w.ids[1]], [w.ids[2]]]
    assert w.store.st is not None and w.store.st[3] is None
    assert w.store.hours_recounted == 1  # when the resumed backfill finished, not before


def test_a_later_refresh_recomputes_only_the_deadlines_the_clock_moved() -> None:
    w = World()
    refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    a, b, c = w.ids
    h = HORIZON

    def deadline(at: timedelta, state: str) -> tuple[object, ...]:
        return ("deadline", "reg_e", "standard", h + at, None, state, "investigation")

    # as the last refresh (at HORIZON) stored them
    w.store.rows[a] = [deadline(timedelta(hours=30), "at_risk")]  # still ahead: at risk
    w.store.rows[b] = [deadline(timedelta(hours=60), "pending")]  # beyond now + 48 h
    w.store.rows[c] = [deadline(timedelta(minutes=30), "at_risk")]  # passed by now: missed
    w.store.replaced.clear()
    w.store.horizon_at = w.store.now_at = h + timedelta(hours=1)
    done = refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    assert (done.disputes, w.store.replaced) == (1, [[c]])
    # pending, now within 48 h of the clock: at risk now, recomputed
    w.store.rows[b] = [deadline(timedelta(hours=60), "pending")]
    w.store.replaced.clear()
    w.store.horizon_at = w.store.now_at = h + timedelta(hours=13)
    refresh(RefreshRollup(), RollupPorts(w.store, CALS, None))
    assert w.store.replaced == [[b]]
    # the clock went back (an explicit earlier now): every open one within 48 h of it
    w.store.rows[a] = [deadline(timedelta(hours=30), "at_risk")]
    w.store.replaced.clear()
    refresh(RefreshRollup(now=h), RollupPorts(w.store, CALS, None))
    assert w.store.replaced == [[a]]

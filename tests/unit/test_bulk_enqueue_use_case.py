"""Bulk enqueue (service_layer.bulk) on the in-memory fakes: every request is validated with
its line number first; with a bad line (or a line that did not parse) nothing is written
unless ``skip_invalid``; an unknown ladder is one error for the whole input."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from escalation.domain.errors import LadderNotFound
from escalation.domain.timeutil import to_ms
from escalation.service_layer.bulk import BulkEnqueue, BulkResult, bulk_enqueue
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueRequest
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler
from tests.unit.test_fire_and_enqueue import CALS, LADDER, T0


class World:
    """One scheduler, audit log and ladder set, with the clock at ``T0``."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.ladders = FakeLadders([LADDER])


def _req(**kw: object) -> EnqueueRequest:
    base: dict[str, object] = {"dispute_id": uuid.uuid4(), "materiality": "10.00",
                               "source_hash": "ab" * 32, "due_at": T0}
    base.update(kw)
    return EnqueueRequest(**base)  # type: ignore[arg-type]


def _id(req: EnqueueRequest) -> uuid.UUID:
    assert isinstance(req.dispute_id, uuid.UUID)
    return req.dispute_id


def _bulk(w: World, requests: list[tuple[int, EnqueueRequest]], *,
          prior_errors: tuple[tuple[int, str], ...] = (),
          skip_invalid: bool = False) -> BulkResult:
    return bulk_enqueue(
        BulkEnqueue(requests=requests, actor="import", default_ladder="dispute_review",
                    prior_errors=prior_errors, skip_invalid=skip_invalid),
        CorePorts(scheduler=w.scheduler, store=w.store, ladders=w.ladders, calendars=CALS))


def test_valid_lines_are_recorded_and_scheduled_and_a_repeat_counts_as_existing() -> None:
    w = World()
    first, second = _req(), _req(tier="senior", due_at=T0 + timedelta(hours=2))
    result = _bulk(w, [(2, first), (3, second)])
    assert (result.created, result.existing, result.errors) == (2, 0, [])
    assert w.store.states[_id(second)].tier == "senior"
    assert w.scheduler.scores[str(second.dispute_id)] == to_ms(T0 + timedelta(hours=2))
    again = _bulk(w, [(2, first)])
    assert (again.created, again.existing) == (0, 1)
    assert w.store.events(_id(first)) == ["ENQUEUED"]


def test_a_bad_line_is_named_by_its_number_and_nothing_is_written() -> None:
    w = World()
    good, bad = _req(), _req(tier="no_such_tier")
    result = _bulk(w, [(2, good), (3, bad)], prior_errors=((7, "line 7: bad CSV quoting"),))
    assert [line for line, _ in result.errors] == [3, 7]
    assert "no_such_tier" in result.errors[0][1]
    assert (result.created, result.results) == (0, [])
    assert w.store.ledger == [] and w.scheduler.scores == {}


def test_skip_invalid_enqueues_the_good_lines_and_reports_the_bad() -> None:
    w = World()
    good, bad = _req(), _req(tier="no_such_tier")
    result = _bulk(w, [(2, good), (3, bad)], skip_invalid=True)
    assert result.created == 1 and [n for n, _ in result.errors] == [3]
    assert set(w.store.states) == {_id(good)}


def test_an_unknown_ladder_is_one_error_for_the_input_and_writes_nothing() -> None:
    w = World()
    with pytest.raises(LadderNotFound, match="unknown ladder 'nope'"):
        _bulk(w, [(n, _req(ladder="nope")) for n in range(2, 5)])
    assert w.store.ledger == []

"""Audit search in pages (service_layer.audit_page) over the fakes' ledger: pages cover every
matching row once in (decided_at, dispute, seq) order, a row appended meanwhile never shifts a
page, and a bad limit or cursor is refused naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import InvalidParameter
from escalation.domain.ladder import Ladder, Tier
from escalation.ports import AuditFilter
from escalation.service_layer.audit_page import decode_cursor, encode_cursor, search_page
from tests.fakes import FakeAuditLog, FakeLedgerSearch, FakeScheduler, pending, seed

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(name="dispute_review", version=1,
                tiers=(Tier("standard", "Standard", 10,
                            SlaWindow(24, WindowUnit.CALENDAR_HOURS)),),
                terminal_tier="standard")


def _ledger(n: int) -> FakeAuditLog:
    store, scheduler = FakeAuditLog(), FakeScheduler(now=T0)
    for i in range(n):
        seed(store, scheduler, pending(LADDER, "standard", T0), at=T0 + timedelta(minutes=i))
    return store


def test_pages_cover_every_row_once_in_order() -> None:
    store = _ledger(7)
    search = FakeLedgerSearch(store)
    seen, cursor = [], None
    while True:
        rows, cursor = search_page(search, AuditFilter(), limit=3, cursor=cursor)
        seen.extend(rows)
        if cursor is None:
            break
    assert len(seen) == 7 and len({(r.dispute_id, r.seq) for r in seen}) == 7
    assert [r.decided_at for r in seen] == sorted(r.decided_at for r in store.ledger)


def test_a_full_last_page_has_no_next_cursor() -> None:
    rows, cursor = search_page(FakeLedgerSearch(_ledger(3)), AuditFilter(), limit=3)
    assert len(rows) == 3 and cursor is None


def test_rows_appended_after_a_page_do_not_shift_the_next_one() -> None:
    store = _ledger(4)
    search = FakeLedgerSearch(store)
    first, cursor = search_page(search, AuditFilter(), limit=2)
    scheduler = FakeScheduler(now=T0)
    seed(store, scheduler, pending(LADDER, "standard", T0), at=T0 - timedelta(days=1))
    second, _ = search_page(search, AuditFilter(), limit=2, cursor=cursor)
    assert second[0].decided_at > first[-1].decided_at
    assert {r.dispute_id for r in second}.isdisjoint({r.dispute_id for r in first})


def test_a_cursor_round_trips_its_key() -> None:
    row = _ledger(1).ledger[0]
    assert decode_cursor(encode_cursor(row)) == (row.decided_at, row.dispute_id, row.seq)


@pytest.mark.parametrize("limit", [0, 1001, -1])
def test_a_limit_outside_1_to_1000_is_refused_naming_it(limit: int) -> None:
    with pytest.raises(InvalidParameter) as caught:
        search_page(FakeLedgerSearch(_ledger(1)), AuditFilter(), limit=limit)
    assert caught.value.params == ("limit",)


@pytest.mark.parametrize("cursor", ["", "!!!", "WzFd", "WyIyMDI2LTAxLTAxIiwgIngiLCAxXQ"])
def test_a_malformed_cursor_is_refused_naming_it(cursor: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        search_page(FakeLedgerSearch(_ledger(1)), AuditFilter(), cursor=cursor)
    assert caught.value.params == ("cursor",)

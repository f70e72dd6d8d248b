"""The console's keyset pages on real PostgreSQL (``PostgresConsoleQueries``): every page
walk returns each matching row exactly once, in the sort order, across page boundaries and
ties on the sort key; and the database's per-tier counts agree with a recount.

Projection rows are inserted directly into a scratch database (the pages read only the
projection; the ledger is not involved): many rows share a due instant or an elapsed share,
so ties straddle page boundaries.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.console_queries import PostgresConsoleQueries
from escalation.domain.errors import InvalidInput
from escalation.ports import PendingFilter

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _insert(engine: sa.Engine, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO escalation_state (dispute_id, external_id, status, tier, ladder, "
            "ladder_version, due_at, entered_tier_at, materiality, source_hash, trace_id, "
            "remaining_ms, last_seq, last_hash) VALUES (:dispute_id, :external_id, :status, "
            ":tier, :ladder, 1, :due_at, :entered_tier_at, 0, '', '', :remaining_ms, 1, "
            "decode(repeat('00', 32), 'hex'))"), rows)


def _seed(engine: sa.Engine, n: int = 240) -> list[dict[str, Any]]:
    rnd = random.Random(7)
    rows = []
    for i in range(n):
        paused = i % 9 == 0
        # few distinct instants: ties on due_at and on the elapsed share across pages
        due = NOW + timedelta(hours=rnd.choice((-30, -1, 0, 1, 5, 20, 50)))
        entered = due - timedelta(hours=rnd.choice((10, 40)))
        rows.append({
            "dispute_id": uuid.UUID(int=rnd.getrandbits(128)), "external_id": f"E{i}",
            "status": "paused" if paused else "pending",
            "tier": rnd.choice(("standard", "senior")),
            "ladder": rnd.choice(("dispute_review", "reg_e_error_resolution")),
            "due_at": None if paused else due, "entered_tier_at": entered,
            "remaining_ms": 3_600_000 if paused else None})
    _insert(engine, rows)
    return rows


def _walk(q: PostgresConsoleQueries, flt: PendingFilter, size: int) -> list[uuid.UUID]:
    seen: list[uuid.UUID] = []
    after = None
    for _ in range(1000):
        got = q.pending_page(NOW, flt, after, size)
        seen += [p.dispute_id for p, _k in got]
        if len(got) < size:
            return seen
        after = got[-1][1]
    raise AssertionError("the walk did not end")


def _share(r: dict[str, Any]) -> float:
    window = max((r["due_at"] - r["entered_tier_at"]).total_seconds(), 0.001)
    return (NOW - r["entered_tier_at"]).total_seconds() / window


def _expected(rows: list[dict[str, Any]], flt: PendingFilter) -> list[uuid.UUID]:
    def keep(r: dict[str, Any]) -> bool:
        if (flt.ladder and r["ladder"] != flt.ladder) or (flt.tier and r["tier"] != flt.tier):
            return False
        if r["status"] == "paused":
            return flt.window is None and flt.stage in (None, "paused")
        if flt.stage == "paused":
            return False
        due = r["due_at"]
        if (flt.window == "overdue" or flt.stage == "breached") and due > NOW:
            return False
        if (flt.window in ("hour", "day") or flt.stage == "in_progress") and due <= NOW:
            return False
        span = {"hour": timedelta(hours=1), "day": timedelta(days=1)}.get(flt.window or "")
        return span is None or due <= NOW + span

    pending = [r for r in rows if keep(r) and r["status"] == "pending"]
    paused = sorted((r for r in rows if keep(r) and r["status"] == "paused"),
                    key=lambda r: r["dispute_id"])
    if flt.sort == "elapsed":
        pending.sort(key=lambda r: (_share(r), r["dispute_id"]), reverse=True)
    else:
        pending.sort(key=lambda r: (r["due_at"], r["dispute_id"]))
    return [r["dispute_id"] for r in pending + paused]


@pytest.mark.parametrize("flt", [
    PendingFilter(), PendingFilter(sort="elapsed"), PendingFilter(stage="breached"),
    PendingFilter(stage="in_progress", sort="elapsed"), PendingFilter(stage="paused"),
    PendingFilter(window="overdue"), PendingFilter(window="day", ladder="dispute_review"),
    PendingFilter(window="hour", tier="senior", sort="elapsed"),
], ids=repr)
def test_pending_pages_return_every_row_once_in_order(scratch: sa.Engine,
                                                      flt: PendingFilter) -> None:
    rows = _seed(scratch)
    q = PostgresConsoleQueries(scratch)
    expected = _expected(rows, flt)
    assert expected, "the filter selects some rows"
    for size in (1, 7, 50, 500):  # boundaries inside runs of equal keys, and one page
        walked = _walk(q, flt, size)
        assert walked == expected, size
    assert q.pending_total(NOW, flt) == len(expected)


def test_a_row_added_behind_the_cursor_is_not_repeated_nor_the_rest_lost(
        scratch: sa.Engine) -> None:
    rows = _seed(scratch, 60)
    q = PostgresConsoleQueries(scratch)
    first = q.pending_page(NOW, PendingFilter(), None, 20)
    # a new escalation due before everything: behind the cursor, so not on later pages
    _insert(scratch, [{"dispute_id": uuid.uuid4(), "external_id": "new", "status": "pending",
                       "tier": "standard", "ladder": "dispute_review",
                       "due_at": NOW - timedelta(days=9), "remaining_ms": None,
                       "entered_tier_at": NOW - timedelta(days=10)}])
    rest = _walk_from(q, first[-1][1])
    assert [p.dispute_id for p, _k in first] + rest == _expected(rows, PendingFilter())


def _walk_from(q: PostgresConsoleQueries, after: tuple[str, ...]) -> list[uuid.UUID]:
    out: list[uuid.UUID] = []
    while True:
        got = q.pending_page(NOW, PendingFilter(), after, 13)
        out += [p.dispute_id for p, _k in got]
        if len(got) < 13:
            return out
        after = got[-1][1]


def test_tier_counts_agree_with_a_recount(scratch: sa.Engine) -> None:
    rows = _seed(scratch)
    got = {(c.ladder, c.tier): (c.pending, c.due_hour, c.due_day, c.overdue)
           for c in PostgresConsoleQueries(scratch).tier_counts(NOW)}
    want: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        if r["status"] != "pending":
            continue
        c = want.setdefault((r["ladder"], r["tier"]), [0, 0, 0, 0])
        due = r["due_at"]
        c[0] += 1
        c[1] += NOW < due <= NOW + timedelta(hours=1)
        c[2] += NOW < due <= NOW + timedelta(days=1)
        c[3] += due <= NOW
    assert got == {k: tuple(v) for k, v in want.items()}


@pytest.mark.parametrize(("kw", "name"), [({"window": "week"}, "window"),
                                          ({"stage": "late"}, "stage"),
                                          ({"sort": "size"}, "sort")])
def test_an_unknown_filter_value_is_refused_naming_it(kw: dict[str, str], name: str) -> None:
    with pytest.raises(InvalidInput, match=f"^{name} must be"):
        PendingFilter(**kw)

"""Materiality priority under backlog (issue 4 point 5): a pure simulation of the claim rule.

The claim takes a window of the ``4 x batch`` oldest due members and picks the batch by
``band weight + age / aging_ms`` (``sla_timing.rank_candidates``). 20,000 due escalations
of mixed materiality are drained batch by batch; no timings are measured, only order.
"""

from __future__ import annotations

import bisect
import random
import statistics

from escalation.domain.sla_timing import effective_priority, rank_candidates

BATCH = 50
WINDOW = 4 * BATCH
AGING_MS = 60_000
BATCH_MS = 50  # simulated time one batch takes (only moves "now" forward)


def _backlog(n: int, seed: int = 7) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    now = 10_000_000
    rows = []
    for i in range(n):
        weight = rng.choices([0, 1, 2], weights=[70, 20, 10])[0]
        rows.append((f"m{i}", now - rng.randrange(0, 20 * 60_000), weight))
    return sorted(rows, key=lambda r: r[1])


def _drain(rows: list[tuple[str, int, int]]) -> dict[str, int]:
    pending = list(rows)  # sorted by due: the ZSET's order
    now, position, order = 10_000_000, 0, {}
    while pending:
        window = pending[:WINDOW]
        picked = set(rank_candidates(window, now, AGING_MS, BATCH))
        for member in [m for m, _, _ in window if m in picked]:
            order[member] = position
        position += len(picked)
        pending = [r for r in window if r[0] not in picked] + pending[WINDOW:]
        now += BATCH_MS
    return order


def test_higher_materiality_fires_first_in_a_20000_backlog() -> None:
    rows = _backlog(20_000)
    order = _drain(rows)
    assert len(order) == 20_000
    p50 = {w: statistics.median(order[m] for m, _, wt in rows if wt == w) for w in (0, 1, 2)}
    assert p50[2] < p50[1] < p50[0]


def test_no_escalation_is_overtaken_by_more_than_its_aging_span() -> None:
    rows = _backlog(20_000)
    order = _drain(rows)
    dues = sorted(d for _, d, _ in rows)
    top = max(w for _, _, w in rows)
    for member, due, weight in rows:
        bound = bisect.bisect_right(dues, due + (top - weight) * AGING_MS)
        assert order[member] < bound, (member, order[member], bound)


def test_equal_weights_fire_in_due_order() -> None:
    cands = [("a", 300, 1), ("b", 100, 1), ("c", 200, 1)]
    assert rank_candidates(cands, 1_000, AGING_MS, 3) == ["b", "c", "a"]


def test_one_aging_span_of_waiting_equals_one_band() -> None:
    assert effective_priority(0, 0, AGING_MS, AGING_MS) == effective_priority(1, AGING_MS,
                                                                              AGING_MS, AGING_MS)

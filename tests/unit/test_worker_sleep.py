"""The worker's sleep: the jittered poll interval, capped by the earliest due time
(docs/operations.md, "The scheduler table")."""

from __future__ import annotations

import random

import pytest

from escalation.entrypoints.worker import sleep_seconds


@pytest.mark.parametrize("jitter", [0.0, 0.2, 0.5])
def test_sleep_is_poll_interval_times_one_plus_uniform_jitter(jitter: float) -> None:
    rng = random.Random(7)
    draws = [sleep_seconds(5.0, jitter, 0, None, rng) for _ in range(5000)]
    assert min(draws) >= 5.0 * (1 - jitter) - 1e-9
    assert max(draws) <= 5.0 * (1 + jitter) + 1e-9
    if jitter:
        # spread over the whole band, not clumped at one value (thundering-herd guard)
        assert max(draws) - min(draws) > 5.0 * jitter
        assert abs(sum(draws) / len(draws) - 5.0) < 0.05


def test_sleep_ends_at_the_earliest_due_time_when_it_is_sooner() -> None:
    rng = random.Random(1)
    assert sleep_seconds(5.0, 0.2, now_ms=1_000, next_due_ms=1_250, rng=rng) == pytest.approx(0.25)
    assert sleep_seconds(5.0, 0.2, now_ms=1_000, next_due_ms=900, rng=rng) == 0.0
    assert 4.0 <= sleep_seconds(5.0, 0.2, now_ms=0, next_due_ms=60_000, rng=rng) <= 6.0

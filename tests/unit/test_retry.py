"""Retry backoff with jitter (seed 002): the ladder, the +/-20 % spread, no clumping."""

from __future__ import annotations

import random

import pytest

from escalation.domain.errors import InvalidInput
from escalation.domain.retry import DEFAULT_LADDER_S, RetryPolicy


def test_default_ladder_is_the_seeds_5s_30s_5min_1h_and_five_attempts() -> None:
    policy = RetryPolicy()
    assert policy.ladder_s == (5.0, 30.0, 300.0, 3600.0)
    assert policy.max_attempts == 5
    assert not policy.exhausted(4) and policy.exhausted(5)


def test_delay_bounds_are_the_step_plus_minus_jitter() -> None:
    policy = RetryPolicy()
    for n, base in enumerate(DEFAULT_LADDER_S, start=1):
        assert policy.delay_s(n, 0.0) == pytest.approx(base * 0.8)
        assert policy.delay_s(n, 0.5) == pytest.approx(base)
        assert policy.delay_s(n, 1.0) == pytest.approx(base * 1.2)


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_ten_thousand_delays_spread_uniformly_over_plus_minus_20_percent(step: int) -> None:
    policy = RetryPolicy()
    rng = random.Random(1234 + step)
    base = DEFAULT_LADDER_S[step - 1]
    delays = [policy.next_delay_s(step, rng) for _ in range(10_000)]
    assert all(base * 0.8 <= d <= base * 1.2 for d in delays)
    # roughly uniform: 20 equal bins over the +/-20 % band each hold ~500 (no clumping)
    bins = [0] * 20
    for d in delays:
        bins[min(19, int((d - base * 0.8) / (base * 0.4) * 20))] += 1
    assert min(bins) > 380 and max(bins) < 620, bins
    # the spread covers the band: a downstream outage does not get one synchronized wave
    assert min(delays) < base * 0.81 and max(delays) > base * 1.19


def test_zero_jitter_gives_exact_steps() -> None:
    policy = RetryPolicy(jitter=0.0)
    assert policy.next_delay_s(2, random.Random(1)) == 30.0


@pytest.mark.parametrize("kwargs", [{"ladder_s": ()}, {"ladder_s": (0.0,)}, {"jitter": 0.6},
                                    {"jitter": -0.1}, {"ladder_s": (5.0, -1.0)}])
def test_invalid_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_attempt_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidInput):
        RetryPolicy().delay_s(5, 0.5)
    with pytest.raises(InvalidInput):
        RetryPolicy().delay_s(0, 0.5)

"""Retry backoff: the ladder, full jitter over each gap, no clumping of a failing herd."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from escalation.domain.errors import InvalidInput
from escalation.domain.retry import DEFAULT_LADDER_S, RetryPolicy


def test_default_ladder_is_5s_30s_5min_1h_and_five_attempts() -> None:
    policy = RetryPolicy()
    assert policy.ladder_s == (5.0, 30.0, 300.0, 3600.0)
    assert policy.max_attempts == 5
    assert not policy.exhausted(4) and policy.exhausted(5)


def test_each_retry_lands_between_its_step_and_the_next() -> None:
    policy = RetryPolicy()
    uppers = (30.0, 300.0, 3600.0, 7200.0)
    for n, (base, upper) in enumerate(zip(DEFAULT_LADDER_S, uppers, strict=True), start=1):
        assert policy.delay_s(n, 0.0) == pytest.approx(base)
        assert policy.delay_s(n, 1.0) == pytest.approx(upper)
        assert policy.window_s(n) == (base, upper)


def test_a_thousand_simultaneous_first_retries_do_not_clump_into_one_second() -> None:
    """1,000 notifications failing together: no 1-second bucket holds > 10 % of the retries."""
    policy = RetryPolicy()
    for seed in range(20):
        rng = random.Random(seed)
        buckets = Counter(int(policy.next_delay_s(1, rng)) for _ in range(1000))
        assert max(buckets.values()) <= 100, (seed, buckets.most_common(3))


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_ten_thousand_delays_spread_uniformly_over_the_gap(step: int) -> None:
    policy = RetryPolicy()
    rng = random.Random(1234 + step)
    lo, hi = policy.window_s(step)
    delays = [policy.next_delay_s(step, rng) for _ in range(10_000)]
    assert all(lo <= d <= hi for d in delays)
    bins = [0] * 20
    for d in delays:
        bins[min(19, int((d - lo) / (hi - lo) * 20))] += 1
    assert min(bins) > 380 and max(bins) < 620, bins


def test_a_flat_ladder_still_spreads_each_retry_over_one_step() -> None:
    policy = RetryPolicy((1.0, 1.0))
    assert policy.window_s(1) == (1.0, 2.0) and policy.window_s(2) == (1.0, 2.0)


@pytest.mark.parametrize("kwargs", [{"ladder_s": ()}, {"ladder_s": (0.0,)},
                                    {"ladder_s": (5.0, -1.0)}, {"ladder_s": (1e9,)}])
def test_invalid_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_attempt_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidInput):
        RetryPolicy().delay_s(5, 0.5)
    with pytest.raises(InvalidInput):
        RetryPolicy().delay_s(0, 0.5)

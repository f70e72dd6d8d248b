"""Start-up retries: how long they last, and how many log lines an outage costs."""

from __future__ import annotations

import itertools
import random

import pytest
import redis
from structlog.testing import capture_logs

from escalation.bootstrap import RETRY_LOG_EVERY_S, retry_startup


class _Clock:
    """A monotonic clock that only the fake ``sleep`` moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _refused() -> None:
    raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


@pytest.mark.parametrize("seed", range(50))
def test_a_30s_outage_logs_a_line_per_5s_not_one_per_attempt(seed: int) -> None:
    random.seed(seed)  # the backoff's jitter: every seed must hold
    clock = _Clock()
    attempts = 0

    def probe() -> None:
        nonlocal attempts
        attempts += 1
        _refused()

    with capture_logs() as logs, pytest.raises(redis.ConnectionError):
        retry_startup(probe, 30.0, sleep=clock.sleep, clock=clock)
    lines = [e for e in logs if e["event"] == "startup.retry"]
    for e in lines:  # when each line was logged: timeout - what was left then
        e["_t"] = 30.0 - e["gives_up_in_s"]
    assert clock.t - 1000.0 == pytest.approx(30.0)  # gave up after the whole timeout
    assert attempts > 15  # backoff tops out at 2 s (x U(0.5, 1)): many attempts
    assert lines[0]["attempt"] == 1  # the first failure is always said
    # a line once at least 5 s passed since the last one; a pause is at most 2 s, so the
    # lines are 5-7 s apart: 5-7 lines in 30 s (attempts: 20-40)
    assert 30.0 / (RETRY_LOG_EVERY_S + 2.0) <= len(lines) <= 30.0 / RETRY_LOG_EVERY_S + 1
    gaps = [b["_t"] - a["_t"] for a, b in itertools.pairwise(lines)]
    # (gives_up_in_s is rounded to 0.1 s)
    assert all(RETRY_LOG_EVERY_S - 0.11 <= g < RETRY_LOG_EVERY_S + 2.11 for g in gaps), gaps
    assert [e["attempt"] for e in lines] == sorted({e["attempt"] for e in lines})
    assert all(e["log_level"] == "warning" and "refused" in e["error"] for e in lines)


def test_success_after_failures_returns_and_logs_once() -> None:
    clock = _Clock()
    left = [3]

    def probe() -> None:
        if left[0]:
            left[0] -= 1
            _refused()

    with capture_logs() as logs:
        retry_startup(probe, 30.0, sleep=clock.sleep, clock=clock)
    assert left == [0]
    assert [e["attempt"] for e in logs if e["event"] == "startup.retry"] == [1]


def test_a_final_error_is_raised_at_once_without_retrying() -> None:
    calls = 0

    def probe() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bad config")

    with capture_logs() as logs, pytest.raises(ValueError, match="bad config"):
        retry_startup(probe, 30.0, sleep=lambda s: None)
    assert calls == 1 and not logs

"""The worker's outage back-off (escalation/entrypoints/worker.py): a fixed short probe of both
servers instead of a growing blind sleep, and one log line per state change (began, still
down every OUTAGE_LOG_EVERY_S, ended) with a reason code and no traceback."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import sqlalchemy.exc
from structlog.testing import capture_logs

from escalation.entrypoints import worker as w


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _ctx(time_fails: int = 0, db_fails: int = 0) -> tuple[Any, dict[str, int]]:
    calls = {"time": 0, "db": 0}

    def redis_time() -> int:
        calls["time"] += 1
        if calls["time"] <= time_fails:
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return 1

    def writable() -> bool:
        calls["db"] += 1
        if calls["db"] <= db_fails:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("timeout expired"))
        return True

    app = SimpleNamespace(actor="w1", scheduler=SimpleNamespace(time=redis_time))
    ctx = w._Pass(app=app, fire=None, crashpoint=None, warn_adapter=None,  # type: ignore[arg-type]
                  warn_schedule=None, warn_members=None, dead=None, stats=None, resync=None,
                  idle=w._IdleState(maint_every_s=30.0), writable=writable)
    return ctx, calls


def test_a_long_outage_is_probed_every_second_not_slept_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(w.time, "monotonic", clock)
    ctx, calls = _ctx(time_fails=299)  # Redis away for 5 minutes of 1 s probes
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        clock.now += s + 0.01

    with capture_logs() as logs:
        w._outage_seen(ctx, redis.exceptions.ConnectionError("Connection refused"))
        w._outage_wait(ctx, random.Random(7), sleep=sleep)
    assert len(sleeps) == 300  # the first probe that answers ends the wait
    assert all(0.8 * w.OUTAGE_PROBE_EVERY_S <= s <= 1.2 * w.OUTAGE_PROBE_EVERY_S
               for s in sleeps)  # never a sleep that grows toward the lease
    assert calls == {"time": 300, "db": 1}
    events = [(r["event"], r["log_level"], r.get("reason")) for r in logs]
    assert events[0] == ("worker.backoff", "warning", "redis_unreachable")
    still = [r for r in logs if r["event"] == "worker.outage_continues"]
    assert 9 <= len(still) <= 10  # ~300 s / OUTAGE_LOG_EVERY_S, not one per probe
    assert all(r["reason"] == "redis_unreachable" and r["attempts"] > 1 for r in still)
    assert len(logs) == 1 + len(still)
    assert ctx.outage is not None and ctx.outage.attempts == 300


def test_the_outage_ends_with_one_line_naming_its_length(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(w.time, "monotonic", clock)
    ctx, _ = _ctx()
    with capture_logs() as logs:
        w._outage_seen(ctx, redis.exceptions.ConnectionError("Connection reset by peer"))
        clock.now += 42.0
        w._outage_ended(ctx)
        w._outage_ended(ctx)  # no outage open: nothing
    assert [(r["event"], r.get("down_s")) for r in logs] == [
        ("worker.backoff", 0.0), ("worker.outage_ended", 42.0)]
    assert ctx.outage is None


def test_a_change_of_cause_is_a_new_line_and_keeps_the_outage_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(w.time, "monotonic", clock)
    ctx, _ = _ctx(db_fails=5)
    with capture_logs() as logs:
        w._outage_seen(ctx, redis.exceptions.ConnectionError("Connection refused"))
        clock.now += 3.0
        assert w._servers_answer(ctx) is False  # Redis answers now, PostgreSQL does not
        w._outage_seen(ctx, sqlalchemy.exc.OperationalError("x", {}, Exception("timeout")))
    assert [(r["event"], r["reason"], r["down_s"]) for r in logs] == [
        ("worker.backoff", "redis_unreachable", 0.0),
        ("worker.backoff", "database_unreachable", 3.0)]


def test_a_burst_run_and_a_read_only_database_keep_the_blind_delay() -> None:
    ctx, _ = _ctx()
    rng = random.Random(1)
    assert w._pause(ctx, 2.0, rng, burst=False).func is w.time.sleep  # type: ignore[attr-defined]
    w._outage_seen(ctx, redis.exceptions.ConnectionError("refused"))
    assert w._pause(ctx, 2.0, rng, burst=True).func is w.time.sleep  # type: ignore[attr-defined]
    assert w._pause(ctx, 2.0, rng, burst=False).func is w._outage_wait  # type: ignore[attr-defined]

"""The idle wait after a pass counts from now, not from the pass's claim: the time a
maintenance run took in between (the leader's reconcile) is taken off the wait to the next due
time (escalation/entrypoints/worker.py ``_idle_wait``)."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from typing import Any

import pytest

from escalation.entrypoints import worker as w
from escalation.service_layer.fire import BatchReport


def _ctx(waits: list[float]) -> Any:
    def wait_for_wake(seconds: float) -> bool:
        waits.append(seconds)
        return False

    app = SimpleNamespace(actor="w1", scheduler=SimpleNamespace(wait_for_wake=wait_for_wake),
                          settings=SimpleNamespace(poll_interval_s=1.0, jitter=0.0))
    return w._Pass(app=app, fire=None, crashpoint=None, warn_adapter=None,  # type: ignore[arg-type]
                   warn_schedule=None, warn_members=None, dead=None, stats=None, resync=None,
                   idle=w._IdleState(maint_every_s=30.0, woke=False))


@pytest.mark.parametrize(("spent_s", "expected_s"), [(0.0, 0.7), (0.5, 0.2), (0.9, None)])
def test_time_spent_after_the_claim_is_taken_off_the_wait_to_the_next_due_time(
        spent_s: float, expected_s: float | None) -> None:
    waits: list[float] = []
    claim_ms = 1_000_000
    report = BatchReport()
    report.next_due_ms = claim_ms + 700  # a frozen worker's lease ends 0.7 s after the claim
    w._idle_wait(_ctx(waits), report, claim_ms, random.Random(1),
                 passed_at=time.monotonic() - spent_s)
    if expected_s is None:
        assert waits == []  # already due: no wait at all, the next pass claims it
    else:
        assert len(waits) == 1 and waits[0] == pytest.approx(expected_s, abs=0.05)

"""Dead letters: a poison escalation ends there after bounded attempts without blocking the
others; list / show / retry / purge (docs/reliability.md, "Dead letters")."""

from __future__ import annotations

from typing import Any

import pytest

from escalation.domain.errors import InvalidInput, NotFound
from escalation.domain.escalation import Status
from escalation.service_layer.core import CorePorts
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.fire import FireDue, FiringHooks, fire_due
from tests.e2e.helpers import due_requests, enqueue
from tests.integration.reliability_support import reliability_redis


def _dead(app: Any, max_attempts: int = 3) -> DeadLetters:
    return DeadLetters(rel=reliability_redis(app), scheduler=app.scheduler, store=app.store,
                       actor="test", max_decision_attempts=max_attempts)


def _fire(app: Any, dl: DeadLetters, lease_ms: int = 1) -> Any:
    return fire_due(
        FireDue(batch_size=50, lease_ms=lease_ms, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(on_poison=dl.on_decision_failed),
    )


def _poison(app: Any, did: Any) -> None:
    keys = app.scheduler.keys_for(did)
    app.redis.hset(keys.payload(did), "l", "dispute_review@99")  # ladder version missing


def test_one_poison_member_among_100_good_ones_is_dead_lettered_after_bounded_attempts(
    app: Any,
) -> None:
    ids = enqueue(app, due_requests(101, app.scheduler.time()))
    poison = ids[50]
    _poison(app, poison)
    dl = _dead(app, max_attempts=3)
    poisoned = 0
    for _ in range(20):
        report = _fire(app, dl)
        poisoned += report.poison
        if report.claimed == 0:
            break
    assert poisoned == 3  # bounded: exactly max attempts, then out of the way
    promoted = [d for d in ids if app.store.get(d)[0].tier == "senior"]
    assert len(promoted) == 100 and poison not in promoted  # the others were never blocked
    keys = app.scheduler.keys_for(poison)
    assert app.redis.zscore(keys.pending, str(poison)) is None
    assert not app.redis.exists(keys.lock(poison))
    (item,) = dl.list()
    assert item["member"] == f"decision:{poison}" and item["attempts"] == 3
    assert dl.list(limit=1) == [item] and dl.list(limit=10_000) == [item]
    for bad in (0, -1, 10_001):  # 0 would read as "no dead letters", -1 as "all"
        with pytest.raises(InvalidInput, match="limit must be 1-10,000"):
            dl.list(limit=bad)
    assert "99" in item["reason"]
    trail = app.store.trail(poison)
    assert trail[-1].event == "DEAD_LETTERED"
    assert trail[-1].match_decision == "DECISION_DEAD_LETTERED"


def test_retry_puts_a_dead_escalation_back_due_now_and_purge_needs_confirmation(
    app: Any,
) -> None:
    (did,) = enqueue(app, due_requests(1, app.scheduler.time()))
    _poison(app, did)
    dl = _dead(app, max_attempts=1)
    assert _fire(app, dl).poison == 1
    member = f"decision:{did}"
    assert dl.show(member)["dispute_id"] == str(did)
    assert dl.retry(member) == "requeued"
    keys = app.scheduler.keys_for(did)
    assert app.redis.zscore(keys.pending, str(did)) is not None
    assert dl.list() == []
    # still poison: back in the dead set on the next attempt
    for _ in range(3):
        _fire(app, dl)
    assert [i["member"] for i in dl.list()] == [member]
    with pytest.raises(InvalidInput):
        dl.purge(member, confirm=False, reason="bad ladder")
    with pytest.raises(InvalidInput, match="reason must not be empty"):
        dl.purge(member, confirm=True, reason=" ")  # the PURGED row's why
    assert dl.show(member)["dispute_id"] == str(did)  # nothing removed
    assert dl.purge(member, confirm=True, reason="bad ladder") is True
    assert dl.list() == []
    assert app.store.get(did)[1] is Status.CANCELLED
    assert app.store.trail(did)[-1].event == "PURGED"
    assert app.scheduler.payload(did) is None
    with pytest.raises(NotFound):
        dl.show(member)


@pytest.mark.parametrize("name", [n for n in __import__(
    "escalation.adapters.redis_reconcile_notify", fromlist=["x"]).RELIABILITY_SCRIPTS])
def test_reliability_scripts_ship_with_a_complete_header(name: str) -> None:
    import re

    from escalation.adapters.redis_scheduler import packaged_scripts, script_source

    assert name in packaged_scripts()
    text = script_source(name)
    assert text.splitlines()[0].startswith(f"-- {name}.lua: ")
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert "Returns:" in header
    for ref in set(re.findall(r"(?:KEYS|ARGV)\[\d+\]", body)):
        assert ref in header, f"{name}.lua uses {ref} without documenting it"

"""fire_due when the ledger is read-only (a hot standby, a failover's read-only window): the
claimed members are handed back at once, none waits its lease (on the in-memory fakes)."""

from __future__ import annotations

from typing import Any

import pytest

from escalation.domain.errors import DatabaseReadOnly
from escalation.domain.timeutil import to_ms
from tests.unit.test_fire_and_enqueue import T0, World


class ReadOnlyLedger:
    """The fake audit log, refusing every decision as a standby would."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def record_decisions(self, *args: Any, **kwargs: Any) -> Any:
        raise DatabaseReadOnly("the database is read-only")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_read_only_ledger_hands_every_claimed_member_back_due_and_unlocked() -> None:
    w = World()
    escs = [w.enqueue() for _ in range(3)]
    writable = w.store
    w.store = ReadOnlyLedger(writable)  # type: ignore[assignment]
    with pytest.raises(DatabaseReadOnly):
        w.fire()
    for esc in escs:
        member = str(esc.dispute_id)
        assert member not in w.scheduler.locks  # released
        assert w.scheduler.scores[member] == to_ms(T0)  # due again now, not claim + lease
        assert writable.events(esc.dispute_id) == ["ENQUEUED"]  # nothing recorded
    w.store = writable
    report = w.fire()  # a writable primary answers: the same worker takes them at once
    assert (report.claimed, report.recorded) == (3, 3)

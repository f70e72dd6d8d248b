"""A reconcile run racing a worker is not Redis ahead of the ledger.

Reconcile reads a page of the ledger, then Redis. A worker records a decision in the ledger
first and applies it to Redis after, so a decision made between the two reads shows Redis
one seq past the page -- but never past the ledger read again after Redis. Only what is
still ahead then is Redis ahead of the ledger (ADR 0014), which marks the namespace and
stops every worker: a false mark stops firing for the whole namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from escalation.domain.escalation import Status
from escalation.ports import MemberState
from escalation.service_layer.reconcile import (
    AheadRepair,
    DiffKind,
    FullReconcile,
    ReconcilePorts,
    reconcile,
)
from tests.unit.test_reconcile_incremental import World


@dataclass
class Mark:
    """The namespace's resync mark."""

    reason: str | None = None

    def resync(self) -> dict[str, Any] | None:
        return None if self.reason is None else {"reason": self.reason}

    def mark_resync(self, reason: str, detail: str = "") -> None:
        self.reason = self.reason or reason

    def clear_resync(self) -> bool:
        had, self.reason = self.reason is not None, None
        return had


class Racing(World):
    """A world where, between reconcile's ledger read and its Redis read, one more decision
    on ``target`` lands in Redis -- and in the ledger too unless ``ledger_lost``."""

    target: str = ""
    terminal: bool = False
    ledger_lost: bool = False
    raced: bool = False

    def inspect(self, dispute_ids: Sequence[str]) -> dict[str, MemberState]:
        if self.target in dispute_ids and not self.raced:
            self.raced = True
            uid = uuid.UUID(self.target)
            old = self.store.states[uid]
            new = replace(old, seq=old.seq + 1, tier="senior",
                          status=Status.TERMINAL if self.terminal else Status.PENDING)
            if not self.ledger_lost:
                self.store.states[uid] = new
            if self.terminal:  # a terminal apply removes member and payload, then notifies
                self.scheduler.payloads.pop(self.target)
                self.scheduler.scores.pop(self.target)
            else:
                self.scheduler.payloads[self.target] = new
            self.scheduler.review.append({"dispute_id": self.target, "seq": str(new.seq),
                                          "match_decision": "PROMOTED_TO_SENIOR"})
        return super().inspect(dispute_ids)

    def review_after(self, wanted: Mapping[str, tuple[int, int]],
                     count: int = 1000) -> dict[str, list[dict[str, str]]]:
        out: dict[str, list[dict[str, str]]] = {}
        for entry in self.scheduler.review:
            did = entry["dispute_id"]
            if did in wanted and int(entry["seq"]) > wanted[did][0]:
                out.setdefault(did, []).append(dict(entry))
        return out


def _run(*, terminal: bool, ledger_lost: bool) -> tuple[Racing, Mark, Any]:
    world = Racing()
    world.target = str(world.enqueue(uuid.uuid4()).dispute_id)
    world.enqueue(uuid.uuid4())  # a bystander on the same page
    world.terminal, world.ledger_lost = terminal, ledger_lost
    world.scheduler.advance(timedelta(hours=2))
    mark = Mark()
    report = reconcile(FullReconcile(),  # the periodic run
                       ReconcilePorts(world.scheduler, world, world,
                                      ahead=AheadRepair(mark=mark, stream=world)))
    assert world.raced
    return world, mark, report


def test_a_promotion_between_the_two_reads_is_not_ahead() -> None:
    _, mark, report = _run(terminal=False, ledger_lost=False)
    assert [d for d in report.diffs if d.kind is DiffKind.AHEAD] == []
    assert report.lost_decisions == []
    assert mark.reason is None


def test_a_terminal_decision_between_the_two_reads_is_not_a_lost_decision() -> None:
    # the payload is gone and the stream holds seq 2: the page (seq 1) alone would call it a
    # terminal decision the ledger lost; the ledger read again holds seq 2
    world, mark, report = _run(terminal=True, ledger_lost=False)
    assert [d for d in report.diffs if d.kind is DiffKind.AHEAD] == []
    assert report.lost_decisions == []
    assert mark.reason is None
    assert world.target not in world.scheduler.payloads  # not restored from the stale page


def test_redis_ahead_of_the_ledger_read_again_is_still_found() -> None:
    # the same race with the ledger's write lost (a failover): Redis is ahead
    world, mark, report = _run(terminal=False, ledger_lost=True)
    assert [d.dispute_id for d in report.diffs if d.kind is DiffKind.AHEAD] == [world.target]
    assert mark.reason == "ahead_in_reconcile"


def test_a_lost_terminal_decision_is_still_found() -> None:
    world, mark, report = _run(terminal=True, ledger_lost=True)
    assert [d.dispute_id for d in report.diffs if d.kind is DiffKind.AHEAD] == [world.target]
    assert [e["seq"] for e in report.lost_decisions] == ["2"]
    assert mark.reason == "ahead_in_reconcile"

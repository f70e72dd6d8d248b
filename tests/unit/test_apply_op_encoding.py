"""How an apply op is encoded for apply.lua: warnings of the same dispute (an equal id, not
only the same object) are accepted and any other refused; the action may be given as the
enum or as its value."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.ports import ApplyAction, ApplyOp, WarningMember


def _esc() -> Escalation:
    at = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    return Escalation(dispute_id=uuid.uuid4(), tier="senior", due_at=at,
                      materiality=Materiality.parse("10.00"), source_hash="ab",
                      ladder="dispute_review", ladder_version=1, seq=2, entered_tier_at=at,
                      trace_id="t")


def test_encode_op_accepts_warnings_of_an_equal_id_and_refuses_another() -> None:
    esc = _esc()
    same = uuid.UUID(str(esc.dispute_id))  # equal, not the same object
    ops = [ApplyOp(esc, ApplyAction.RESCHEDULE, 1, None, (WarningMember(did, 2, "0.50", 5),))
           for did in (esc.dispute_id, same)]
    encoded = [RedisScheduler._encode_op(op, False) for op in ops]
    assert encoded[0] == encoded[1]
    assert encoded[0][0] == [str(esc.dispute_id), "reschedule", "1", "2",
                             encoded[0][0][4], "0"]
    with pytest.raises(InvalidInput):
        RedisScheduler._encode_op(ApplyOp(esc, ApplyAction.RESCHEDULE, 1, None,
                                          (WarningMember(uuid.uuid4(), 2, "0.50", 5),)), False)


def test_encode_op_takes_the_action_as_its_value_too() -> None:
    esc = _esc()
    by_enum = RedisScheduler._encode_op(ApplyOp(esc, ApplyAction.PARK, 1), False)
    by_text = RedisScheduler._encode_op(ApplyOp(esc, "park", 1), False)  # type: ignore[arg-type]
    assert by_enum == by_text

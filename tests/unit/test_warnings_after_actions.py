"""Pre-breach warnings around a recorded action: an action that leaves the due time alone
keeps the tier's warnings; one that re-plans it hands the tier's warnings to a new set keyed
by its own seq (service_layer.warnings._moved_on; docs/adr/0010-obligations-and-resolution.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from escalation.ports import LedgerRow
from escalation.service_layer.warnings import _moved_on

AT = datetime(2026, 1, 5, 15, tzinfo=UTC)
DID = uuid4()


def row(seq: int, event: str, details: dict[str, Any] | None = None) -> LedgerRow:
    return LedgerRow(DID, seq, event, event, "standard", "standard", "reg_e", 3, "1.00", None,
                     None, AT, None, "jane", "t", "ab", None, None, details or {}, "", "")


def test_an_action_that_keeps_the_due_time_keeps_the_warnings() -> None:
    rows = [row(1, "ENQUEUED"), row(2, "ACTION_RECORDED", {"action": "provisional_credit"})]
    assert _moved_on(rows, 1, "0.50") == (False, False)


def test_an_action_that_re_plans_the_due_time_ends_the_tier_warnings_of_its_entry() -> None:
    replan = {"due_at_before": AT.isoformat(), "due_at_after": AT.isoformat(), "why": "x"}
    rows = [row(1, "ENQUEUED"), row(2, "ACTION_RECORDED", {"replan": replan})]
    assert _moved_on(rows, 1, "0.50") == (True, False)
    # the re-planned window's own warnings are keyed by the action's seq: they stand
    assert _moved_on(rows, 2, "0.50") == (False, False)


def test_a_resolution_ends_them() -> None:
    rows = [row(1, "ENQUEUED"), row(2, "RESOLVED", {"outcome": "no_error_found"})]
    assert _moved_on(rows, 1, "0.50") == (True, False)

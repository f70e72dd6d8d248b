"""Builders shared by the audit-store integration tests (escalations, claims, decisions)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from escalation.domain.decide import TERMINAL_ESCALATION, Decision, DecisionKind
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.ports import ClaimedItem

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def make_escalation(tier: str = "standard", due_at: datetime = T0) -> Escalation:
    """A fresh, unrecorded escalation (seq 0) with a new random dispute id."""
    return Escalation(
        dispute_id=uuid.uuid4(),
        tier=tier,
        due_at=due_at,
        materiality=Materiality.parse("1250.00"),
        source_hash="ab" * 32,
        ladder="dispute_review",
        ladder_version=1,
        seq=0,
        entered_tier_at=due_at - timedelta(days=2),
        trace_id="trace-" + uuid.uuid4().hex[:8],
    )


def claimed(esc: Escalation, token: int = 1) -> ClaimedItem:
    return ClaimedItem(escalation=esc, token=token, score_ms=0)


def promote(esc: Escalation, to_tier: str = "senior", at: datetime | None = None) -> Decision:
    now = at or esc.due_at + timedelta(seconds=1)
    return Decision(
        DecisionKind.PROMOTED,
        f"PROMOTED_TO_{to_tier.upper()}",
        esc.tier,
        to_tier,
        now + timedelta(days=2),
        now,
    )


def terminal(esc: Escalation, at: datetime | None = None) -> Decision:
    now = at or esc.due_at + timedelta(seconds=1)
    return Decision(DecisionKind.TERMINAL, TERMINAL_ESCALATION, esc.tier, None, None, now)

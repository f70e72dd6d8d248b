"""Use case: the dispute was resolved -> cancel its escalation.

Recorded in PostgreSQL first (a CANCELLED ledger row), then the member, payload and lock are
removed from Redis in one script; a worker still holding the lock cannot bring it back (its
apply finds no payload).
"""

from __future__ import annotations

from escalation.domain.escalation import Escalation, parse_dispute_id
from escalation.ports import AuditLog, Scheduler


def cancel(
    dispute_id: object, *, scheduler: Scheduler, store: AuditLog, actor: str, reason: str
) -> Escalation:
    """Cancel one dispute's escalation. Returns the cancelled state.

    Raises:
        InvalidInput: ``dispute_id`` is not a UUID.
        NotFound: no escalation for this dispute.
        ConflictError: already terminal or cancelled.
    """
    did = parse_dispute_id(dispute_id)
    state = store.record_cancel(did, actor, scheduler.time(), reason)
    scheduler.cancel(did)
    return state

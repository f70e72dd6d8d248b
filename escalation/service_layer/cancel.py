"""Use case: the dispute was resolved -> cancel its escalation.

Recorded in PostgreSQL first (a CANCELLED ledger row), then the member, payload and lock are
removed from Redis in one script; a worker still holding the lock cannot bring it back (its
apply finds no payload). A decision recorded before the cancel but never applied (PROMOTED
then CANCELLED) is notified by that same script, exactly once.
"""

from __future__ import annotations

from uuid import UUID

from escalation.domain.escalation import Escalation, check_reason, parse_dispute_id
from escalation.ports import AuditLog, Scheduler
from escalation.service_layer.fire import UnappliedSource, unapplied_notifications


def cancel(
    dispute_id: object, *, scheduler: Scheduler, store: AuditLog, actor: str, reason: str
) -> Escalation:
    """Cancel one dispute's escalation. Returns the cancelled state.

    Raises:
        InvalidInput: ``dispute_id`` is not a UUID; ``reason`` is blank, longer than 500
            characters or holds a control character (NUL, newline...).
        NotFound: no escalation for this dispute.
        ConflictError: already terminal or cancelled.
    """
    did = parse_dispute_id(dispute_id)
    check_reason(reason)
    state = store.record_cancel(did, actor, scheduler.time(), reason)
    leave_redis(scheduler, store, did, state.seq)
    return state


def leave_redis(scheduler: Scheduler, store: UnappliedSource, did: UUID, seq: int) -> None:
    """Remove a dispute's member, payload and lock from Redis after PostgreSQL recorded its
    end at ``seq`` (a cancel or a resolution).

    A decision recorded just before may never have been applied (its worker died or lost the
    race): its notification goes out with the removal, exactly once. cancel.lua sends it only
    if no apply moved the payload past its seq.
    """
    payload = scheduler.payload(did)
    note = None
    if payload is not None:
        try:
            applied = int(payload.get("seq", "0"))
        except ValueError:
            applied = 0  # a corrupt seq is behind everything (as in apply.lua)
        note = unapplied_notifications(store, [(did, applied, seq)]).get(did)
    scheduler.cancel(did, note)

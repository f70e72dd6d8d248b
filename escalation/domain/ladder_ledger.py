"""Ladder events on the ledger (pure): the chain id of a ladder version, its event names and
what their ``details`` hold (docs/adr/0012-ladder-events-on-the-ledger.md).

A ladder version has a hash chain of its own in the ledger, keyed by
:func:`ladder_chain_id` in the ``dispute_id`` column: seq 1 is its release
(:attr:`LadderEvent.RELEASED`, or :attr:`LadderEvent.BASELINE` for the first-use baseline),
then one row per ``ladder apply`` run that ended (:attr:`LadderEvent.APPLIED` or
:attr:`LadderEvent.APPLY_FAILED`). The rows hash like every ledger row
(``domain.audit_hash``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID, uuid5

from escalation.domain.errors import InvalidInput

LADDER_CHAIN_NAMESPACE = UUID("6f1c2a7e-5b0d-4c3e-9a8f-1d2e3f405162")
"""The fixed UUID namespace of ladder chain ids (never change it: ids on record use it)."""


class LadderEvent(StrEnum):
    """The ``event`` (and ``match_decision``) of a ladder chain's rows."""

    RELEASED = "LADDER_RELEASED"
    """``ladder release``: the version went live (seq 1)."""
    BASELINE = "LADDER_BASELINE"
    """The first-use baseline release of a ladder with no release yet (seq 1)."""
    APPLIED = "LADDER_APPLIED"
    """A ``ladder apply`` run to this version finished (status done)."""
    APPLY_FAILED = "LADDER_APPLY_FAILED"
    """A ``ladder apply`` run to this version ended failed (an error, or superseded by a run
    with a new plan); the escalations it migrated stay migrated."""


RUN_EVENTS: Mapping[str, LadderEvent] = {"done": LadderEvent.APPLIED,
                                         "failed": LadderEvent.APPLY_FAILED}
"""A ``ladder_history`` run's final status -> the event recording it."""


def ladder_chain_id(ladder: str, version: int) -> UUID:
    """The chain id of ``ladder@version``: ``uuid5(LADDER_CHAIN_NAMESPACE, "<ladder>@<version>")``.

    Raises:
        InvalidInput: an empty ladder name or a version below 1.
    """
    if not ladder:
        raise InvalidInput("ladder: must not be empty")
    if version < 1:
        raise InvalidInput(f"version: must be 1 or more, got {version}")
    return uuid5(LADDER_CHAIN_NAMESPACE, f"{ladder}@{version}")


def run_event(status: str) -> LadderEvent:
    """The event of a run that ended with ``status`` (``done`` or ``failed``).

    Raises:
        InvalidInput: any other status (a running run records no event).
    """
    try:
        return RUN_EVENTS[status]
    except KeyError:
        raise InvalidInput(f"status: a ladder apply run ends done or failed, got {status!r}"
                           ) from None


@dataclass(frozen=True, slots=True)
class ReleaseEvent:
    """Where a version's release is on the ledger: ``chain_id`` / ``seq`` (always 1),
    ``event`` (LADDER_RELEASED or LADDER_BASELINE), ``row_hash`` (hex), who and when
    (aware UTC)."""

    ladder: str
    version: int
    event: LadderEvent
    chain_id: UUID
    seq: int
    row_hash: str
    released_by: str
    released_at: datetime

    def as_details(self) -> dict[str, Any]:
        """The ``details.release`` of a LADDER_MIGRATED row (JSON-ready, no floats)."""
        return {"version": self.version, "event": self.event.value,
                "chain_id": str(self.chain_id), "seq": self.seq, "row_hash": self.row_hash,
                "released_by": self.released_by,
                "released_at": self.released_at.isoformat()}

    def migration_reason(self, reason: str) -> str:
        """The ``details.reason`` of a LADDER_MIGRATED row: the apply's ``reason`` (if any),
        then the release it migrates to, e.g. ``CHG-7; migrated to dispute_review@2, released
        as LADDER_RELEASED by jane (ledger 3f0c...#1)``."""
        release = (f"migrated to {self.ladder}@{self.version}, released as {self.event.value} "
                   f"by {self.released_by} (ledger {self.chain_id}#{self.seq})")
        return f"{reason}; {release}" if reason else release

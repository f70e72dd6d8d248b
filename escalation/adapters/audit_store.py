"""PostgresAuditStore: the system of record (append-only ledger + projection).

Every write method is ONE transaction that locks the dispute's projection row, appends
ledger row(s) chained to the projection's ``last_hash``, and updates the projection
(docs/architecture.md "Where the truth lives"). The lock on the projection row (the chain
head) serialises appends to one dispute's hash chain (ADR 0007). The only ledger
verb is append: there is no update or delete of ``escalation_audit`` anywhere in the code,
and the database refuses them anyway.

Read methods (``get``, ``trail``, ``pending_page``, ``counts``, ``duplicate_decisions``,
``verify``) live in :mod:`escalation.adapters.audit_queries` and are mixed in here; what each
write appends is built in :mod:`escalation.adapters.audit_writes`, and the SQL that carries
it is in :mod:`escalation.adapters.audit_sql`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from psycopg.errors import UniqueViolation

from escalation.adapters.audit_enqueue import (
    EnqueuedLineTemplate,
    insert_staged,
    insert_staged_ids,
    stage_line,
)
from escalation.adapters.audit_queries import AuditQueries
from escalation.adapters.audit_rows import escalation_from_state
from escalation.adapters.audit_sql import (
    BULK_UPDATE,
    LOCK_MANY,
    SELECT_MANY,
    copy_ledger,
    last_calendar_version,
    lock_one,
    locked_states,
    unnest_params,
)
from escalation.adapters.audit_writes import (
    MUTABLE_STATE,
    append_row,
    apply_decisions,
    clean_changes,
)
from escalation.adapters.tables import LEDGER_EVENTS
from escalation.domain.decide import Decision
from escalation.domain.errors import ConflictError, DuplicateEvent, InvalidInput, NotFound
from escalation.domain.escalation import Escalation, Status
from escalation.domain.record_rule import check_recordable
from escalation.domain.timeutil import require_aware
from escalation.ports import ClaimedItem, LedgerEvent, RecordOutcome

__all__ = ["MUTABLE_STATE", "PostgresAuditStore"]


class PostgresAuditStore(AuditQueries):
    """The PostgreSQL audit log (implements ``escalation.ports.AuditLog``).

    Args:
        engine: a psycopg 3 engine (``escalation.adapters.db.make_engine``) on a database at
            the Alembic head. The store opens one short transaction per call.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    # ------------------------------------------------------------------ enqueue
    def record_enqueue(
        self, escalation: Escalation, actor: str, decided_at: datetime | None = None
    ) -> tuple[bool, Escalation]:
        """Record a new escalation: projection row + ENQUEUED ledger row (seq 1).

        Idempotent per dispute: if the dispute already has a projection row, nothing is
        written and ``(False, <its current state>)`` is returned (whatever its status).

        Args:
            escalation: validated escalation (``Escalation.new``), status pending.
            actor: who enqueued (service name, admin, worker id).
            decided_at: aware UTC time of the enqueue decision; default ``entered_tier_at``.

        Returns:
            ``(True, escalation at seq 1)`` when recorded now, else ``(False, current)``.

        Raises:
            InvalidInput: naive ``decided_at`` or a non-pending escalation.
        """
        return self.record_enqueue_many([escalation], actor, decided_at)[0]

    def record_enqueue_many(
        self, escalations: Sequence[Escalation], actor: str, decided_at: datetime | None = None,
        calendar_versions: Mapping[UUID, str] | None = None,
        details: Mapping[UUID, Mapping[str, object]] | None = None,
    ) -> list[tuple[bool, Escalation]]:
        """:meth:`record_enqueue` for a batch, in one transaction and at most three statements.

        One ``COPY`` of the rows into a session staging table, one statement inserting the
        projection rows that do not exist yet (``ON CONFLICT DO NOTHING``) and the ENQUEUED
        ledger rows of those, one SELECT for the states of the disputes that already
        existed (:mod:`escalation.adapters.audit_enqueue`).

        Returns one ``(recorded, state)`` per input, in input order; a dispute repeated in
        the batch is recorded once, from its first occurrence (its later occurrences return
        ``False`` and the state that first occurrence recorded).
        ``calendar_versions`` (optional): dispute id -> version of the calendar its due
        time was counted in, recorded in the ENQUEUED row's ``calendar_version``.
        ``details`` (optional): dispute id -> extra keys of the ENQUEUED row's ``details``.

        Raises:
            InvalidInput: a non-pending escalation or a naive ``decided_at``; nothing written.
        """
        if not escalations:
            return []
        when = None if decided_at is None else require_aware(decided_at, "decided_at")
        firsts = _stage_lines(escalations, actor, when, calendar_versions or {}, details or {})
        with self._engine.begin() as conn:
            inserted = insert_staged(conn, list(firsts.values()), actor)
            others = [d for d in firsts if d not in inserted]
            existing = _states_of(conn, others) if others else {}
        return _enqueue_results(escalations, inserted, existing)

    def enqueued_line_template(
        self, proto: Escalation, actor: str, decided_at: datetime,
        calendar_version: str | None, details: Mapping[str, object] | None,
    ) -> EnqueuedLineTemplate:
        """The staging-line template (:class:`EnqueuedLineTemplate`) of ``proto``'s ENQUEUED
        row, for :meth:`record_staged` (the CSV import's bulk path).

        Raises:
            InvalidInput: ``proto`` is not pending, or ``decided_at`` is naive.
        """
        if proto.status is not Status.PENDING:
            raise InvalidInput(f"only a pending escalation can be enqueued ({proto.status})")
        return EnqueuedLineTemplate(proto, actor, require_aware(decided_at, "decided_at"),
                                    calendar_version, details)

    def record_staged(self, lines: Sequence[str], actor: str) -> set[str]:
        """:meth:`record_enqueue_many` of rows already rendered as staging lines (by
        :meth:`enqueued_line_template`; at most one line per dispute), in one transaction:
        returns the dispute ids (canonical UUID strings) recorded now; the others already
        had a projection row and are left as they are."""
        if not lines:
            return set()
        with self._engine.begin() as conn:
            return insert_staged_ids(conn, "".join(lines), actor)

    # ------------------------------------------------------------------ decisions
    def record_decisions(
        self, items: Sequence[tuple[ClaimedItem, Decision]], actor: str
    ) -> list[RecordOutcome]:
        """Record a batch of promote/terminal decisions: the commit point of a firing.

        One transaction: lock the projection rows (``FOR UPDATE``, ordered by dispute id so
        concurrent workers cannot deadlock), then per item in input order:

        * no projection row -> ``UNKNOWN`` (state None);
        * terminal or cancelled -> ``CLOSED``;
        * paused, or ``last_seq`` != the claimed payload's ``seq`` -> ``STALE`` (a newer
          decision exists; the returned state is what the caller should apply);
        * else append a PROMOTED/TERMINAL ledger row (seq + 1, ``fence_token`` = claim
          token, chained hash) and move the projection -> ``RECORDED``.

        Ledger rows go in with one ``COPY``, projection updates with one
        ``UPDATE ... FROM unnest(...)`` (about 50 ms for 500 items on a 2-core machine).
        Repeating a batch writes nothing (all STALE).

        Returns:
            One :class:`RecordOutcome` per item, in input order, with the state PostgreSQL
            holds after the transaction.

        Raises:
            InvalidInput: a NOT_DUE decision, a promotion without ``next_due_at``, or a
                naive datetime. Nothing is written.
        """
        if not items:
            return []
        for _claimed, decision in items:
            check_recordable(decision)
        ids = sorted({claimed.escalation.dispute_id for claimed, _ in items})
        with self._engine.begin() as conn:
            states = locked_states(conn.execute(LOCK_MANY, {"ids": ids}))
            outcomes, ledger, moved = apply_decisions(states, items, actor)
            if ledger:
                copy_ledger(conn, ledger)
                conn.execute(BULK_UPDATE, unnest_params(moved))
        return outcomes

    # ------------------------------------------------------------------ single events
    def record_cancel(
        self, dispute_id: UUID, actor: str, decided_at: datetime, reason: str
    ) -> Escalation:
        """Cancel an escalation (the dispute was resolved): a CANCELLED ledger row.

        Idempotent: cancelling an already-cancelled escalation writes nothing and returns it.

        Raises:
            NotFound: no escalation for ``dispute_id``.
            ConflictError: the escalation already reached its terminal tier (the message
                names ``resolve``), or was resolved.
            InvalidInput: naive ``decided_at``.
        """
        require_aware(decided_at, "decided_at")
        with self._engine.begin() as conn:
            state = lock_one(conn, dispute_id)
            if state["status"] == Status.CANCELLED.value:
                return escalation_from_state(state)
            if state["status"] == Status.TERMINAL.value:
                raise ConflictError(
                    f"dispute {dispute_id} already reached terminal escalation in tier "
                    f"{state['tier']!r}; it cannot be cancelled: record its resolution with "
                    "resolve (an outcome code)"
                )
            if state["status"] == Status.RESOLVED.value:
                raise ConflictError(f"dispute {dispute_id} is already resolved; it cannot be "
                                    "cancelled")
            return append_row(conn, state, LedgerEvent(
                dispute_id,
                event="CANCELLED",
                match_decision="CANCELLED",
                actor=actor,
                decided_at=decided_at,
                changes={"status": Status.CANCELLED.value},
                details={"reason": reason},
                # the calendar the escalation was counting in (its last row's), so every
                # row of the chain names one
                calendar_version=last_calendar_version(conn, state)))

    def record_stuck(
        self,
        dispute_id: UUID,
        actor: str,
        decided_at: datetime,
        details: Mapping[str, Any] | None = None,
    ) -> Escalation | None:
        """Record a STUCK_MEMBER (a Redis member without payload) on the dispute's chain.

        The projection is unchanged except for its chain head. Returns the state, or None
        (nothing written) when PostgreSQL has no escalation for ``dispute_id``: with no
        chain to extend there is nothing to record; the caller logs the anomaly.
        """
        require_aware(decided_at, "decided_at")
        with self._engine.begin() as conn:
            try:
                state = lock_one(conn, dispute_id)
            except NotFound:
                return None
            return append_row(conn, state, LedgerEvent(
                dispute_id,
                event="STUCK_MEMBER",
                match_decision="STUCK_MEMBER",
                actor=actor,
                decided_at=decided_at,
                changes={},
                details=details or {}))

    def append_event(self, entry: LedgerEvent) -> Escalation:
        """Append ``entry``'s ledger row and apply its ``changes`` to the projection, in one
        transaction.

        The generic verb behind pause, resume, ladder migration, warnings, dead letters.
        The ledger row's ``from_tier``/``due_at`` are the values before, ``to_tier``/
        ``next_due_at``/``ladder``/``ladder_version`` the values after the change.

        ``entry`` (:class:`escalation.ports.LedgerEvent`):

        Args:
            event: one of ``tables.LEDGER_EVENTS``.
            changes: projection columns to set (keys from :data:`MUTABLE_STATE`; ``status``
                as ``Status`` or str, ``materiality`` as Materiality/Decimal). A status other
                than pending clears ``due_at`` unless ``changes`` sets it.
            details: JSON object stored (and hashed) with the row; no floats.
            expected_seq: if given, the projection's ``last_seq`` must equal it (CAS).

        Raises:
            NotFound: no escalation for ``dispute_id``.
            ConflictError: ``expected_seq`` differs from the projection's ``last_seq``.
            DuplicateEvent: a unique index refused the row (e.g. a WARNING already recorded
                for the same dispute, tier seq and fraction); nothing written.
            InvalidInput: unknown event or column, bad status, naive datetime, float.
        """
        dispute_id, event, expected_seq = entry.dispute_id, entry.event, entry.expected_seq
        decided_at, changes = entry.decided_at, entry.changes
        if event not in LEDGER_EVENTS:
            raise InvalidInput(f"unknown ledger event {event!r}; expected one of {LEDGER_EVENTS}")
        require_aware(decided_at, "decided_at")
        clean = clean_changes(changes)
        try:
            with self._engine.begin() as conn:
                state = lock_one(conn, dispute_id)
                if expected_seq is not None and int(state["last_seq"]) != expected_seq:
                    raise ConflictError(
                        f"dispute {dispute_id} is at seq {state['last_seq']}, "
                        f"expected {expected_seq}"
                    )
                return append_row(conn, state, replace(entry, changes=clean))
        except sa.exc.IntegrityError as exc:
            if not isinstance(exc.orig, UniqueViolation):
                raise
            raise DuplicateEvent(
                f"dispute {dispute_id}: the ledger already holds this {event} event"
            ) from None


# ---------------------------------------------------------------------- enqueue steps
def _stage_lines(
    escalations: Sequence[Escalation], actor: str, when: datetime | None,
    calendar_versions: Mapping[UUID, str],
    details: Mapping[UUID, Mapping[str, object]],
) -> dict[UUID, str]:
    """Staging COPY line of each dispute's first occurrence in the batch.

    Raises:
        InvalidInput: an escalation that is not pending (checked before anything is built).
    """
    firsts: dict[UUID, str] = {}
    for esc in escalations:
        if esc.status is not Status.PENDING:
            raise InvalidInput(f"only a pending escalation can be enqueued ({esc.status})")
        d = esc.dispute_id
        if d not in firsts:
            firsts[d] = stage_line(esc, actor, when or esc.entered_tier_at,
                                   calendar_versions.get(d), details.get(d))[0]
    return firsts


def _states_of(conn: sa.Connection, ids: Sequence[UUID]) -> dict[UUID, Escalation]:
    """Current projection states of ``ids`` (those that exist)."""
    rows = conn.execute(SELECT_MANY, {"ids": list(ids)}).mappings()
    return {row["dispute_id"]: escalation_from_state(row) for row in rows}


def _enqueue_results(
    escalations: Sequence[Escalation], inserted: set[UUID], existing: Mapping[UUID, Escalation]
) -> list[tuple[bool, Escalation]]:
    """``(recorded now, state)`` per input; only a dispute's first occurrence is recorded,
    and its later occurrences are answered with the state that first one recorded."""
    out: list[tuple[bool, Escalation]] = []
    now_recorded: dict[UUID, Escalation] = {}
    for esc in escalations:
        d = esc.dispute_id
        if d in inserted:
            state = now_recorded.get(d)
            if state is None:
                now_recorded[d] = state = _recorded(esc)
                out.append((True, state))
            else:
                out.append((False, state))
        else:
            out.append((False, existing.get(d) or esc.with_changes(seq=1)))
    return out


def _recorded(esc: Escalation) -> Escalation:
    """``esc`` (pending, checked by ``_stage_lines``) at seq 1: the state just recorded
    (a direct construction: ``dataclasses.replace`` costs several times more per row)."""
    return Escalation(
        dispute_id=esc.dispute_id, tier=esc.tier, due_at=esc.due_at,
        materiality=esc.materiality, source_hash=esc.source_hash, ladder=esc.ladder,
        ladder_version=esc.ladder_version, seq=1, entered_tier_at=esc.entered_tier_at,
        trace_id=esc.trace_id, external_id=esc.external_id,
        regulatory_deadline=esc.regulatory_deadline, status=Status.PENDING,
        deadlines=esc.deadlines, institution_tz=esc.institution_tz,
        institution_calendar=esc.institution_calendar, source=esc.source)

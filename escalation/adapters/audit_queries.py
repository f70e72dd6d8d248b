"""Read side of the audit store: state lookups, trails, reconcile scans, health and verify.

Mixed into :class:`escalation.adapters.audit_store.PostgresAuditStore`; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_rows import escalation_from_state, ledger_row
from escalation.adapters.tables import STATUSES, escalation_audit, escalation_state
from escalation.domain.audit_hash import verify_chain
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.ports import LedgerRow

_A = escalation_audit
_S = escalation_state
MAX_PAGE = 10_000

_DUPLICATES = sa.text(
    """
    SELECT count(DISTINCT dispute_id) FROM (
        SELECT dispute_id FROM escalation_audit
         WHERE event IN ('PROMOTED', 'TERMINAL')
         GROUP BY dispute_id, from_tier, ladder_version
        HAVING count(*) > 1
    ) AS d
    """
)

# Projection heads that disagree with the last ledger row of their chain (tail removed,
# row appended behind the projection's back, or last row rewritten).
_HEAD_MISMATCH = sa.text(
    """
    SELECT s.dispute_id, s.last_seq, a.seq
      FROM escalation_state AS s
      LEFT JOIN LATERAL (
           SELECT seq, row_hash FROM escalation_audit
            WHERE dispute_id = s.dispute_id ORDER BY seq DESC LIMIT 1) AS a ON true
     WHERE (CAST(:id AS uuid) IS NULL OR s.dispute_id = CAST(:id AS uuid))
       AND (a.seq IS DISTINCT FROM s.last_seq OR a.row_hash IS DISTINCT FROM s.last_hash)
       -- a chain whose partition was removed by retention is gone on purpose (the month
       -- of that partition; verify reports a retention row that does not pass its checks)
       AND NOT (a.seq IS NULL AND EXISTS (
           SELECT 1 FROM audit_retention AS r
            WHERE s.created_at >= r.range_from AND s.created_at < r.range_to))
    """
)


# The same for the ladder version chains, whose heads are on ``ladder_release`` (ADR 0012).
_LADDER_HEAD_MISMATCH = sa.text(
    """
    SELECT r.chain_id, r.last_seq, a.seq
      FROM ladder_release AS r
      LEFT JOIN LATERAL (
           SELECT seq, row_hash FROM escalation_audit
            WHERE dispute_id = r.chain_id ORDER BY seq DESC LIMIT 1) AS a ON true
     WHERE r.chain_id IS NOT NULL
       AND (CAST(:id AS uuid) IS NULL OR r.chain_id = CAST(:id AS uuid))
       AND (a.seq IS DISTINCT FROM r.last_seq OR a.row_hash IS DISTINCT FROM r.last_hash)
       AND NOT (a.seq IS NULL AND EXISTS (
           SELECT 1 FROM audit_retention AS t
            WHERE r.chain_created_at >= t.range_from AND r.chain_created_at < t.range_to))
    """
)


class AuditQueries:
    """Read-only queries over the ledger and projection (needs ``self._engine``)."""

    _engine: sa.Engine

    def get(self, dispute_id: UUID) -> tuple[Escalation, Status] | None:
        """The recorded state of one escalation and its status, or None if never enqueued."""
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(_S).where(_S.c.dispute_id == dispute_id)).mappings()
            first = row.first()
        if first is None:
            return None
        esc = escalation_from_state(first)
        return esc, esc.status

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        """Recorded states by dispute id (ids with no escalation are absent)."""
        ids = list(set(dispute_ids))
        if not ids:
            return {}
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(_S).where(_S.c.dispute_id.in_(ids))).mappings()
            return {r["dispute_id"]: escalation_from_state(r) for r in rows}

    def find_by_external_id(self, external_id: str) -> list[UUID]:
        """Dispute ids whose escalation carries ``external_id`` (e.g. a CFPB Complaint ID)."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(_S.c.dispute_id).where(_S.c.external_id == external_id)
                .order_by(_S.c.dispute_id)
            )
            return [UUID(str(r[0])) for r in rows]

    def trail(self, dispute_id: UUID) -> list[LedgerRow]:
        """Every ledger row of one dispute, in ``seq`` order (empty if none)."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(_A).where(_A.c.dispute_id == dispute_id).order_by(_A.c.seq)
            ).mappings()
            return [ledger_row(r) for r in rows]

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        """The latest PROMOTED/TERMINAL row with ``after < seq <= upto`` per dispute.

        Used when a claim finds PostgreSQL ahead of Redis: the payload's seq (``after``) is the
        last one applied, so a decision in the range was recorded but never applied -- and its
        review-stream notification never sent. One query for the whole batch.

        Args:
            ranges: (dispute id, after seq, upto seq) triples.
        """
        if not ranges:
            return {}
        ids = [r[0] for r in ranges]
        after = [r[1] for r in ranges]
        upto = [r[2] for r in ranges]
        sql = sa.text(
            "SELECT DISTINCT ON (a.dispute_id) a.* FROM escalation_audit a "
            "JOIN unnest(CAST(:ids AS uuid[]), CAST(:after AS bigint[]), "
            "CAST(:upto AS bigint[])) AS r(dispute_id, after_seq, upto_seq) "
            "ON a.dispute_id = r.dispute_id AND a.seq > r.after_seq AND a.seq <= r.upto_seq "
            "WHERE a.event IN ('PROMOTED', 'TERMINAL') ORDER BY a.dispute_id, a.seq DESC"
        )
        with self._engine.connect() as conn:
            rows = conn.execute(sql, {"ids": ids, "after": after, "upto": upto}).mappings()
            return {UUID(str(r["dispute_id"])): ledger_row(r) for r in rows}

    def pending_page(
        self,
        after: UUID | None,
        limit: int,
        statuses: Sequence[Status] = (Status.PENDING,),
    ) -> list[Escalation]:
        """A keyset page of escalations for reconcile: dispute id > ``after``, ascending.

        Args:
            after: last dispute id of the previous page (None for the first page).
            limit: page size, 1-10000.
            statuses: which statuses to include (default pending only; reconcile of
                parked payloads passes ``(PENDING, PAUSED)``).

        Raises:
            InvalidInput: ``limit`` out of range.
        """
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"page limit must be 1-{MAX_PAGE}, got {limit}")
        stmt = sa.select(_S).where(_S.c.status.in_([Status(s).value for s in statuses]))
        if after is not None:
            stmt = stmt.where(_S.c.dispute_id > after)
        stmt = stmt.order_by(_S.c.dispute_id).limit(limit)
        with self._engine.connect() as conn:
            return [escalation_from_state(r) for r in conn.execute(stmt).mappings()]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{"by_status": {status: n} (all four statuses), "pending_by_tier": {tier: n}}``."""
        with self._engine.connect() as conn:
            by_status = dict.fromkeys(STATUSES, 0)
            for status, n in conn.execute(
                sa.select(_S.c.status, sa.func.count()).group_by(_S.c.status)
            ):
                by_status[status] = int(n)
            by_tier = {
                tier: int(n)
                for tier, n in conn.execute(
                    sa.select(_S.c.tier, sa.func.count())
                    .where(_S.c.status == Status.PENDING.value)
                    .group_by(_S.c.tier)
                    .order_by(_S.c.tier)
                )
            }
        return {"by_status": by_status, "pending_by_tier": by_tier}

    def duplicate_decisions(self) -> int:
        """Disputes escalated twice out of one tier of one ladder version (DOUBLE_ESCALATION).

        Counts disputes having more than one PROMOTED/TERMINAL ledger row with the same
        ``from_tier`` and ``ladder_version``. The design makes this 0; a full scan of the
        decision rows, so run it from health checks, not per request.
        """
        with self._engine.connect() as conn:
            return int(conn.execute(_DUPLICATES).scalar_one())

    def verify(
        self, dispute_id: UUID | None = None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> list[tuple[UUID, int]]:
        """Check hash chains; return ``(dispute_id, first_bad_seq)`` per broken chain.

        ``progress`` (optional, ``escalation.service_layer.progress.Progress``) is called as
        ``progress("chains", chains checked, None)`` every 1,000 chains and at the end.

        Walks each chain (one dispute, or all with ``dispute_id`` None, streamed) with
        :func:`escalation.domain.audit_hash.verify_chain`, and compares each projection
        head (``last_seq``/``last_hash``), and each ladder version chain's head on
        ``ladder_release``, with its chain's last row, so a removed or added tail is caught
        too. Runs in one REPEATABLE READ snapshot, alongside live writers.
        Returns an empty list when everything verifies; sorted by dispute id.
        """
        bad: dict[UUID, int] = {}
        stmt = sa.select(_A).order_by(_A.c.dispute_id, _A.c.seq)
        if dispute_id is not None:
            stmt = stmt.where(_A.c.dispute_id == dispute_id)
        repeatable = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with repeatable as conn, conn.begin():
            rows = conn.execute(stmt.execution_options(yield_per=1000)).mappings()
            chains = 0
            for key, chain in groupby(rows, key=lambda r: r["dispute_id"]):
                first_bad = verify_chain(dict(r) for r in chain)
                if first_bad is not None:
                    bad[key] = first_bad
                chains += 1
                if progress is not None and chains % 1000 == 0:
                    progress("chains", chains, None)
            if progress is not None:
                progress("chains", chains, chains)
            for d, last_seq, ledger_seq in conn.execute(_HEAD_MISMATCH, {"id": dispute_id}):
                seq = _head_bad_seq(int(last_seq), None if ledger_seq is None else int(ledger_seq))
                bad[d] = min(seq, bad.get(d, seq))
            for d, last_seq, ledger_seq in conn.execute(_LADDER_HEAD_MISMATCH,
                                                        {"id": dispute_id}):
                seq = _head_bad_seq(int(last_seq), None if ledger_seq is None else int(ledger_seq))
                bad[d] = min(seq, bad.get(d, seq))
        return sorted(bad.items(), key=lambda item: str(item[0]))


def _head_bad_seq(state_seq: int, ledger_seq: int | None) -> int:
    """First seq in doubt when the projection head and the chain's last row disagree."""
    if ledger_seq is None:
        return 1
    if ledger_seq == state_seq:
        return state_seq  # same seq, different hash: the last row was rewritten
    return min(ledger_seq, state_seq) + 1

"""Read side of the audit store: state lookups, trails, reconcile scans, health and verify.

Mixed into :class:`escalation.adapters.audit_store.PostgresAuditStore`; nothing here writes.
The row mapping (``escalation_from_state``, ``ledger_row``) is that module's; since it imports
this one (the mixin), the methods here import the mapping when they run, not at load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import groupby
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.ledger_verify import (
    LedgerWalk,
    head_bad_seq,
    partition_bounds,
    verify_all_chains,
)
from escalation.adapters.tables import STATUSES, escalation_audit, escalation_state
from escalation.domain.audit_hash import verify_chain
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.ports import LedgerCheck, LedgerRow

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


# After the partition walk (``adapters.ledger_verify``): the projection rows in the walked
# partitions' ranges (:covered, a tstzmultirange) were compared there; the rows outside them
# (a month removed by retention, a partition with no range) are compared here by dispute id.
_HEAD_MISMATCH_OUTSIDE = sa.text(str(_HEAD_MISMATCH).replace(
    "WHERE (CAST(:id AS uuid) IS NULL OR s.dispute_id = CAST(:id AS uuid))",
    "WHERE (CAST(:covered AS tstzmultirange) IS NULL"
    " OR NOT s.created_at <@ CAST(:covered AS tstzmultirange))"))
_COVERED = sa.text(
    "SELECT count(*) FROM escalation_state WHERE created_at <@ CAST(:covered AS tstzmultirange)")
# Projection rows of one partition's range without a chain in that partition.
_WITHOUT_CHAIN = sa.text(
    """
    SELECT s.dispute_id, s.last_seq
      FROM escalation_state AS s
     WHERE s.created_at >= CAST(:lo AS timestamptz) AND s.created_at < CAST(:hi AS timestamptz)
       AND NOT EXISTS (
           SELECT 1 FROM escalation_audit AS a
            WHERE a.dispute_id = s.dispute_id
              AND a.chain_created_at >= CAST(:lo AS timestamptz)
              AND a.chain_created_at < CAST(:hi AS timestamptz))
       AND NOT EXISTS (
           SELECT 1 FROM audit_retention AS r
            WHERE s.created_at >= r.range_from AND s.created_at < r.range_to)
    """
)
_PARTITION_BOUNDS = sa.text(
    "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
    " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'escalation_audit'::regclass")


def head_mismatches(
    conn: sa.Connection, walk: LedgerWalk,
) -> Iterator[tuple[UUID, int, int | None]]:
    """``(dispute_id, projection last_seq, chain's last seq or None)`` of the projection
    heads the partition walk did not compare (``adapters.ledger_verify``, module doc): the
    rows outside the walked ranges, compared by dispute id; and, when the walk met fewer
    projection rows than its ranges hold, the rows whose chain is not in their month's
    partition (a chain removed whole, or placed in another month than its projection's
    ``created_at``), whose ledger seq is None. In ``conn``'s snapshot (the walk's)."""
    yield from conn.execute(_HEAD_MISMATCH_OUTSIDE, {"covered": walk.covered})
    if walk.covered is None:
        return
    if int(conn.execute(_COVERED, {"covered": walk.covered}).scalar_one()) == walk.heads:
        return
    for (bound,) in conn.execute(_PARTITION_BOUNDS).all():
        bounds = partition_bounds(bound)
        if bounds is not None:
            for d, last_seq in conn.execute(_WITHOUT_CHAIN, {"lo": bounds[0], "hi": bounds[1]}):
                yield d, last_seq, None


class AuditQueries:
    """Read-only queries over the ledger and projection (needs ``self._engine``)."""

    _engine: sa.Engine
    parallel_verify: bool = True
    """``verify`` of every chain walks the partitions in parallel (``adapters.ledger_verify``);
    False: one ordered scan in this process (the reference the parallel walk is tested
    against)."""

    def get(self, dispute_id: UUID) -> tuple[Escalation, Status] | None:
        """The recorded state of one escalation and its status, or None if never enqueued."""
        from escalation.adapters.audit_store import escalation_from_state  # it imports this module

        with self._engine.connect() as conn:
            row = conn.execute(sa.select(_S).where(_S.c.dispute_id == dispute_id)).mappings()
            first = row.first()
        if first is None:
            return None
        esc = escalation_from_state(first)
        return esc, esc.status

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        """Recorded states by dispute id (ids with no escalation are absent)."""
        from escalation.adapters.audit_store import escalation_from_state  # it imports this module

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
        from escalation.adapters.audit_store import ledger_row  # it imports this module

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
        from escalation.adapters.audit_store import ledger_row  # it imports this module

        if not ranges:
            return {}
        ids = [r[0] for r in ranges]
        after = [r[1] for r in ranges]
        upto = [r[2] for r in ranges]
        sql = sa.text(
            "SELECT DISTINCT ON (a.dispute_id) a.*, s.source FROM escalation_audit a "
            "JOIN unnest(CAST(:ids AS uuid[]), CAST(:after AS bigint[]), "
            "CAST(:upto AS bigint[])) AS r(dispute_id, after_seq, upto_seq) "
            "ON a.dispute_id = r.dispute_id AND a.seq > r.after_seq AND a.seq <= r.upto_seq "
            "LEFT JOIN escalation_state s ON s.dispute_id = a.dispute_id "
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
        from escalation.adapters.audit_store import escalation_from_state  # it imports this module

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

        ``progress`` (optional, ``escalation.service_layer.progress_report.Progress``) is called as
        ``progress("chains", chains checked, None)`` every 1,000 chains (every partition, for
        all) and at the end. Every chain (``dispute_id`` None) is walked partition by
        partition in parallel processes sharing this snapshot (:meth:`check_ledger`).

        Every chain is checked for its evidence only (no projection row compared: the broken
        chains are the same). Walks each chain (one dispute, or all with ``dispute_id`` None,
        streamed) with
        :func:`escalation.domain.audit_hash.verify_chain`, and compares each projection
        head (``last_seq``/``last_hash``), and each ladder version chain's head on
        ``ladder_release``, with its chain's last row, so a removed or added tail is caught
        too. Runs in one REPEATABLE READ snapshot, alongside live writers.
        Returns an empty list when everything verifies; sorted by dispute id.
        """
        if dispute_id is None and self.parallel_verify:
            return self.check_ledger(progress, projection=False).broken
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
            heads = conn.execute(_HEAD_MISMATCH, {"id": dispute_id}).all()
            _add_heads(bad, heads)
            _add_heads(bad, conn.execute(_LADDER_HEAD_MISMATCH, {"id": dispute_id}))
        return sorted(bad.items(), key=lambda item: str(item[0]))

    def check_ledger(
        self, progress: Callable[[str, int, int | None], None] | None = None,
        projection: bool = True,
    ) -> LedgerCheck:
        """The whole ledger in one snapshot and one read: every partition walked by its own
        process (``adapters.ledger_verify``: links and projection heads, and with
        ``projection`` projection rows), then the projection heads the walk could not
        compare (:func:`head_mismatches`) and the ladder version chains' heads. ``progress``
        as for :meth:`verify`."""
        bad: dict[UUID, int] = {}
        repeatable = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with repeatable as conn, conn.begin():
            walk = verify_all_chains(conn, self._engine, progress=progress,
                                     projection=projection)
            bad.update(walk.broken)
            _add_heads(bad, head_mismatches(conn, walk))
            _add_heads(bad, conn.execute(_LADDER_HEAD_MISMATCH, {"id": None}))
        return LedgerCheck(sorted(bad.items(), key=lambda item: str(item[0])),
                           walk.mismatches, walk.chains, walk.rows, walk.projection)


def _add_heads(bad: dict[UUID, int], heads: Iterable[Sequence[Any]]) -> None:
    """Merge ``(dispute_id, projection last_seq, ledger last seq or None)`` head mismatches
    into ``bad`` (the first seq in doubt per chain)."""
    for d, last_seq, ledger_seq in heads:
        seq = head_bad_seq(int(last_seq), None if ledger_seq is None else int(ledger_seq))
        bad[d] = min(seq, bad.get(d, seq))

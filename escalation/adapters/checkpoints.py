"""Audit checkpoints in PostgreSQL (implements ``escalation.ports.CheckpointStore``).

Rows go to ``audit_checkpoint`` / ``audit_checkpoint_head`` (append-only tables). What a
checkpoint is and how it is verified: ``service_layer.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.partitions import (
    SEAL_LOCK_KEY,
    ledger_tables,
    retained_from,
    retention_records,
)
from escalation.adapters.projection_scan import projection_differences, render
from escalation.adapters.tables import audit_checkpoint, audit_checkpoint_head
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root, retention_hash
from escalation.ports import (
    Checkpoint,
    CheckpointSignature,
    CheckpointSnapshot,
    RetentionRecord,
    SealedHead,
)

GENESIS = bytes(32)
_COUNTS = sa.text(
    "SELECT count(DISTINCT dispute_id), count(*) FROM escalation_audit"
    " WHERE CAST(:id AS uuid) IS NULL OR dispute_id = CAST(:id AS uuid)"
)
_C = audit_checkpoint
_H = audit_checkpoint_head

_HEADS = sa.text(
    """
    SELECT DISTINCT ON (dispute_id) dispute_id, seq, row_hash, chain_created_at
      FROM escalation_audit
     ORDER BY dispute_id, seq DESC
    """
)


def _sort_heads(rows: Sequence[Any]) -> list[tuple[UUID, int, bytes, datetime]]:
    heads = [(r[0], int(r[1]), bytes(r[2]), r[3]) for r in rows]
    heads.sort(key=lambda h: h[0].bytes)
    return heads


_SEALED = sa.text(
    """
    SELECT h.dispute_id, h.last_seq, h.last_hash, h.chain_created_at, a.row_hash
      FROM audit_checkpoint_head AS h
      LEFT JOIN escalation_audit AS a
        ON a.dispute_id = h.dispute_id AND a.seq = h.last_seq
       AND a.chain_created_at = h.chain_created_at
     WHERE h.checkpoint_id = :cp
     ORDER BY h.dispute_id
    """
)


class PostgresCheckpoints:
    """The ``CheckpointStore`` port on PostgreSQL.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def seal(
        self, actor: str, before_seal: Callable[[CheckpointSnapshot], None] | None = None,
        sign: Callable[[Checkpoint], CheckpointSignature] | None = None,
    ) -> Checkpoint:
        """Seal the current chain heads into a new checkpoint (one transaction).

        Runs in a REPEATABLE READ snapshot under a transaction-level advisory lock (one
        sealer at a time; ids 1, 2, 3, ...). ``before_seal`` reads that same snapshot first
        (the service layer verifies the ledger against the last signed checkpoint there); an
        exception from it rolls back and seals nothing. The checkpoint covers the retention
        rows its snapshot sees (``merkle.retention_hash``, their keys in
        ``retention_covered``) and is stored with ``sign``'s signature of its digest.
        Concurrent appends are fine: the checkpoint covers the snapshot.
        """
        conn_ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with conn_ctx as conn, conn.begin():
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SEAL_LOCK_KEY})
            if before_seal is not None:
                before_seal(_Snapshot(conn))
            last = conn.execute(
                sa.select(_C.c.checkpoint_id, _C.c.checkpoint_hash)
                .order_by(_C.c.checkpoint_id.desc())
                .limit(1)
            ).first()
            new_id = 1 if last is None else int(last[0]) + 1
            prev = GENESIS if last is None else bytes(last[1])
            heads = _sort_heads(conn.execute(_HEADS).all())
            root = merkle_root([head_leaf(d, s, h) for d, s, h, _ in heads])
            digest = checkpoint_hash(new_id, len(heads), root, prev)
            kept = retention_records(conn)
            created = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            cp = Checkpoint(new_id, created.astimezone(UTC), len(heads), root, prev, digest,
                            len(kept), retention_hash([(r.partition_name, r.action, r.range_from,
                                                       r.range_to, r.row_count) for r in kept]),
                            retention_covered=tuple(r.key for r in kept))
            if sign is not None:
                cp = replace(cp, signature=sign(cp))
            conn.execute(
                sa.insert(_C).values(
                    checkpoint_id=new_id,
                    created_at=cp.created_at,
                    head_count=len(heads),
                    heads_root=root,
                    prev_checkpoint_hash=prev,
                    checkpoint_hash=digest,
                    actor=actor,
                    retention_count=cp.retention_count,
                    retention_hash=cp.retention_hash,
                    retention_covered=list(cp.retention_covered or ()),
                    signature=None if cp.signature is None else cp.signature.value,
                    signing_key=None if cp.signature is None else cp.signature.public_key,
                )
            )
            for start in range(0, len(heads), 5000):
                chunk = heads[start : start + 5000]
                conn.execute(
                    sa.insert(_H),
                    [
                        {
                            "checkpoint_id": new_id,
                            "dispute_id": d,
                            "last_seq": s,
                            "last_hash": h,
                            "chain_created_at": c,
                        }
                        for d, s, h, c in chunk
                    ],
                )
        return cp

    def broken_chains(
        self, dispute_id: UUID | None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> list[tuple[UUID, int]]:
        """``PostgresAuditStore.verify``: recomputed chains and projection heads."""
        return PostgresAuditStore(self._engine).verify(dispute_id, progress=progress)

    def retained_from(self) -> datetime | None:
        """See ``adapters.partitions.retained_from``."""
        return retained_from(self._engine)

    @contextmanager
    def snapshot(self) -> Iterator[_Snapshot]:
        """A REPEATABLE READ transaction over the checkpoint tables and the ledger."""
        conn_ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with conn_ctx as conn, conn.begin():
            yield _Snapshot(conn)


class _Snapshot:
    """``CheckpointSnapshot`` on one connection inside its transaction."""

    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint, by id."""
        return _load_checkpoints(self._conn)

    def sealed_heads(self, checkpoint_id: int) -> list[SealedHead]:
        """Sealed heads of ``checkpoint_id`` with the current ledger hash at their seq."""
        heads = self._conn.execute(_SEALED, {"cp": checkpoint_id}).all()
        return [SealedHead(d, int(s), bytes(h), c, None if cur is None else bytes(cur))
                for d, s, h, c, cur in heads]

    def checkpoint(self, checkpoint_id: object) -> Checkpoint | None:
        """One checkpoint by id, or None."""
        return next((cp for cp in _load_checkpoints(self._conn)
                     if cp.checkpoint_id == checkpoint_id), None)

    def retention_records(self) -> list[RetentionRecord]:
        """Every ``audit_retention`` row."""
        return retention_records(self._conn)

    def ledger_tables(self) -> dict[str, bool]:
        """Tables of the partition schema -> attached to the ledger."""
        return ledger_tables(self._conn)

    def database_now(self) -> datetime:
        """The database clock (``clock_timestamp()``, aware UTC)."""
        now: datetime = self._conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        return now.astimezone(UTC)

    def ledger_counts(self, dispute_id: UUID | None) -> tuple[int, int]:
        """``(disputes, rows)`` of the ledger (one dispute or all)."""
        disputes, rows = self._conn.execute(_COUNTS, {"id": dispute_id}).one()
        return int(disputes), int(rows)

    def projection_mismatches(self, dispute_id: UUID | None) -> list[tuple[UUID, str]]:
        """Projection rows that disagree with their ledger, each with its differing columns
        and both values (``adapters.projection_scan``: streamed in this snapshot)."""
        return [(d, render(found)) for d, found in projection_differences(self._conn, dispute_id)]


def _load_checkpoints(conn: sa.Connection) -> list[Checkpoint]:
    rows = conn.execute(sa.select(_C).order_by(_C.c.checkpoint_id)).mappings()
    return [
        Checkpoint(
            int(r["checkpoint_id"]),
            r["created_at"].astimezone(UTC),
            int(r["head_count"]),
            bytes(r["heads_root"]),
            bytes(r["prev_checkpoint_hash"]),
            bytes(r["checkpoint_hash"]),
            None if r["retention_count"] is None else int(r["retention_count"]),
            None if r["retention_hash"] is None else bytes(r["retention_hash"]),
            None if r["signature"] is None
            else CheckpointSignature(bytes(r["signing_key"]), bytes(r["signature"])),
            None if r["retention_covered"] is None else tuple(r["retention_covered"]),
        )
        for r in rows
    ]

"""Audit checkpoints in PostgreSQL (implements ``escalation.ports.CheckpointStore``).

Rows go to ``audit_checkpoint`` / ``audit_checkpoint_head`` (append-only tables): a
checkpoint stores only the heads changed since the checkpoint before it (the first, and every
one sealed before migration 0020, stores all of them); the heads checkpoint k seals are read
back as, per chain, the newest stored at a checkpoint <= k (``_SEALED_AT``). What a
checkpoint is and how it is verified: ``service_layer.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from itertools import groupby
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.ledger_verify import decoded, select_list
from escalation.adapters.partitions import (
    SEAL_LOCK_KEY,
    ledger_tables,
    retained_from,
    retention_records,
)
from escalation.adapters.projection_scan import projection_differences, render, scan_of
from escalation.adapters.tables import audit_checkpoint, audit_checkpoint_head
from escalation.domain.audit_hash import verify_chain
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root, retention_hash
from escalation.ports import (
    ChangedChains,
    Checkpoint,
    CheckpointSignature,
    CheckpointSnapshot,
    LedgerCheck,
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

_LEDGER_TAILS = """
    SELECT DISTINCT ON (dispute_id) dispute_id, seq AS last_seq, row_hash AS last_hash,
           chain_created_at
      FROM escalation_audit
     ORDER BY dispute_id, seq DESC
"""
_HEADS = sa.text(_LEDGER_TAILS)


def _sort_heads(rows: Sequence[Any]) -> list[tuple[UUID, int, bytes, datetime]]:
    heads = [(r[0], int(r[1]), bytes(r[2]), r[3]) for r in rows]
    heads.sort(key=lambda h: h[0].bytes)
    return heads


# The heads checkpoint :cp seals: per chain, the row of the newest checkpoint <= :cp, from
# the newest complete checkpoint <= :cp on (a complete one stores every head; a later one
# only the heads changed since the one before it, ``removed`` marking a chain no longer
# sealed). One pass over ``ix_audit_checkpoint_head_chain`` or the primary key's range;
# nothing for a checkpoint that does not exist.
_SEALED_AT = """
    SELECT dispute_id, last_seq, last_hash, chain_created_at FROM (
        SELECT DISTINCT ON (s.dispute_id) s.dispute_id, s.last_seq, s.last_hash,
               s.chain_created_at, s.removed
          FROM audit_checkpoint_head AS s
         WHERE s.checkpoint_id <= CAST(:cp AS bigint)
           AND s.checkpoint_id >= (
               SELECT max(b.checkpoint_id) FROM audit_checkpoint AS b
                WHERE b.checkpoint_id <= CAST(:cp AS bigint) AND b.heads_complete)
           AND EXISTS (SELECT 1 FROM audit_checkpoint AS k
                        WHERE k.checkpoint_id = CAST(:cp AS bigint))
         ORDER BY s.dispute_id, s.checkpoint_id DESC) AS latest
     WHERE NOT latest.removed
"""
_STORED = sa.text(_SEALED_AT)
_SEALED = sa.text(
    f"""
    SELECT h.dispute_id, h.last_seq, h.last_hash, h.chain_created_at, a.row_hash
      FROM ({_SEALED_AT}) AS h
      LEFT JOIN escalation_audit AS a
        ON a.dispute_id = h.dispute_id AND a.seq = h.last_seq
       AND a.chain_created_at = h.chain_created_at
     ORDER BY h.dispute_id
    """
)


# The current head of every chain: a dispute's on its projection row, a ladder version
# chain's on ladder_release (ADR 0012).
_CURRENT = """
    SELECT dispute_id, last_seq, last_hash, created_at AS chain_created_at
      FROM escalation_state
    UNION ALL
    SELECT * FROM (
        SELECT DISTINCT ON (chain_id) chain_id, last_seq, last_hash, chain_created_at
          FROM ladder_release WHERE chain_id IS NOT NULL
         ORDER BY chain_id, last_seq DESC) AS ladder_heads
"""
# Chains whose current head differs from the head checkpoint :cp sealed (or one side is
# missing): what changed since that checkpoint.
_CHANGED_IDS = f"""
    SELECT COALESCE(c.dispute_id, h.dispute_id) AS dispute_id,
           c.last_seq AS cur_seq, c.last_hash AS cur_hash,
           h.last_seq AS sealed_seq, h.last_hash AS sealed_hash,
           COALESCE(c.chain_created_at, h.chain_created_at) AS chain_created_at
      FROM ({_CURRENT}) AS c
      FULL JOIN ({_SEALED_AT}) AS h
        ON h.dispute_id = c.dispute_id
     WHERE c.dispute_id IS NULL OR h.dispute_id IS NULL
        OR c.last_seq <> h.last_seq OR c.last_hash <> h.last_hash
"""
_CHANGED = sa.text(_CHANGED_IDS + " ORDER BY 1")
# The changed chains' ledger rows, the chains given as arrays (a few, found first by
# ``_CHANGED``: joined by the ledger's indexes, where a join with ``_CHANGED_IDS`` itself,
# whose size the planner cannot estimate, would hash the whole ledger).
_CHANGED_ROWS = sa.text(f"""
    SELECT ch.dispute_id AS chain,
           EXISTS (SELECT 1 FROM audit_retention AS r
                    WHERE ch.chain_created_at >= r.range_from
                      AND ch.chain_created_at < r.range_to) AS retained,
           {select_list("a.")}
      FROM unnest(CAST(:ids AS uuid[]), CAST(:created AS timestamptz[]))
           AS ch(dispute_id, chain_created_at)
      LEFT JOIN escalation_audit AS a
        ON a.dispute_id = ch.dispute_id AND a.chain_created_at = ch.chain_created_at
     ORDER BY ch.dispute_id, a.seq
""")
_CHANGED_SCAN = scan_of("SELECT unnest(CAST(:ids AS uuid[])) AS dispute_id")
_CURRENT_HEADS = sa.text(_CURRENT)


def _delta(source: str) -> sa.TextClause:
    """Store, for checkpoint :new, the heads of ``source`` (a query of ``dispute_id,
    last_seq, last_hash, chain_created_at``) that differ from those checkpoint :cp seals,
    and a ``removed`` row (repeating the sealed head) for each chain :cp seals that
    ``source`` lacks: compared in the database, one statement."""
    return sa.text(f"""
        INSERT INTO audit_checkpoint_head
            (checkpoint_id, dispute_id, last_seq, last_hash, chain_created_at, removed)
        SELECT CAST(:new AS bigint), COALESCE(c.dispute_id, h.dispute_id),
               COALESCE(c.last_seq, h.last_seq), COALESCE(c.last_hash, h.last_hash),
               COALESCE(c.chain_created_at, h.chain_created_at), c.dispute_id IS NULL
          FROM ({source}) AS c
          FULL JOIN ({_SEALED_AT}) AS h ON h.dispute_id = c.dispute_id
         WHERE c.dispute_id IS NULL OR h.dispute_id IS NULL
            OR c.last_seq <> h.last_seq OR c.last_hash <> h.last_hash
            OR c.chain_created_at <> h.chain_created_at
    """)


_DELTA_CURRENT = _delta(_CURRENT)
_DELTA_TAILS = _delta(_LEDGER_TAILS)


def _check_changed(head: Any, group: list[Any], out: ChangedChains) -> None:
    """One changed chain (its row of ``_CHANGED``, its rows of ``_CHANGED_ROWS``): recompute
    it, compare its tail with its current head and its row at the sealed seq with the sealed
    hash."""
    chain: UUID = head.dispute_id
    rows = [r for r in group if r.seq is not None]
    if not rows:
        if not group[0].retained:  # no ledger rows left, and no retention row covers it
            if head.cur_seq is not None:
                out.broken.append((chain, 1))
            if head.sealed_seq is not None:
                out.sealed_mismatches.append((chain, int(head.sealed_seq)))
        return
    fields = [decoded(r[2:]) for r in rows]
    bad = verify_chain(fields)
    tail_seq, tail_hash = int(rows[-1].seq), bytes(rows[-1].row_hash)
    if head.cur_seq is None:
        bad = 1 if bad is None else bad  # a sealed chain with no current head any more
    elif (int(head.cur_seq), bytes(head.cur_hash)) != (tail_seq, tail_hash):
        cur = int(head.cur_seq)
        at = cur if cur == tail_seq else min(cur, tail_seq) + 1
        bad = at if bad is None else min(bad, at)
    if bad is not None:
        out.broken.append((chain, bad))
    if head.sealed_seq is not None:
        sealed = next((r for r in rows if int(r.seq) == int(head.sealed_seq)), None)
        if sealed is None or bytes(sealed.row_hash) != bytes(head.sealed_hash):
            out.sealed_mismatches.append((chain, int(head.sealed_seq)))


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

        The root covers every head (read and hashed here, linear in the chains). A first
        checkpoint stores every head; a later one only the heads that differ from those
        the checkpoint before it seals (``removed`` rows for chains that left), found by one
        comparison in the database (ADR 0035).
        """
        conn_ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with conn_ctx as conn, conn.begin():
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SEAL_LOCK_KEY})
            snap = _Snapshot(conn)
            if before_seal is not None:
                before_seal(snap)
            last = conn.execute(
                sa.select(_C.c.checkpoint_id, _C.c.checkpoint_hash)
                .order_by(_C.c.checkpoint_id.desc())
                .limit(1)
            ).first()
            new_id = 1 if last is None else int(last[0]) + 1
            prev = GENESIS if last is None else bytes(last[1])
            heads = _sort_heads(conn.execute(
                _CURRENT_HEADS if snap.current_heads else _HEADS).all())
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
                    heads_complete=last is None,
                )
            )
            if last is None:
                _insert_heads(conn, new_id, heads)
            else:  # only what changed since the checkpoint before
                conn.execute(_DELTA_CURRENT if snap.current_heads else _DELTA_TAILS,
                             {"new": new_id, "cp": int(last[0])})
        return cp

    def broken_chains(
        self, dispute_id: UUID | None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> list[tuple[UUID, int]]:
        """``PostgresAuditStore.verify``: recomputed chains and projection heads."""
        return PostgresAuditStore(self._engine).verify(dispute_id, progress=progress)

    def check_ledger(
        self, progress: Callable[[str, int, int | None], None] | None = None,
        projection: bool = True,
    ) -> LedgerCheck:
        """``PostgresAuditStore.check_ledger``: the whole ledger, one read, in parallel."""
        return PostgresAuditStore(self._engine).check_ledger(progress, projection)

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
        self.current_heads = False

    def changed_since(self, checkpoint_id: int) -> ChangedChains:
        """Every chain changed since ``checkpoint_id`` recomputed (``CheckpointSnapshot``):
        the changed chains found in the database (``_CHANGED``), one ordered stream of their
        rows, then their projection rows compared with their ledgers."""
        out = ChangedChains([], [], [], 0, 0)
        heads = {h.dispute_id: h for h in self._conn.execute(_CHANGED, {"cp": checkpoint_id})}
        params = {"ids": list(heads), "created": [h.chain_created_at for h in heads.values()]}
        stream = self._conn.execute(_CHANGED_ROWS.execution_options(yield_per=5000), params)
        rows = 0
        for chain, group in groupby(stream, key=lambda r: r.chain):
            found = list(group)
            rows += sum(1 for r in found if r.seq is not None)
            _check_changed(heads[chain], found, out)
        mismatches = [(d, render(found)) for d, found in projection_differences(
            self._conn, None, _CHANGED_SCAN, {"ids": params["ids"]})]
        chains = len(heads)
        return ChangedChains(sorted(out.broken, key=lambda i: str(i[0])),
                             sorted(out.sealed_mismatches, key=lambda i: str(i[0])),
                             mismatches, chains, rows)

    def seal_current_heads(self) -> None:
        """The seal takes the current heads (``_CURRENT``) instead of the ledger's tails."""
        self.current_heads = True

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint, by id."""
        return _load_checkpoints(self._conn)

    def sealed_heads(self, checkpoint_id: int) -> list[SealedHead]:
        """Sealed heads of ``checkpoint_id`` with the current ledger hash at their seq."""
        heads = self._conn.execute(_SEALED, {"cp": checkpoint_id}).all()
        return [SealedHead(d, int(s), bytes(h), c, None if cur is None else bytes(cur))
                for d, s, h, c, cur in heads]

    def stored_heads(self, checkpoint_id: int) -> list[SealedHead]:
        """The heads stored for ``checkpoint_id`` (the ledger is not read)."""
        heads = self._conn.execute(_STORED, {"cp": checkpoint_id}).all()
        return [SealedHead(d, int(s), bytes(h), c, None) for d, s, h, c in heads]

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


def _insert_heads(conn: sa.Connection, checkpoint_id: int,
                  heads: Sequence[tuple[UUID, int, bytes, datetime]]) -> None:
    """Store every head of a complete checkpoint (5,000 rows a statement)."""
    for start in range(0, len(heads), 5000):
        conn.execute(sa.insert(_H), [
            {"checkpoint_id": checkpoint_id, "dispute_id": d, "last_seq": s, "last_hash": h,
             "chain_created_at": c}
            for d, s, h, c in heads[start : start + 5000]])


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

"""Audit checkpoints and the full verification behind ``escalation audit verify``.

A checkpoint seals the current chain heads of every dispute:

* heads = for each dispute, its last ledger row ``(dispute_id, seq, row_hash)``, sorted by
  dispute id (16-byte big-endian UUID order, which is PostgreSQL's uuid order);
* ``heads_root`` = RFC 6962 Merkle root over :func:`escalation.domain.merkle.head_leaf`;
* ``checkpoint_hash`` = :func:`escalation.domain.merkle.checkpoint_hash` over id, head
  count, root and the previous checkpoint's hash (32 zero bytes for the first).

Rows go to ``audit_checkpoint`` / ``audit_checkpoint_head`` (append-only tables) and a JSON
digest (:func:`digest_of`) can be written to a file kept elsewhere (WORM storage, a ticket):
whoever holds the digest can later prove the database still holds the same heads.

Why: the per-dispute hash chain alone cannot catch a superuser who edits a row and then
recomputes every later hash of that chain plus the projection head. The checkpoint's head
for that dispute no longer matches the rewritten row at the same seq, so :func:`verify`
reports it (tech.md section 1.3).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.partitions import retained_from
from escalation.adapters.tables import audit_checkpoint, audit_checkpoint_head
from escalation.domain.errors import EscalationError, InvalidInput
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root

DIGEST_FORMAT = "escalation-checkpoint-digest/1"
GENESIS = bytes(32)
_LOCK_KEY = 7_305_114_211_003  # advisory lock: one sealer at a time
_C = audit_checkpoint
_H = audit_checkpoint_head

_HEADS = sa.text(
    """
    SELECT DISTINCT ON (dispute_id) dispute_id, seq, row_hash, chain_created_at
      FROM escalation_audit
     ORDER BY dispute_id, seq DESC
    """
)


# The projection (escalation_state) against the ledger: every ledger row carries the state
# *after* its event (ladder, version, materiality, ids, regulatory deadline), so the last row
# of a chain must agree with its projection row; a terminal / cancelled status needs its
# TERMINAL / CANCELLED row and vice versa.
_PROJECTION = sa.text(
    """
    SELECT s.dispute_id,
           concat_ws(', ',
             CASE WHEN a.ladder IS DISTINCT FROM s.ladder THEN 'ladder' END,
             CASE WHEN a.ladder_version IS DISTINCT FROM s.ladder_version
                  THEN 'ladder_version' END,
             CASE WHEN a.materiality IS DISTINCT FROM s.materiality THEN 'materiality' END,
             CASE WHEN a.trace_id IS DISTINCT FROM s.trace_id THEN 'trace_id' END,
             CASE WHEN a.source_hash IS DISTINCT FROM s.source_hash THEN 'source_hash' END,
             CASE WHEN a.external_id IS DISTINCT FROM s.external_id THEN 'external_id' END,
             CASE WHEN a.regulatory_deadline IS DISTINCT FROM s.regulatory_deadline
                  THEN 'regulatory_deadline' END,
             CASE WHEN (s.status = 'terminal') <> coalesce(t.terminal, false)
                  THEN 'status terminal' END,
             CASE WHEN (s.status = 'cancelled') <> coalesce(t.cancelled, false)
                  THEN 'status cancelled' END) AS fields
      FROM escalation_state AS s
      JOIN LATERAL (
           SELECT * FROM escalation_audit
            WHERE dispute_id = s.dispute_id ORDER BY seq DESC LIMIT 1) AS a ON true
      LEFT JOIN LATERAL (
           SELECT bool_or(event = 'TERMINAL') AS terminal,
                  bool_or(event = 'CANCELLED') AS cancelled
             FROM escalation_audit WHERE dispute_id = s.dispute_id) AS t ON true
     WHERE (CAST(:id AS uuid) IS NULL OR s.dispute_id = CAST(:id AS uuid))
    """
)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One sealed checkpoint (hashes as bytes; ``created_at`` aware UTC)."""

    checkpoint_id: int
    created_at: datetime
    head_count: int
    heads_root: bytes
    prev_checkpoint_hash: bytes
    checkpoint_hash: bytes


@dataclass(slots=True)
class VerifyReport:
    """Everything :func:`verify` found; ``ok`` when nothing is broken.

    ``broken_chains``: ``(dispute_id, first_bad_seq)`` from the hash chains and projection
    heads. ``projection_mismatches``: ``(dispute_id, fields)`` whose projection row
    (``escalation_state``) disagrees with its ledger (the last row's state-after columns,
    terminal / cancelled status). ``checkpoint_mismatches``: ``(dispute_id, seq)`` whose
    row no longer has the hash sealed in the last checkpoint (or is gone).
    ``checkpoint_errors``: the checkpoint chain itself or the digest file disagree (text).
    """

    broken_chains: list[tuple[UUID, int]] = field(default_factory=list)
    projection_mismatches: list[tuple[UUID, str]] = field(default_factory=list)
    checkpoint_mismatches: list[tuple[UUID, int]] = field(default_factory=list)
    checkpoint_errors: list[str] = field(default_factory=list)
    checkpoint_id: int | None = None

    @property
    def ok(self) -> bool:
        """True when no chain, head or checkpoint problem was found."""
        return not (self.broken_chains or self.projection_mismatches
                    or self.checkpoint_mismatches or self.checkpoint_errors)


def _sort_heads(rows: Sequence[Any]) -> list[tuple[UUID, int, bytes, datetime]]:
    heads = [(r[0], int(r[1]), bytes(r[2]), r[3]) for r in rows]
    heads.sort(key=lambda h: h[0].bytes)
    return heads


class SealRefused(EscalationError):
    """The ledger does not verify against the previous checkpoint: nothing is sealed."""


def create_checkpoint(engine: sa.Engine, actor: str) -> Checkpoint:
    """Seal the current chain heads into a new checkpoint (one transaction).

    Before sealing, every hash chain and projection head is recomputed and the previous
    checkpoint (its own hash chain and every head it sealed) is compared with the ledger, in
    the same REPEATABLE READ snapshot the new heads are read from, under an advisory lock
    (one sealer at a time; ids are 1, 2, 3, ...). A forged chain -- even one recomputed
    end to end with its projection head -- no longer matches the head the previous
    checkpoint sealed, so it is never sealed as if it were genuine. Concurrent appends are
    fine: the checkpoint covers the snapshot.

    Returns:
        The new :class:`Checkpoint`.

    Raises:
        SealRefused: a broken chain or projection head, a head that differs from the previous
            checkpoint, or a broken checkpoint chain (the message counts each kind and names
            the first few).
    """
    conn_ctx = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    with conn_ctx as conn, conn.begin():
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        check = VerifyReport(broken_chains=PostgresAuditStore(engine).verify(None))
        check.projection_mismatches = [
            (d, str(f)) for d, f in conn.execute(_PROJECTION, {"id": None}) if f]
        previous = _check_checkpoint_chain(conn, check)
        if previous is not None:
            _check_heads(conn, previous, check, None, retained_from(engine))
        if not check.ok:
            raise SealRefused(
                "refusing to seal a checkpoint: "
                f"{len(check.broken_chains)} broken chain(s) "
                f"{[f'{d}@{q}' for d, q in check.broken_chains[:3]]}, "
                f"{len(check.projection_mismatches)} projection row(s) disagreeing with "
                f"the ledger {[str(d) for d, _ in check.projection_mismatches[:3]]}, "
                f"{len(check.checkpoint_mismatches)} head(s) differ from checkpoint "
                f"{previous.checkpoint_id if previous else '-'} "
                f"{[f'{d}@{q}' for d, q in check.checkpoint_mismatches[:3]]}, "
                f"{len(check.checkpoint_errors)} checkpoint error(s) "
                f"{check.checkpoint_errors[:2]}; run `escalation audit verify`")
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
        created = conn.execute(
            sa.insert(_C)
            .values(
                checkpoint_id=new_id,
                head_count=len(heads),
                heads_root=root,
                prev_checkpoint_hash=prev,
                checkpoint_hash=digest,
                actor=actor,
            )
            .returning(_C.c.created_at)
        ).scalar_one()
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
    return Checkpoint(new_id, created.astimezone(UTC), len(heads), root, prev, digest)


def digest_of(cp: Checkpoint) -> dict[str, Any]:
    """The JSON-ready digest of a checkpoint (hashes lower-case hex, time UTC ISO-8601)."""
    return {
        "format": DIGEST_FORMAT,
        "checkpoint_id": cp.checkpoint_id,
        "created_at": cp.created_at.isoformat().replace("+00:00", "Z"),
        "head_count": cp.head_count,
        "heads_root": cp.heads_root.hex(),
        "prev_checkpoint_hash": cp.prev_checkpoint_hash.hex(),
        "checkpoint_hash": cp.checkpoint_hash.hex(),
        "merkle": "RFC 6962 SHA-256; leaf = uuid(16) || seq(8, BE) || row_hash(32)",
    }


def write_digest(cp: Checkpoint, path: Path) -> None:
    """Write :func:`digest_of` as pretty JSON to ``path``."""
    path.write_text(json.dumps(digest_of(cp), indent=2, sort_keys=True) + "\n", "utf-8")


def read_digest(path: Path) -> dict[str, Any]:
    """Load a digest file. Raises InvalidInput when unreadable or of another format."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read digest {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != DIGEST_FORMAT:
        raise InvalidInput(f"{path} is not an {DIGEST_FORMAT} file")
    return data


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
        )
        for r in rows
    ]


def _check_checkpoint_chain(conn: sa.Connection, report: VerifyReport) -> Checkpoint | None:
    """Recompute every checkpoint's hash link and the last one's Merkle root."""
    cps = _load_checkpoints(conn)
    prev = GENESIS
    for i, cp in enumerate(cps, start=1):
        if cp.checkpoint_id != i:
            report.checkpoint_errors.append(f"checkpoint ids not 1..n: found {cp.checkpoint_id}")
        if cp.prev_checkpoint_hash != prev:
            report.checkpoint_errors.append(f"checkpoint {cp.checkpoint_id}: prev hash mismatch")
        expect = checkpoint_hash(cp.checkpoint_id, cp.head_count, cp.heads_root, prev)
        if expect != cp.checkpoint_hash:
            report.checkpoint_errors.append(f"checkpoint {cp.checkpoint_id}: hash mismatch")
        prev = cp.checkpoint_hash
    return cps[-1] if cps else None


def _check_heads(conn: sa.Connection, cp: Checkpoint, report: VerifyReport,
                 dispute_id: UUID | None, retained: datetime | None) -> None:
    """Compare checkpoint ``cp``'s sealed heads with the ledger rows at the same seq (and
    the stored heads with ``cp.heads_root``)."""
    heads = conn.execute(
        sa.text(
            """
            SELECT h.dispute_id, h.last_seq, h.last_hash, h.chain_created_at, a.row_hash
              FROM audit_checkpoint_head AS h
              LEFT JOIN escalation_audit AS a
                ON a.dispute_id = h.dispute_id AND a.seq = h.last_seq
               AND a.chain_created_at = h.chain_created_at
             WHERE h.checkpoint_id = :cp
             ORDER BY h.dispute_id
            """
        ),
        {"cp": cp.checkpoint_id},
    ).all()
    sealed = _sort_heads([(d, s, h, c) for d, s, h, c, _ in heads])
    root = merkle_root([head_leaf(d, s, h) for d, s, h, _ in sealed])
    if root != cp.heads_root or len(sealed) != cp.head_count:
        report.checkpoint_errors.append(
            f"checkpoint {cp.checkpoint_id}: stored heads do not give its Merkle root"
        )
    for d, seq, sealed_hash, created, current in heads:
        if dispute_id is not None and d != dispute_id:
            continue
        if current is None and retained is not None and created < retained:
            continue  # the chain's partition was dropped by retention
        if current is None or bytes(current) != bytes(sealed_hash):
            report.checkpoint_mismatches.append((d, int(seq)))


def verify(
    engine: sa.Engine, dispute_id: UUID | None = None, digest: dict[str, Any] | None = None
) -> VerifyReport:
    """Recompute chains, compare projection heads, the checkpoint chain and its last heads.

    Args:
        dispute_id: one dispute, or None for all.
        digest: a digest loaded with :func:`read_digest` to compare with the stored
            checkpoint of the same id (an attacker who rewrote the checkpoint tables too
            is caught by the copy kept elsewhere).

    Returns:
        A :class:`VerifyReport`.
    """
    report = VerifyReport(broken_chains=PostgresAuditStore(engine).verify(dispute_id))
    retained = retained_from(engine)
    conn_ctx = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    with conn_ctx as conn, conn.begin():
        report.projection_mismatches = [
            (d, str(f)) for d, f in conn.execute(_PROJECTION, {"id": dispute_id}) if f]
        last = _check_checkpoint_chain(conn, report)
        if last is not None:
            report.checkpoint_id = last.checkpoint_id
            _check_heads(conn, last, report, dispute_id, retained)
        if digest is not None:
            held = _check_digest(conn, digest, report)
            if held is not None and (last is None or held.checkpoint_id != last.checkpoint_id):
                _check_heads(conn, held, report, dispute_id, retained)
    return report


def _check_digest(conn: sa.Connection, digest: dict[str, Any],
                  report: VerifyReport) -> Checkpoint | None:
    """Compare the digest file with the stored checkpoint of its id; return that checkpoint
    *as the file describes it* (its root from the file), so its heads are checked against
    the file's root, not against tables an attacker could have rewritten."""
    cp_id = digest.get("checkpoint_id")
    row = conn.execute(
        sa.select(_C.c.checkpoint_hash, _C.c.heads_root, _C.c.head_count).where(
            _C.c.checkpoint_id == cp_id
        )
    ).first()
    if row is None:
        report.checkpoint_errors.append(f"digest checkpoint {cp_id} is not in the database")
        return None
    if (
        bytes(row[0]).hex() != digest.get("checkpoint_hash")
        or bytes(row[1]).hex() != digest.get("heads_root")
        or int(row[2]) != digest.get("head_count")
    ):
        report.checkpoint_errors.append(
            f"checkpoint {cp_id} in the database differs from the digest file"
        )
    try:
        return Checkpoint(int(str(cp_id)), datetime.now(UTC), int(digest["head_count"]),
                          bytes.fromhex(str(digest["heads_root"])), GENESIS,
                          bytes.fromhex(str(digest["checkpoint_hash"])))
    except (KeyError, ValueError, TypeError):
        report.checkpoint_errors.append(f"digest checkpoint {cp_id}: malformed fields")
        return None

"""Audit checkpoints and the full verification behind ``escalation audit verify``.

A checkpoint seals the current chain heads of every dispute:

* heads = for each dispute, its last ledger row ``(dispute_id, seq, row_hash)``, sorted by
  dispute id (16-byte big-endian UUID order, which is PostgreSQL's uuid order);
* ``heads_root`` = RFC 6962 Merkle root over :func:`escalation.domain.merkle.head_leaf`;
* ``checkpoint_hash`` = :func:`escalation.domain.merkle.checkpoint_hash` over id, head
  count, root and the previous checkpoint's hash (32 zero bytes for the first).

Rows go to ``audit_checkpoint`` / ``audit_checkpoint_head`` (append-only tables; adapter
``adapters.checkpoints.PostgresCheckpoints``) and a JSON
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

from escalation.domain.errors import EscalationError, InvalidInput
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root
from escalation.ports import Checkpoint as Checkpoint  # noqa: PLC0414 -- re-export
from escalation.ports import CheckpointSnapshot, CheckpointStore, SealedHead
from escalation.service_layer.progress import Progress

DIGEST_FORMAT = "escalation-checkpoint-digest/1"
GENESIS = bytes(32)


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


def _sort_heads(heads: Sequence[SealedHead]) -> list[SealedHead]:
    return sorted(heads, key=lambda h: h.dispute_id.bytes)


class SealRefused(EscalationError):
    """The ledger does not verify against the previous checkpoint: nothing is sealed."""


def create_checkpoint(store: CheckpointStore, actor: str) -> Checkpoint:
    """Seal the current chain heads into a new checkpoint (see the module doc; one
    transaction in a consistent snapshot, one sealer at a time).

    Before sealing, every hash chain and projection head is recomputed, the projection is
    compared with the ledger, and the previous checkpoint (its own hash chain and every head
    it sealed) is compared with the ledger in the same snapshot the new heads are read from,
    under the sealer's lock. A forged chain -- even one recomputed end to end with its
    projection head -- no longer matches the head the previous checkpoint sealed, so it is
    never sealed as if it were genuine. Concurrent appends are fine: the checkpoint covers
    the snapshot.

    Returns:
        The new :class:`Checkpoint`.

    Raises:
        SealRefused: a broken chain or projection head, a head that differs from the previous
            checkpoint, or a broken checkpoint chain (the message counts each kind and names
            the first few).
    """
    retained = store.retained_from()

    def refuse_unless_verified(snap: CheckpointSnapshot) -> None:
        check = VerifyReport(broken_chains=store.broken_chains(None))
        check.projection_mismatches = snap.projection_mismatches(None)
        previous = _check_checkpoint_chain(snap.checkpoints(), check)
        if previous is not None:
            _check_heads(snap.sealed_heads(previous.checkpoint_id), previous, check, None,
                         retained)
        if not check.ok:
            raise SealRefused(_refusal(check, previous))

    return store.seal(actor, refuse_unless_verified)


def _refusal(check: VerifyReport, previous: Checkpoint | None) -> str:
    """The one-line reason a seal is refused: each kind of problem counted, first few named."""
    return (
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


def _check_checkpoint_chain(cps: list[Checkpoint], report: VerifyReport) -> Checkpoint | None:
    """Recompute every checkpoint's hash link and the last one's Merkle root."""
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


def _check_heads(heads: list[SealedHead], cp: Checkpoint, report: VerifyReport,
                 dispute_id: UUID | None, retained: datetime | None) -> None:
    """Compare checkpoint ``cp``'s sealed heads with the ledger rows at the same seq (and
    the stored heads with ``cp.heads_root``)."""
    sealed = _sort_heads(heads)
    root = merkle_root([head_leaf(h.dispute_id, h.seq, h.sealed_hash) for h in sealed])
    if root != cp.heads_root or len(sealed) != cp.head_count:
        report.checkpoint_errors.append(
            f"checkpoint {cp.checkpoint_id}: stored heads do not give its Merkle root"
        )
    for h in heads:
        if dispute_id is not None and h.dispute_id != dispute_id:
            continue
        if h.current_hash is None and retained is not None and h.chain_created_at < retained:
            continue  # the chain's partition was dropped by retention
        if h.current_hash is None or h.current_hash != h.sealed_hash:
            report.checkpoint_mismatches.append((h.dispute_id, h.seq))


def verify(
    store: CheckpointStore, dispute_id: UUID | None = None, digest: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Recompute chains, compare projection heads, the checkpoint chain and its last heads.

    Args:
        dispute_id: one dispute, or None for all.
        digest: a digest loaded with :func:`read_digest` to compare with the stored
            checkpoint of the same id (an attacker who rewrote the checkpoint tables too
            is caught by the copy kept elsewhere).
        progress: called ``("chains", chains checked, None)`` while the chains are walked.

    Returns:
        A :class:`VerifyReport`.
    """
    report = VerifyReport(broken_chains=store.broken_chains(dispute_id, progress))
    retained = store.retained_from()
    with store.snapshot() as snap:
        report.projection_mismatches = snap.projection_mismatches(dispute_id)
        last = _check_checkpoint_chain(snap.checkpoints(), report)
        if last is not None:
            report.checkpoint_id = last.checkpoint_id
            _check_heads(snap.sealed_heads(last.checkpoint_id), last, report, dispute_id,
                         retained)
        if digest is not None:
            held = _check_digest(snap, digest, report)
            if held is not None and (last is None or held.checkpoint_id != last.checkpoint_id):
                _check_heads(snap.sealed_heads(held.checkpoint_id), held, report, dispute_id,
                             retained)
    return report


def _check_digest(snap: CheckpointSnapshot, digest: dict[str, Any],
                  report: VerifyReport) -> Checkpoint | None:
    """Compare the digest file with the stored checkpoint of its id; return that checkpoint
    *as the file describes it* (its root from the file), so its heads are checked against
    the file's root, not against tables an attacker could have rewritten."""
    cp_id = digest.get("checkpoint_id")
    cp = snap.checkpoint(cp_id)
    if cp is None:
        report.checkpoint_errors.append(f"digest checkpoint {cp_id} is not in the database")
        return None
    if (
        cp.checkpoint_hash.hex() != digest.get("checkpoint_hash")
        or cp.heads_root.hex() != digest.get("heads_root")
        or cp.head_count != digest.get("head_count")
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

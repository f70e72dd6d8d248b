"""The checkpoint ports: sealed Merkle roots over chain heads, their signatures and the retention
records verify reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID


@dataclass(frozen=True, slots=True)
class CheckpointSignature:
    """An Ed25519 signature (RFC 8032; ``value`` 64 bytes) over a checkpoint's digest and the
    raw public key (32 bytes) that made it (``adapters.signing``; ADR 0012)."""

    public_key: bytes
    value: bytes


class SignatureStatus(StrEnum):
    """How a stored checkpoint's signature reads under the configured public key."""

    VALID = "valid"
    UNSIGNED = "unsigned"
    WRONG_KEY = "wrong_key"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One sealed checkpoint (hashes as bytes; ``created_at`` aware UTC).

    ``retention_count`` / ``retention_hash``: the ``audit_retention`` rows it covers
    (``merkle.retention_hash``), ``retention_covered`` their ``name:action`` keys;
    ``signature``: stored with it. All are None on a checkpoint sealed before signatures were
    stored."""

    checkpoint_id: int
    created_at: datetime
    head_count: int
    heads_root: bytes
    prev_checkpoint_hash: bytes
    checkpoint_hash: bytes
    retention_count: int | None = None
    retention_hash: bytes | None = None
    signature: CheckpointSignature | None = None
    retention_covered: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class RetentionRecord:
    """One ``audit_retention`` row: a ledger partition removed by retention (times aware
    UTC; ``action`` ``detached`` or ``dropped``)."""

    partition_name: str
    range_from: datetime
    range_to: datetime
    row_count: int
    max_recorded_at: datetime | None
    retention_days: int
    action: str
    actor: str
    done_at: datetime

    @property
    def key(self) -> str:
        """``name:action``, the row's key (a checkpoint's ``retention_covered`` lists them)."""
        return f"{self.partition_name}:{self.action}"


class DigestSigner(Protocol):
    """Signs checkpoint digests with the operator's private key (``adapters.signing``)."""

    def sign_digest(self, digest: Mapping[str, Any]) -> CheckpointSignature:
        """The signature of ``digest`` (without any ``signature`` member)."""
        ...


class DigestVerifier(Protocol):
    """Checks checkpoint signatures under the configured public key (``adapters.signing``)."""

    def check_digest(self, digest: Mapping[str, Any],
                     signature: CheckpointSignature | None) -> SignatureStatus:
        """How ``signature`` over ``digest`` reads under the configured public key."""
        ...


@dataclass(frozen=True, slots=True)
class SealedHead:
    """One chain head sealed in a checkpoint, with the ledger row's hash at that seq now
    (None when the row is gone)."""

    dispute_id: UUID
    seq: int
    sealed_hash: bytes
    chain_created_at: datetime
    current_hash: bytes | None


@dataclass(frozen=True, slots=True)
class ChangedChains:
    """What :meth:`CheckpointSnapshot.changed_since` found.

    ``broken``: ``(dispute_id, first bad seq)`` of changed chains whose hashes, seq or tail
    do not verify. ``sealed_mismatches``: ``(dispute_id, sealed seq)`` whose row at the
    sealed seq no longer has the sealed hash (or is gone). ``projection_mismatches``: as
    :meth:`CheckpointSnapshot.projection_mismatches`, for the changed chains. ``chains`` /
    ``rows``: how many chains and ledger rows were read."""

    broken: list[tuple[UUID, int]]
    sealed_mismatches: list[tuple[UUID, int]]
    projection_mismatches: list[tuple[UUID, str]]
    chains: int
    rows: int


@dataclass(frozen=True, slots=True)
class LedgerCheck:
    """What :meth:`CheckpointStore.check_ledger` found over the whole ledger.

    ``broken``: ``(dispute_id, first bad seq)`` of the hash chains and projection heads, as
    :meth:`CheckpointStore.broken_chains` of every chain. ``projection_mismatches``: as
    :meth:`CheckpointSnapshot.projection_mismatches` of every dispute (empty, not compared,
    when ``projection_compared`` is False). ``disputes`` / ``rows``: the chains and ledger
    rows read (:meth:`CheckpointSnapshot.ledger_counts`)."""

    broken: list[tuple[UUID, int]]
    projection_mismatches: list[tuple[UUID, str]]
    disputes: int
    rows: int
    projection_compared: bool = True


class CheckpointSnapshot(Protocol):
    """Reads of the checkpoint tables inside one consistent snapshot."""

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint, by id."""
        ...

    def sealed_heads(self, checkpoint_id: int) -> list[SealedHead]:
        """The heads sealed in ``checkpoint_id`` joined with the ledger rows at their seq."""
        ...

    def checkpoint(self, checkpoint_id: object) -> Checkpoint | None:
        """One checkpoint by id (as a digest file names it), or None."""
        ...

    def stored_heads(self, checkpoint_id: int) -> list[SealedHead]:
        """The heads stored for ``checkpoint_id`` as sealed (``current_hash`` None: the
        ledger is not read)."""
        ...

    def projection_mismatches(self, dispute_id: UUID | None) -> list[tuple[UUID, str]]:
        """``(dispute_id, "column (projection X, ledger Y), ...")`` whose projection row
        (``escalation_state``) differs from what its ledger chain determines
        (``domain.projection``: status, tier, due time, deadlines, obligations, materiality,
        ladder, version, ids, regulatory deadline), streamed in this snapshot.
        ``dispute_id`` None: every dispute."""
        ...

    def retention_records(self) -> list[RetentionRecord]:
        """Every ``audit_retention`` row, by partition name and action."""
        ...

    def ledger_tables(self) -> dict[str, bool]:
        """Every table in the ledger partition schema -> whether it is attached to the
        ledger."""
        ...

    def database_now(self) -> datetime:
        """The database clock (aware UTC)."""
        ...

    def ledger_counts(self, dispute_id: UUID | None) -> tuple[int, int]:
        """``(disputes, ledger rows)`` of one dispute or of all."""
        ...

    def changed_since(self, checkpoint_id: int) -> ChangedChains:
        """Every chain changed since checkpoint ``checkpoint_id``: its current head (the
        projection's ``last_seq`` / ``last_hash``, a ladder chain's on ``ladder_release``)
        differs from the head that checkpoint sealed, is not sealed there, or a sealed head
        has no current head any more. Each such chain is recomputed end to end (hashes,
        seq), its tail compared with its current head and its row at the sealed seq with
        the sealed hash; its projection row is compared with its ledger. Unchanged chains
        are not read."""
        ...

    def seal_current_heads(self) -> None:
        """Seal the current heads (projection and ladder chain heads, each equal to its
        chain's tail for a chain :meth:`changed_since` checked, and to the previously sealed
        head for one it did not) instead of every chain's last ledger row."""
        ...


class CheckpointStore(Protocol):
    """Audit checkpoints in PostgreSQL (adapter: ``adapters.checkpoints.PostgresCheckpoints``;
    see ``service_layer.checkpoint``)."""

    def seal(
        self, actor: str, before_seal: Callable[[CheckpointSnapshot], None] | None = None,
        sign: Callable[[Checkpoint], CheckpointSignature] | None = None,
    ) -> Checkpoint:
        """Seal the current chain heads into the next checkpoint (one snapshot, one sealer
        at a time): heads sorted by dispute id, RFC 6962 root over ``merkle.head_leaf``,
        ``merkle.checkpoint_hash`` chained on the previous checkpoint's hash, the retention
        rows of the snapshot (``merkle.retention_hash`` and their keys).

        ``before_seal`` is called with the sealing snapshot (the same transaction, under the
        sealer's lock) before anything is written; whatever it raises aborts the seal.
        ``sign`` signs the new checkpoint (its digest) before it is written; the signature
        is stored with it."""
        ...

    def broken_chains(
        self, dispute_id: UUID | None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> list[tuple[UUID, int]]:
        """``(dispute_id, first bad seq)`` of the hash chains and projection heads;
        ``progress(stage, done, total)`` is called as chains are checked."""
        ...

    def check_ledger(
        self, progress: Callable[[str, int, int | None], None] | None = None,
        projection: bool = True,
    ) -> LedgerCheck:
        """Every chain recomputed, every projection head and (with ``projection``) every
        projection row compared with its chain, counted, in one snapshot and one read of
        the ledger; ``progress`` as for :meth:`broken_chains`."""
        ...

    def retained_from(self) -> datetime | None:
        """End of the newest range removed by retention (chains created before it are gone)."""
        ...

    def snapshot(self) -> AbstractContextManager[CheckpointSnapshot]:
        """A read-only snapshot of the checkpoint tables and the ledger."""
        ...

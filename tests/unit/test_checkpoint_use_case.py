"""Audit checkpoints (service_layer.checkpoint) on the in-memory fakes: a hashed FakeAuditLog
(the real row hashes) under a FakeCheckpointStore, signed with a fixed Ed25519 key. The
first seal is full and seals every chain head; a later one reads only the chains changed
since the last signed checkpoint; a broken chain, a projection row that disagrees with its
ledger, or a chain rewritten with recomputed hashes is refused and nothing is sealed;
digest files and retention rows. Against PostgreSQL: tests/integration/test_audit_checkpoint.py
and test_audit_incremental_seal.py."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.adapters.signing import Ed25519DigestSigner, Ed25519DigestVerifier
from escalation.domain.audit_hash import GENESIS, row_hash
from escalation.domain.errors import InvalidInput
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root
from escalation.ports import Checkpoint, RetentionRecord, SignatureStatus
from escalation.service_layer.checkpoint import (
    SealCheck,
    SealRefused,
    VerifyLedger,
    create_checkpoint,
    digest_of,
    read_digest,
    retention_fault,
    seal_checkpoint,
    signed_digest,
    verify_ledger,
    write_digest,
)
from tests.fakes import FakeAuditLog, FakeCheckpointStore, pending
from tests.unit.test_fire_and_enqueue import LADDER

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))  # fixed: reproducible signatures
SIGNER = Ed25519DigestSigner(KEY)
VERIFIER = Ed25519DigestVerifier(KEY.public_key())


class World:
    """Two disputes, each with its ENQUEUED row, on a hashed ledger."""

    def __init__(self) -> None:
        self.log = FakeAuditLog(hashed=True)
        self.store = FakeCheckpointStore(self.log, now=T0)
        self.a = uuid.UUID(int=1)
        self.b = uuid.UUID(int=2)
        self.log.record_enqueue_many(
            [pending(LADDER, "standard", T0 + timedelta(hours=24), dispute_id=d)
             for d in (self.a, self.b)], "svc", T0)

    def seal(self) -> tuple[Checkpoint, SealCheck]:
        return seal_checkpoint(self.store, "ops", SIGNER, VERIFIER)

    def promote(self, dispute_id: uuid.UUID) -> None:
        self.log.append(self.log.states[dispute_id], "PROMOTED", "w1", T0, tier="senior")

    def rewrite(self, dispute_id: uuid.UUID, **changes: object) -> None:
        """A superuser's forgery: edit the dispute's first row and recompute every hash of
        its chain, so the chain alone verifies again."""
        prev = GENESIS
        for i, old in enumerate(self.log.ledger):
            if old.dispute_id != dispute_id:
                continue
            row = replace(old, **changes) if old.seq == 1 else old  # type: ignore[arg-type]
            row = replace(row, prev_hash=prev.hex())
            row = replace(row, row_hash=row_hash(prev, asdict(row)).hex())
            self.log.ledger[i] = row
            prev = bytes.fromhex(row.row_hash)


def test_the_first_seal_is_full_and_seals_every_chain_head() -> None:
    w = World()
    cp, check = seal_checkpoint(w.store, "ops", SIGNER, VERIFIER)
    assert check == SealCheck(since=None, chains=2, rows=2)
    heads = [head_leaf(r.dispute_id, r.seq, bytes.fromhex(r.row_hash))
             for r in sorted(w.log.ledger, key=lambda r: r.dispute_id.bytes)]
    assert (cp.checkpoint_id, cp.head_count, cp.prev_checkpoint_hash) == (1, 2, GENESIS)
    assert cp.heads_root == merkle_root(heads)
    assert cp.checkpoint_hash == checkpoint_hash(1, 2, merkle_root(heads), GENESIS)
    assert VERIFIER.check_digest(digest_of(cp), cp.signature) is SignatureStatus.VALID
    assert verify_ledger(VerifyLedger(), w.store, VERIFIER).ok


def test_a_later_seal_reads_only_the_chains_changed_since_the_signed_one() -> None:
    w = World()
    first, _ = seal_checkpoint(w.store, "ops", SIGNER, VERIFIER)
    w.promote(w.a)  # dispute a gets its seq 2; b is unchanged
    second, check = seal_checkpoint(w.store, "ops", SIGNER, VERIFIER)
    assert check == SealCheck(since=1, chains=1, rows=2)  # a's two rows, b not read
    assert second.prev_checkpoint_hash == first.checkpoint_hash
    sealed = {d: seq for d, seq, _, _ in w.store.sealed_at(2)}
    assert sealed == {w.a: 2, w.b: 1}
    assert [(d, seq) for d, seq, _, _ in w.store.heads[2]] == [(w.a, 2)]  # b not stored again
    report = verify_ledger(VerifyLedger(), w.store, VERIFIER)
    assert report.ok and report.checkpoint_id == 2


def test_a_broken_chain_is_refused_and_nothing_is_sealed() -> None:
    w = World()
    w.log.ledger[0] = replace(w.log.ledger[0], actor="mallory")  # edited, hash left as it was
    with pytest.raises(SealRefused, match=rf"1 broken chain\(s\) \['{w.a}@1'\]"):
        create_checkpoint(w.store, "ops", SIGNER, VERIFIER)
    assert w.store.checkpoints == []


def test_a_projection_row_that_disagrees_with_its_ledger_is_refused() -> None:
    w = World()
    w.store.projection_mismatch[w.b] = "tier (projection senior, ledger standard)"
    with pytest.raises(SealRefused, match=rf"1 projection row\(s\) disagreeing .*'{w.b}'"):
        create_checkpoint(w.store, "ops", SIGNER, VERIFIER)
    assert w.store.checkpoints == []


def test_a_chain_rewritten_with_recomputed_hashes_differs_from_the_signed_checkpoint() -> None:
    w = World()
    w.seal()
    w.rewrite(w.a, actor="mallory")
    assert w.store.broken_chains(None) == []  # the chain alone verifies
    with pytest.raises(SealRefused, match=rf"1 head\(s\) differ from checkpoint 1 \['{w.a}@1'\]"):
        w.seal()
    assert len(w.store.checkpoints) == 1
    report = verify_ledger(VerifyLedger(), w.store, VERIFIER)
    assert report.checkpoint_mismatches == [(w.a, 1)] and report.sealed_by == {(w.a, 1): 1}
    assert not report.ok


def test_a_digest_file_round_trips_and_a_changed_one_is_reported(tmp_path: Path) -> None:
    w = World()
    cp, _ = w.seal()
    path = tmp_path / "digest.json"
    write_digest(cp, path)
    held = read_digest(path)
    assert held == signed_digest(cp)
    assert verify_ledger(VerifyLedger(digest=held), w.store, VERIFIER).ok
    forged = {**held, "heads_root": "00" * 32}
    report = verify_ledger(VerifyLedger(digest=forged), w.store, VERIFIER)
    assert report.checkpoint_errors[0] == (
        "checkpoint 1 in the database differs from the digest file")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(InvalidInput, match=r"other\.json is not an escalation-checkpoint-digest/1"):
        read_digest(tmp_path / "other.json")


def _retention(name: str, start: datetime, end: datetime, done_at: datetime,
               action: str = "dropped") -> RetentionRecord:
    return RetentionRecord(partition_name=name, range_from=start, range_to=end, row_count=10,
                           max_recorded_at=end - timedelta(days=1), retention_days=365,
                           action=action, actor="ops", done_at=done_at)


def test_a_retention_row_must_be_old_enough_named_as_a_month_and_really_gone() -> None:
    done = datetime(2026, 3, 2, tzinfo=UTC)
    # cutoff = done - 365 days = 2025-03-02 (2025-03-02 .. 2026-03-02 holds no 29 February)
    old = _retention("escalation_audit_y2024m12", datetime(2024, 12, 1, tzinfo=UTC),
                     datetime(2025, 1, 1, tzinfo=UTC), done)
    assert retention_fault(old, {}, done, None) is None  # ends 2025-01-01 <= the cutoff
    young = _retention("escalation_audit_y2025m03", datetime(2025, 3, 1, tzinfo=UTC),
                       datetime(2025, 4, 1, tzinfo=UTC), done)
    why = retention_fault(young, {}, done, None)
    assert why is not None and why.startswith("premature") and "2025-03-02T00:00:00Z" in why
    # a configured period longer than the row's counts: 500 days = 365 + 135 puts the cutoff
    # 135 days before 2025-03-02 (28 + 31 + 31 + 30 = 120 back to 2024-11-02, 15 more) at
    # 2024-10-18, before the old row's range ends (2025-01-01): premature too
    why = retention_fault(old, {}, done, 500)
    assert why is not None and why.startswith("premature") and "2024-10-18T00:00:00Z" in why
    assert retention_fault(old, {"escalation_audit_y2024m12": False}, done, None) == (
        "partition escalation_audit_y2024m12 still exists, though the row says dropped")
    forged = replace(old, range_to=datetime(2025, 2, 1, tzinfo=UTC))
    assert (retention_fault(forged, {}, done, None) or "").startswith("forged: range")

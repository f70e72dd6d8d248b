"""Incremental seals: after a signed checkpoint, a seal recomputes only the chains changed
since it (tampering there refuses the seal; unchanged chains are not read), while a full
``audit verify`` still finds tampering anywhere; ``verify --all`` walks the partitions in
parallel with the same result as one ordered scan."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.adapters.signing import Ed25519DigestSigner, Ed25519DigestVerifier
from escalation.service_layer.checkpoint import (
    SealRefused,
    VerifyLedger,
    seal_checkpoint,
    verify,
    verify_ledger,
)
from tests.integration.audit_support import T0, claimed, make_escalation, promote
from tests.integration.test_audit_checkpoint import _rewrite_whole_chain


def _keys() -> tuple[Ed25519DigestSigner, Ed25519DigestVerifier]:
    key = Ed25519PrivateKey.generate()
    return Ed25519DigestSigner(key), Ed25519DigestVerifier(key.public_key())


def _chain(store: PostgresAuditStore, months_back: int = 0):
    """A three-row chain created ``months_back`` months before T0 (its own partition)."""
    esc = make_escalation(due_at=T0 - timedelta(days=31 * months_back))
    esc = store.record_enqueue(esc, "svc", esc.due_at - timedelta(days=1))[1]
    (o,) = store.record_decisions([(claimed(esc), promote(esc))], "w")
    return o.state


def _promote(store: PostgresAuditStore, state) -> None:
    store.record_decisions([(claimed(state), promote(state, "compliance"))], "w")


def _tamper(engine: sa.Engine, dispute_id, seq: int) -> None:
    """Change one row's actor behind the triggers' back (its hash no longer matches)."""
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text("UPDATE escalation_audit SET actor = 'mallory' "
                             "WHERE dispute_id = :d AND seq = :s"), {"d": dispute_id, "s": seq})
        for trg in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trg}"))


def _ensure_months(engine: sa.Engine, months: int) -> None:
    with engine.begin() as conn:
        for m in range(months + 1):
            conn.execute(sa.text(
                "SELECT escalation_audit_ensure_partition("
                "(date_trunc('month', CAST(:t AS timestamptz) AT TIME ZONE 'UTC')"
                " - make_interval(months => :m))::date)"), {"t": T0, "m": m})


def test_incremental_seal_reads_only_changed_chains_and_seals_every_head(scratch):
    engine = scratch
    _ensure_months(engine, 3)
    store = PostgresAuditStore(engine)
    signer, verifier = _keys()
    states = [_chain(store, months_back=i % 3) for i in range(6)]
    cps = PostgresCheckpoints(engine)
    first, check = seal_checkpoint(cps, "t", signer, verifier)
    assert check.since is None and check.chains == 6 and check.rows == 12  # full
    _promote(store, states[0])
    _promote(store, states[4])
    second, check = seal_checkpoint(cps, "t", signer, verifier)
    # only the two changed chains were read: 3 rows each; the four others not at all
    assert (check.since, check.chains, check.rows) == (first.checkpoint_id, 2, 6)
    assert second.head_count == 6
    third, check = seal_checkpoint(cps, "t", signer, verifier)
    assert (check.chains, check.rows) == (0, 0)
    assert third.heads_root == second.heads_root
    assert verify_ledger(VerifyLedger(), cps, verifier).ok


def test_a_tampered_row_in_a_changed_chain_refuses_the_incremental_seal(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    signer, verifier = _keys()
    victim, other = _chain(store), _chain(store)
    cps = PostgresCheckpoints(engine)
    seal_checkpoint(cps, "t", signer, verifier)
    _tamper(engine, victim.dispute_id, 1)  # an old row of a chain that then changes
    _promote(store, victim)
    with pytest.raises(SealRefused, match="1 broken chain"):
        seal_checkpoint(cps, "t", signer, verifier)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM audit_checkpoint")).scalar_one() == 1
    del other


def test_a_changed_chain_recomputed_end_to_end_differs_from_the_sealed_head(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    signer, verifier = _keys()
    victim = _chain(store)
    cps = PostgresCheckpoints(engine)
    seal_checkpoint(cps, "t", signer, verifier)
    _rewrite_whole_chain(engine, victim.dispute_id, 1, "mallory")  # head hash moves
    with pytest.raises(SealRefused, match="1 head\\(s\\) differ from checkpoint 1"):
        seal_checkpoint(cps, "t", signer, verifier)


def test_tampering_in_an_unchanged_chain_is_left_to_the_full_verify(scratch):
    """The incremental seal does not re-read an unchanged chain, and seals the head the
    previous checkpoint signed for it; a full verify finds the edit."""
    engine = scratch
    store = PostgresAuditStore(engine)
    signer, verifier = _keys()
    quiet, busy = _chain(store), _chain(store)
    cps = PostgresCheckpoints(engine)
    first, _ = seal_checkpoint(cps, "t", signer, verifier)
    _tamper(engine, quiet.dispute_id, 1)
    _promote(store, busy)
    second, check = seal_checkpoint(cps, "t", signer, verifier)
    assert (check.chains, check.rows) == (1, 3)  # busy only
    report = verify_ledger(VerifyLedger(), cps, verifier)
    assert not report.ok
    assert report.broken_chains == [(quiet.dispute_id, 1)]
    assert report.checkpoint_id == second.checkpoint_id != first.checkpoint_id


def test_parallel_verify_all_finds_what_one_scan_finds(scratch):
    engine = scratch
    _ensure_months(engine, 4)
    store = PostgresAuditStore(engine)
    states = [_chain(store, months_back=i % 4) for i in range(12)]
    assert store.verify() == []
    _tamper(engine, states[2].dispute_id, 2)
    _tamper(engine, states[7].dispute_id, 1)
    parallel = store.verify()
    store.parallel_verify = False
    assert parallel == store.verify()
    assert sorted(parallel) == sorted([(states[2].dispute_id, 2), (states[7].dispute_id, 1)])


def _set_state(engine: sa.Engine, dispute_id, assignment: str) -> None:
    """Change a projection row behind the product's back (``assignment``: SQL SET list)."""
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE escalation_state SET {assignment} WHERE dispute_id = :d"),
                     {"d": dispute_id})


def _drop_tail(engine: sa.Engine, dispute_id) -> None:
    """Delete a chain's last row behind the triggers' back (its projection head is ahead)."""
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text(
            "DELETE FROM escalation_audit WHERE dispute_id = :d AND seq = (SELECT max(seq) "
            "FROM escalation_audit WHERE dispute_id = :d)"), {"d": dispute_id})
        for trg in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trg}"))


def test_parallel_verify_all_compares_heads_and_projection_rows_as_one_scan_does(scratch):
    engine = scratch
    _ensure_months(engine, 4)
    store = PostgresAuditStore(engine)
    cps = PostgresCheckpoints(engine)
    states = [_chain(store, months_back=i % 4) for i in range(12)]
    clean = store.check_ledger()
    assert (clean.broken, clean.projection_mismatches) == ([], [])
    assert (clean.disputes, clean.rows) == (12, 24)
    _drop_tail(engine, states[1].dispute_id)  # projection head one row ahead of its chain
    _set_state(engine, states[5].dispute_id, "tier = 'compliance'")  # a column rewritten
    _set_state(engine, states[6].dispute_id, "last_hash = decode(repeat('ab', 32), 'hex')")
    found = store.check_ledger()
    with cps.snapshot() as snap:
        one_scan = snap.projection_mismatches(None)
    store.parallel_verify = False
    assert found.broken == store.verify()
    assert sorted(found.broken) == sorted([(states[1].dispute_id, 2),
                                           (states[6].dispute_id, 2)])
    assert found.projection_mismatches == one_scan
    named = dict(found.projection_mismatches)
    assert "tier (projection 'compliance'" in named[states[5].dispute_id]
    assert states[6].dispute_id not in named  # the head is not a projected column
    assert (found.disputes, found.rows) == (12, 23)
    report = verify(cps)
    assert (report.broken_chains, report.projection_mismatches) == (
        found.broken, found.projection_mismatches)
    assert (report.disputes, report.rows) == (12, 23)


def test_verify_all_finds_a_projection_row_whose_chain_is_not_in_its_month(scratch):
    """A chain lives in the partition of its projection's ``created_at`` (docs/audit.md,
    "Partitions and retention"); a projection row moved to another month has no chain
    there: broken at seq 1, like a projection row whose chain is gone."""
    engine = scratch
    _ensure_months(engine, 3)
    store = PostgresAuditStore(engine)
    states = [_chain(store, months_back=i % 3) for i in range(6)]
    assert store.verify() == []
    moved = states[4].dispute_id
    with engine.begin() as conn:  # the month before the chain's has a partition too
        conn.execute(sa.text(
            "SELECT escalation_audit_ensure_partition((date_trunc('month', created_at"
            " AT TIME ZONE 'UTC') - interval '1 month')::date) FROM escalation_state"
            " WHERE dispute_id = :d"), {"d": moved})
    _set_state(engine, moved, "created_at = created_at - interval '31 days'")
    assert store.check_ledger().broken == [(moved, 1)]
    assert not verify(PostgresCheckpoints(engine)).ok

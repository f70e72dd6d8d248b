"""A checkpoint stores only the heads changed since the checkpoint before it (the first one
stores all of them; ADR 0035): N changed chains are N ``audit_checkpoint_head`` rows, a chain
that left the ledger is a ``removed`` row, and the heads a checkpoint seals are read back as
the newest stored per chain, so its Merkle root, ``audit verify``, the digest of an older
checkpoint and an examiner's case file for a chain unchanged since an older checkpoint all
verify against the newest signed root."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.adapters.partitions import ExpiryRun, drop_expired
from escalation.domain.case_file import public_key_from_pem, verify_bundle
from escalation.domain.merkle import head_leaf, merkle_root
from escalation.service_layer.checkpoint import (
    VerifyLedger,
    read_digest,
    seal_checkpoint,
    verify_ledger,
    write_digest,
)
from tests.helpers import run_cli
from tests.integration.audit_support import T0
from tests.integration.test_audit_checkpoint import _chain
from tests.integration.test_audit_evidence import (
    SEVEN_YEARS,
    _db_now,
    _old_chain,
    _seal,
    _signer,
    _verifier,
)
from tests.integration.test_case_file import OFFLINE


def _cancel(store: PostgresAuditStore, dispute_id: uuid.UUID) -> None:
    """One more row on the dispute's chain (seq 4): it changed."""
    store.record_cancel(dispute_id, "ops", T0 + timedelta(days=1), "resolved")


def _stored(engine: sa.Engine, checkpoint_id: int) -> dict[uuid.UUID, tuple[int, bool]]:
    """The rows stored for one checkpoint: dispute -> (seq, removed)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT dispute_id, last_seq, removed FROM audit_checkpoint_head "
            "WHERE checkpoint_id = :c"), {"c": checkpoint_id}).all()
    return {d: (int(s), bool(r)) for d, s, r in rows}


def _complete(engine: sa.Engine) -> list[bool]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(
            "SELECT heads_complete FROM audit_checkpoint ORDER BY checkpoint_id")).scalars())


def _sealed_root(engine: sa.Engine, checkpoint_id: int) -> tuple[int, bytes]:
    with PostgresCheckpoints(engine).snapshot() as snap:
        heads = sorted(snap.stored_heads(checkpoint_id), key=lambda h: h.dispute_id.bytes)
    return len(heads), merkle_root([head_leaf(h.dispute_id, h.seq, h.sealed_hash)
                                    for h in heads])


def test_a_seal_after_n_changes_stores_n_heads_and_seals_every_chain(scratch, tmp_path):
    store = PostgresAuditStore(scratch)
    cps = PostgresCheckpoints(scratch)
    signer, verifier = _signer(), _verifier()
    ids = [_chain(store) for _ in range(6)]
    first, _ = seal_checkpoint(cps, "t", signer, verifier)
    write_digest(first, tmp_path / "cp1.json")
    assert len(_stored(scratch, 1)) == 6  # a first checkpoint stores every head
    for d in ids[:2]:
        _cancel(store, d)
    second, check = seal_checkpoint(cps, "t", signer, verifier)
    assert (check.since, check.chains) == (1, 2)
    assert _stored(scratch, 2) == {ids[0]: (4, False), ids[1]: (4, False)}  # N changes, N rows
    assert second.head_count == 6
    third, check = seal_checkpoint(cps, "t", signer, verifier)
    assert check.chains == 0 and _stored(scratch, 3) == {} and third.head_count == 6
    assert third.heads_root == second.heads_root
    assert _complete(scratch) == [True, False, False]
    # what each checkpoint seals, read back, gives its signed root and count
    for cp in (first, second, third):
        assert _sealed_root(scratch, cp.checkpoint_id) == (cp.head_count, cp.heads_root)
    with cps.snapshot() as snap:
        sealed = {h.dispute_id: h.seq for h in snap.sealed_heads(3)}
        assert snap.stored_heads(4) == []  # no such checkpoint
    assert sealed == {d: 4 if d in ids[:2] else 3 for d in ids}
    report = verify_ledger(VerifyLedger(), cps, verifier)
    assert report.ok and report.checkpoint_id == 3, report
    # the digest of the first checkpoint (all its heads stored) still checks
    old = verify_ledger(VerifyLedger(digest=read_digest(tmp_path / "cp1.json")), cps, verifier)
    assert old.ok, old


def test_a_chain_gone_from_the_ledger_is_a_removed_row_and_leaves_the_root(scratch):
    with scratch.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition('2015-03-01')"))
    kept = _chain(PostgresAuditStore(scratch))
    gone = _old_chain(scratch, "2015-03")
    cps = PostgresCheckpoints(scratch)
    first = cps.seal("t")  # unsigned, from the ledger's tails
    assert drop_expired(scratch, ExpiryRun(_db_now(scratch), SEVEN_YEARS, "test",
                                           names=["escalation_audit_y2015m03"])).removed
    second = cps.seal("t")
    assert second.head_count == first.head_count - 1
    assert _stored(scratch, 2) == {gone: (3, True)}
    assert _sealed_root(scratch, 2) == (second.head_count, second.heads_root)
    assert _sealed_root(scratch, 1) == (first.head_count, first.heads_root)
    with cps.snapshot() as snap:
        before = {h.dispute_id for h in snap.sealed_heads(1)}
        after = {h.dispute_id for h in snap.sealed_heads(2)}
    assert after == before - {gone} and kept in after
    third = cps.seal("t")
    assert _stored(scratch, 3) == {} and third.heads_root == second.heads_root


def test_a_case_file_of_a_chain_unchanged_since_an_older_checkpoint_verifies_offline(
        scratch: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "ESCALATION_OPERATOR": "jane.doe",
           "ESCALATION_DATABASE_URL": scratch.url.render_as_string(hide_password=False)}
    store = PostgresAuditStore(scratch)
    unchanged, changed = _chain(store), _chain(store)
    assert run_cli(env, "audit", "checkpoint").returncode == 0
    _cancel(store, changed)
    assert run_cli(env, "audit", "checkpoint").returncode == 0
    newest = tmp_path / "cp3.json"
    assert run_cli(env, "audit", "checkpoint", "--out", str(newest)).returncode == 0
    assert _stored(scratch, 2) == {changed: (4, False)} and _stored(scratch, 3) == {}
    out = tmp_path / "case.json"
    res = run_cli(env, "audit", "case-file", str(unchanged), "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_bytes())
    assert doc["checkpoint"] == json.loads(newest.read_text())  # the newest signed root
    (entry,) = doc["disputes"]
    assert entry["sealed"]["seq"] == 3 and entry["sealed"]["proof"]
    pub = tmp_path / "cp.pub"
    pub.write_text(run_cli(env, "audit", "public-key").stdout)
    offline = {**env, **OFFLINE}
    res = run_cli(offline, "audit", "verify-bundle", str(out), "--public-key", str(pub))
    assert res.returncode == 0 and "ok:" in res.stdout, res.stderr
    assert verify_bundle(out.read_bytes(), public_key_from_pem(pub.read_bytes())).ok
    res = run_cli(offline, "audit", "verify-digest", str(newest), "--public-key", str(pub))
    assert res.returncode == 0, res.stderr
    # the ledger verifies against that root, and a seal after it stores nothing new
    assert _seal(scratch).head_count == 2 and _stored(scratch, 4) == {}

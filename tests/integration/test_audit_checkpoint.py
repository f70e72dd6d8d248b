"""Checkpoints: Merkle root over chain heads; verify catches a superuser who rewrote a row
and recomputed the whole chain (and projection head) behind the triggers' back."""

from __future__ import annotations

import hashlib
import json

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.domain import audit_hash
from escalation.domain.merkle import EMPTY_ROOT, leaf_hash, merkle_root, node_hash
from escalation.service_layer.checkpoint import (
    VerifyLedger,
    create_checkpoint,
    digest_of,
    read_digest,
    verify,
    verify_ledger,
    write_digest,
)
from tests.helpers import run_cli
from tests.integration.audit_support import T0, claimed, make_escalation, promote


def _chain(store: PostgresAuditStore):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    (o,) = store.record_decisions([(claimed(esc), promote(esc))], "w")
    store.record_decisions([(claimed(o.state), promote(o.state, "compliance"))], "w")
    return esc.dispute_id


def _rewrite_whole_chain(engine: sa.Engine, dispute_id, seq: int, actor: str) -> None:
    """What a superuser could do: edit a row, recompute every later hash and the head."""
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(
            sa.text("UPDATE escalation_audit SET actor = :a WHERE dispute_id = :d AND seq = :s"),
            {"a": actor, "d": dispute_id, "s": seq},
        )
        rows = conn.execute(
            sa.text("SELECT * FROM escalation_audit WHERE dispute_id = :d ORDER BY seq"),
            {"d": dispute_id},
        ).mappings().all()
        prev = audit_hash.GENESIS
        for row in rows:
            new = audit_hash.row_hash(prev, dict(row))
            conn.execute(
                sa.text(
                    "UPDATE escalation_audit SET prev_hash = :p, row_hash = :h"
                    " WHERE dispute_id = :d AND seq = :s"
                ),
                {"p": prev, "h": new, "d": dispute_id, "s": row["seq"]},
            )
            prev = new
        conn.execute(
            sa.text("UPDATE escalation_state SET last_hash = :h WHERE dispute_id = :d"),
            {"h": prev, "d": dispute_id},
        )
        for trg in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trg}"))


def test_merkle_root_follows_rfc6962():
    a, b, c = b"a", b"b", b"c"
    assert merkle_root([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert merkle_root([a]) == hashlib.sha256(b"\x00a").digest()
    # n = 3: k = 2 -> node(node(a, b), c)
    expect = node_hash(node_hash(leaf_hash(a), leaf_hash(b)), leaf_hash(c))
    assert merkle_root([a, b, c]) == expect
    assert merkle_root([b, a, c]) != expect


def test_checkpoints_chain_to_each_other_and_cover_every_head(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    for _ in range(3):
        _chain(store)
    first = create_checkpoint(PostgresCheckpoints(engine), "test")
    _chain(store)
    second = create_checkpoint(PostgresCheckpoints(engine), "test")
    assert (first.checkpoint_id, first.head_count) == (1, 3)
    assert (second.checkpoint_id, second.head_count) == (2, 4)
    assert second.prev_checkpoint_hash == first.checkpoint_hash
    assert verify(PostgresCheckpoints(engine)).ok


def test_checkpoint_tables_are_append_only(scratch):
    engine = scratch
    create_checkpoint(PostgresCheckpoints(engine), "test")
    with pytest.raises(sa.exc.DBAPIError, match="append-only"), engine.begin() as conn:
        conn.execute(sa.text("UPDATE audit_checkpoint SET actor = 'mallory'"))


def test_verify_catches_a_chain_recomputed_after_an_edit_through_the_checkpoint(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    clean = _chain(store)
    create_checkpoint(PostgresCheckpoints(engine), "test")
    _rewrite_whole_chain(engine, victim, 2, "mallory")
    # The chain itself and the projection head are self-consistent again ...
    assert store.verify() == []
    # ... but the checkpoint sealed the old head of the victim's chain.
    report = verify(PostgresCheckpoints(engine))
    assert not report.ok
    assert report.checkpoint_mismatches == [(victim, 3)]
    assert verify(PostgresCheckpoints(engine), clean).ok


def test_verify_catches_a_row_changed_with_triggers_disabled(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(
            sa.text("UPDATE escalation_audit SET materiality = 1.00 WHERE dispute_id = :d"
                    " AND seq = 1"),
            {"d": victim},
        )
    report = verify(PostgresCheckpoints(engine))
    assert report.broken_chains == [(victim, 1)]


def test_digest_file_exposes_rewritten_checkpoint_tables(scratch, tmp_path):
    engine = scratch
    _chain(PostgresAuditStore(engine))
    cp = create_checkpoint(PostgresCheckpoints(engine), "test")
    path = tmp_path / "digest.json"
    write_digest(cp, path)
    assert read_digest(path) == json.loads(json.dumps(digest_of(cp)))
    assert verify_ledger(VerifyLedger(digest=read_digest(path)), PostgresCheckpoints(engine)).ok
    forged = {**read_digest(path), "heads_root": "00" * 32}
    report = verify_ledger(VerifyLedger(digest=forged), PostgresCheckpoints(engine))
    assert report.checkpoint_errors == ["checkpoint 1 in the database differs from the digest file"]


def test_cli_verify_exits_1_and_names_the_broken_link(scratch, cli_env, tmp_path):
    engine = scratch
    url = scratch.url.render_as_string(hide_password=False)
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    env = {**cli_env, "ESCALATION_DATABASE_URL": url}
    ok = run_cli(env, "audit", "checkpoint", "--out", str(tmp_path / "d.json"))
    assert ok.returncode == 0, ok.stderr
    assert read_digest(tmp_path / "d.json")["head_count"] == 1
    _rewrite_whole_chain(engine, victim, 1, "mallory")
    res = run_cli(env, "audit", "verify", "--all")
    assert res.returncode == 1
    assert f"dispute {victim} seq 3 differs from checkpoint 1" in res.stderr


def test_checkpoint_refuses_to_seal_a_forged_chain(scratch):
    from escalation.service_layer.checkpoint import SealRefused

    engine = scratch
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    _chain(store)
    create_checkpoint(PostgresCheckpoints(engine), "test")
    _rewrite_whole_chain(engine, victim, 2, "mallory")
    assert store.verify() == []  # self-consistent forgery
    with pytest.raises(SealRefused, match="1 head\\(s\\) differ from checkpoint 1"):
        create_checkpoint(PostgresCheckpoints(engine), "test")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM audit_checkpoint")).scalar_one() == 1


def test_checkpoint_refuses_when_any_chain_is_visibly_broken(scratch):
    from escalation.service_layer.checkpoint import SealRefused

    engine = scratch
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text("UPDATE escalation_audit SET actor = 'mallory' "
                             "WHERE dispute_id = :d AND seq = 2"), {"d": victim})
        conn.execute(sa.text("ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER "
                             "trg_escalation_audit_no_mutation"))
        conn.execute(sa.text("ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER "
                             "trg_escalation_audit_no_truncate"))
    with pytest.raises(SealRefused, match="1 broken chain"):
        create_checkpoint(PostgresCheckpoints(engine), "test")


def test_an_older_digest_exposes_a_forgery_sealed_by_a_later_checkpoint(
    scratch, tmp_path, monkeypatch
):
    """Even if a forged head got sealed (a sealer without the pre-seal check), the digest of
    an older checkpoint kept elsewhere still exposes the rewrite, also with --dispute."""
    from escalation.service_layer import checkpoint as cpmod

    engine = scratch
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    _chain(store)
    older = create_checkpoint(PostgresCheckpoints(engine), "test")
    path = tmp_path / "older.json"
    write_digest(older, path)
    _rewrite_whole_chain(engine, victim, 2, "mallory")
    with monkeypatch.context() as m:  # the old, unchecked sealer
        m.setattr(cpmod, "_check_heads", lambda *a, **k: None)
        create_checkpoint(PostgresCheckpoints(engine), "mallory")
    # the last checkpoint sealed the forged head ...
    assert verify(PostgresCheckpoints(engine), victim).ok
    report = verify_ledger(VerifyLedger(victim, read_digest(path)), PostgresCheckpoints(engine))
    assert not report.ok  # ... but the older digest holds the genuine one
    assert report.checkpoint_mismatches == [(victim, 3)]


def test_verify_checks_the_projection_against_the_ledger(scratch):
    engine = scratch
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    clean = _chain(store)
    assert verify(PostgresCheckpoints(engine)).ok
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE escalation_state SET materiality = 1.00, "
                             "status = 'cancelled', due_at = NULL WHERE dispute_id = :d"),
                     {"d": victim})
    report = verify(PostgresCheckpoints(engine))
    assert not report.ok
    assert report.projection_mismatches == [(victim, (
        "status (projection 'cancelled', ledger 'pending'), "
        "due_at (projection none, ledger 2026-03-06T09:00:02+00:00), "
        "materiality (projection 1.00, ledger 1250.00)"))]
    assert verify(PostgresCheckpoints(engine), clean).ok

"""Audit evidence an examiner can take away: a retention row is evidence only when it is a
past-retention removal of a partition that is really gone, and trust starts at a checkpoint
signature. Each tamper is tried as the database superuser and as ``escalation_app``: the
application role is refused by privilege (42501); what the superuser does is refused by
the database's checks where it can be, and otherwise reported by ``audit verify`` and
refused by ``audit checkpoint``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.adapters.partitions import ExpiryRun, drop_expired, partition_for
from escalation.adapters.signing import (
    Ed25519DigestSigner,
    Ed25519DigestVerifier,
    load_private_key,
    public_pem,
    raw_public,
)
from escalation.adapters.tables import PARTITION_SCHEMA
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root
from escalation.ports import SignatureStatus
from escalation.service_layer.checkpoint import (
    SealRefused,
    VerifyLedger,
    create_checkpoint,
    signed_digest,
    verify_ledger,
)
from tests.conftest import signing_key_pem
from tests.helpers import run_cli
from tests.integration.test_audit_checkpoint import _chain, _rewrite_whole_chain

SEVEN_YEARS = 2557
ROLES = ["superuser", "escalation_app"]


def _key() -> Ed25519PrivateKey:
    key = load_private_key({"ESCALATION_CHECKPOINT_KEY": signing_key_pem()})
    assert key is not None
    return key


def _signer() -> Ed25519DigestSigner:
    return Ed25519DigestSigner(_key())


def _verifier() -> Ed25519DigestVerifier:
    return Ed25519DigestVerifier(_key().public_key())


def _seal(engine: sa.Engine):
    return create_checkpoint(PostgresCheckpoints(engine), "test", _signer(), _verifier(),
                             retention_days=SEVEN_YEARS)


def _verify(engine: sa.Engine, dispute_id: UUID | None = None):
    return verify_ledger(VerifyLedger(dispute_id, retention_days=SEVEN_YEARS),
                         PostgresCheckpoints(engine), _verifier())


def _as(engine: sa.Engine, role: str, *sql: tuple[str, dict]) -> None:
    """Run ``sql`` in one transaction as ``role`` (the superuser disables the retention
    check first: it would refuse the row, see the tests that say so)."""
    with engine.begin() as conn:
        if role == "escalation_app":
            conn.execute(sa.text("SET LOCAL ROLE escalation_app"))
        for text, params in sql:
            conn.execute(sa.text(text), params)


def _as_role(url: str, role: str) -> str:
    """``url`` connecting as ``role`` (``options=-c role=...``), whether or not it already
    has a query (a socket directory in ``host``)."""
    return sa.make_url(url).update_query_dict({"options": f"-c role={role}"}).render_as_string(
        hide_password=False)


def _db_now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one().astimezone(UTC)


def _delete_dispute(engine: sa.Engine, dispute_id: UUID) -> None:
    """What a superuser can do: remove a dispute's ledger and projection rows."""
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text("DELETE FROM escalation_audit WHERE dispute_id = :d"),
                     {"d": dispute_id})
        conn.execute(sa.text("DELETE FROM escalation_state WHERE dispute_id = :d"),
                     {"d": dispute_id})
        for trg in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trg}"))


FORGED_ROW = (
    "INSERT INTO audit_retention (partition_name, range_from, range_to, row_count,"
    " max_recorded_at, retention_days, action, actor) VALUES (:n, :f, :t, 0, NULL, :days,"
    " 'dropped', 'maintenance-cli')"
)


def _insert_retention(engine: sa.Engine, name: str, range_from, range_to,
                      days: int = SEVEN_YEARS, *, bypass_check: bool = True) -> None:
    """Insert a retention row as the superuser; ``bypass_check`` disables the database's
    retention check around it (a superuser can)."""
    with engine.begin() as conn:
        if bypass_check:
            conn.execute(sa.text("ALTER TABLE audit_retention DISABLE TRIGGER "
                                 "trg_audit_retention_check"))
        conn.execute(sa.text(FORGED_ROW),
                     {"n": name, "f": range_from, "t": range_to, "days": days})
        if bypass_check:
            conn.execute(sa.text("ALTER TABLE audit_retention ENABLE ALWAYS TRIGGER "
                                 "trg_audit_retention_check"))


def _env(scratch: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    pub = tmp_path / "cp.pub"
    pub.write_bytes(public_pem(_key().public_key()))
    return {**cli_env, "ESCALATION_DATABASE_URL":
            scratch.url.render_as_string(hide_password=False)}


# ------------------------------------------------------------------------- hole 1: retention
def test_the_application_role_may_not_write_a_retention_row(scratch):
    with pytest.raises(sa.exc.DBAPIError) as info:
        _as(scratch, "escalation_app",
            (FORGED_ROW, {"n": "escalation_audit_y2000m01",
                          "f": datetime(2000, 1, 1, tzinfo=UTC),
                          "t": datetime(2000, 2, 1, tzinfo=UTC), "days": SEVEN_YEARS}))
    assert info.value.orig.sqlstate == "42501"


def test_a_forged_retention_row_hiding_a_deleted_dispute_is_reported_by_name(
    scratch, cli_env, tmp_path
):
    """The issue's scenario: delete a dispute, log a retention row whose range covers the
    last ten years and the next one: the database refuses the row; a superuser who slips it
    past the check is reported by name, with the deleted dispute, also with the digest."""
    store = PostgresAuditStore(scratch)
    victim = _chain(store)
    _chain(store)
    cp1 = _seal(scratch)
    digest = tmp_path / "cp1.json"
    digest.write_text(json.dumps(signed_digest(cp1)))
    _delete_dispute(scratch, victim)
    now = _db_now(scratch)
    wide = (now.replace(year=now.year - 10), now.replace(year=now.year + 1))
    with pytest.raises(sa.exc.DBAPIError, match="is not the month of"):
        _insert_retention(scratch, "escalation_audit_y2000m01", *wide, bypass_check=False)
    _insert_retention(scratch, "escalation_audit_y2000m01", *wide)
    report = _verify(scratch)
    assert not report.ok
    assert [n for n, _ in report.retention_problems] == ["escalation_audit_y2000m01"]
    assert "forged" in report.retention_problems[0][1]
    assert report.checkpoint_mismatches == [(victim, 3)]
    env = _env(scratch, cli_env, tmp_path)
    res = run_cli(env, "audit", "verify", "--all", "--digest", str(digest),
                  "--public-key", str(tmp_path / "cp.pub"))
    assert res.returncode == 1, res.stdout
    assert "retention row escalation_audit_y2000m01: forged" in res.stderr
    assert f"dispute {victim} seq 3 differs from checkpoint 1" in res.stderr
    # the deleted dispute itself: tampering (exit 1), not "no audit rows" (exit 2)
    one = run_cli(env, "audit", "verify", "--dispute", str(victim))
    assert one.returncode == 1, one.stderr
    assert f"dispute {victim} seq 3 differs from checkpoint 1" in one.stderr
    with pytest.raises(SealRefused, match="retention row"):
        _seal(scratch)


def test_dropping_the_current_partition_and_logging_it_is_premature(scratch, cli_env, tmp_path):
    """Variant: the current month's partition dropped and a row naming it (its true range):
    the database refuses the row; slipped past, verify reports it premature and the seal
    refuses, so no ``head_count: 0`` checkpoint is ever signed."""
    store = PostgresAuditStore(scratch)
    victim = _chain(store)
    _seal(scratch)
    with scratch.connect() as conn:
        created = conn.execute(sa.text("SELECT created_at FROM escalation_state"
                                       " WHERE dispute_id = :d"), {"d": victim}).scalar_one()
    part = partition_for(created)
    with scratch.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE escalation_audit DETACH PARTITION "
                             f"{PARTITION_SCHEMA}.{part.name}"))
        conn.execute(sa.text(f"DROP TABLE {PARTITION_SCHEMA}.{part.name}"))
    with pytest.raises(sa.exc.DBAPIError, match="not older than its retention period"):
        _insert_retention(scratch, part.name, part.range_from, part.range_to,
                          bypass_check=False)
    _insert_retention(scratch, part.name, part.range_from, part.range_to)
    report = _verify(scratch)
    assert [n for n, _ in report.retention_problems] == [part.name]
    assert report.retention_problems[0][1].startswith("premature")
    assert report.checkpoint_mismatches == [(victim, 3)]
    env = _env(scratch, cli_env, tmp_path)
    res = run_cli(env, "audit", "checkpoint", "--out", str(tmp_path / "cp2.json"))
    assert res.returncode == 1 and "refusing to seal" in res.stderr, res.stderr
    assert not (tmp_path / "cp2.json").exists()


def test_a_retention_row_shorter_than_the_configured_period_is_premature(scratch):
    """A two-year-old partition really dropped, logged with retention_days 365: the database
    accepts it (365 days is its floor), verify reports it against the configured 7 years."""
    store = PostgresAuditStore(scratch)
    _chain(store)
    now = _db_now(scratch)
    month = datetime(now.year - 2, now.month, 1, tzinfo=UTC)
    part = partition_for(month)
    with scratch.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition(:m)"),
                     {"m": month.date()})
        conn.execute(sa.text(f"ALTER TABLE escalation_audit DETACH PARTITION "
                             f"{PARTITION_SCHEMA}.{part.name}"))
        conn.execute(sa.text(f"DROP TABLE {PARTITION_SCHEMA}.{part.name}"))
    _insert_retention(scratch, part.name, part.range_from, part.range_to, days=365,
                      bypass_check=False)
    report = _verify(scratch)
    assert [n for n, _ in report.retention_problems] == [part.name]
    assert f"retention period of {SEVEN_YEARS} days" in report.retention_problems[0][1]


def test_a_retention_row_for_a_partition_still_there_is_reported(scratch):
    old = datetime(2015, 3, 1, tzinfo=UTC)
    with scratch.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition('2015-03-01')"))
    part = partition_for(old)
    with pytest.raises(sa.exc.DBAPIError, match="still exists"):
        _insert_retention(scratch, part.name, part.range_from, part.range_to,
                          bypass_check=False)
    _insert_retention(scratch, part.name, part.range_from, part.range_to)
    report = _verify(scratch)
    assert report.retention_problems == [
        (part.name, f"partition {part.name} still exists, though the row says dropped")]


def test_a_real_removal_is_covered_by_the_next_signed_checkpoint(scratch):
    """drop-expired's row passes every check; the next checkpoint covers it (count and hash
    in its signed digest); a covered row removed afterwards is reported."""
    _chain(PostgresAuditStore(scratch))
    with scratch.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition('2015-03-01')"))
    result = drop_expired(scratch, ExpiryRun(_db_now(scratch), SEVEN_YEARS, "test",
                                             names=["escalation_audit_y2015m03"]))
    assert result.removed == ["escalation_audit_y2015m03"]
    assert _verify(scratch).ok
    cp = _seal(scratch)
    assert cp.retention_count == 1
    assert signed_digest(cp)["retention_count"] == 1
    assert _verify(scratch).ok
    with scratch.begin() as conn:
        conn.execute(sa.text("ALTER TABLE audit_retention DISABLE TRIGGER ALL"))
        conn.execute(sa.text("DELETE FROM audit_retention"))
        for trg in ("no_mutation", "no_truncate", "check"):
            conn.execute(sa.text(f"ALTER TABLE audit_retention ENABLE ALWAYS TRIGGER "
                                 f"trg_audit_retention_{trg}"))
    report = _verify(scratch)
    assert report.checkpoint_errors == [
        f"checkpoint {cp.checkpoint_id}: the retention rows it covers (1) differ from the 0 "
        "stored now"]


# ------------------------------------------------------------------------- hole 2: signatures
def _forged_checkpoint_sql(engine: sa.Engine, checkpoint_id: int,
                           signature: tuple[bytes, bytes] | None = None):
    """INSERTs of a checkpoint over the ledger's current heads, chained to the last one."""
    with engine.connect() as conn:
        heads = conn.execute(sa.text(
            "SELECT DISTINCT ON (dispute_id) dispute_id, seq, row_hash, chain_created_at"
            " FROM escalation_audit ORDER BY dispute_id, seq DESC")).all()
        prev = conn.execute(sa.text("SELECT checkpoint_hash FROM audit_checkpoint"
                                    " ORDER BY checkpoint_id DESC LIMIT 1")).scalar_one()
    heads = sorted(heads, key=lambda h: h[0].bytes)
    root = merkle_root([head_leaf(d, s, bytes(h)) for d, s, h, _ in heads])
    digest = checkpoint_hash(checkpoint_id, len(heads), root, bytes(prev))
    sig, key = (None, None) if signature is None else signature
    out = [("INSERT INTO audit_checkpoint (checkpoint_id, head_count, heads_root,"
            " prev_checkpoint_hash, checkpoint_hash, actor, signature, signing_key)"
            " VALUES (:i, :n, :r, :p, :h, 'mallory', :s, :k)",
            {"i": checkpoint_id, "n": len(heads), "r": root, "p": bytes(prev), "h": digest,
             "s": sig, "k": key})]
    out += [("INSERT INTO audit_checkpoint_head VALUES (:i, :d, :s, :h, :c)",
             {"i": checkpoint_id, "d": d, "s": s, "h": bytes(h), "c": c})
            for d, s, h, c in heads]
    return out


@pytest.mark.parametrize("role", ROLES)
def test_an_unsigned_checkpoint_row_does_not_launder_a_rewrite(scratch, cli_env, tmp_path, role):
    """The issue's scenario: a chain rewritten as superuser, then checkpoint 2 inserted over
    the forged heads: the application role may not insert it; the superuser's row is
    reported as unsigned, the heads are compared with signed checkpoint 1, and the next
    seal refuses instead of signing the forged ledger."""
    store = PostgresAuditStore(scratch)
    victim = _chain(store)
    _chain(store)
    _seal(scratch)
    _rewrite_whole_chain(scratch, victim, 2, "mallory")
    forged = _forged_checkpoint_sql(scratch, 2)
    if role == "escalation_app":
        with pytest.raises(sa.exc.DBAPIError) as info:
            _as(scratch, role, *forged)
        assert info.value.orig.sqlstate == "42501"
        report = _verify(scratch)
        assert report.signature_problems == []
    else:
        _as(scratch, role, *forged)
        report = _verify(scratch)
        assert report.signature_problems == [(2, SignatureStatus.UNSIGNED)]
    assert report.checkpoint_id == 1
    assert report.checkpoint_mismatches == [(victim, 3)]
    assert report.sealed_by == {(victim, 3): 1}
    with pytest.raises(SealRefused, match="differ from checkpoint 1"):
        _seal(scratch)
    res = run_cli(_env(scratch, cli_env, tmp_path), "audit", "verify", "--all")
    assert res.returncode == 1
    assert f"dispute {victim} seq 3 differs from checkpoint 1" in res.stderr
    if role == "superuser":
        assert "checkpoint 2 is not signed under the configured public key" in res.stderr


@pytest.mark.parametrize("signer", ["another key", "the key, over other bytes"])
def test_a_wrongly_signed_checkpoint_is_not_trusted(scratch, signer):
    store = PostgresAuditStore(scratch)
    victim = _chain(store)
    _seal(scratch)
    _rewrite_whole_chain(scratch, victim, 1, "mallory")
    key = Ed25519PrivateKey.generate() if signer == "another key" else _key()
    sig = (key.sign(b"some other digest"), raw_public(key.public_key()))
    _as(scratch, "superuser", *_forged_checkpoint_sql(scratch, 2, signature=sig))
    report = _verify(scratch)
    status = (SignatureStatus.WRONG_KEY if signer == "another key"
              else SignatureStatus.INVALID)
    assert report.signature_problems == [(2, status)]
    assert report.checkpoint_id == 1 and report.checkpoint_mismatches == [(victim, 3)]


def test_the_application_role_may_not_insert_checkpoint_rows(scratch):
    _chain(PostgresAuditStore(scratch))
    _seal(scratch)
    for text, params in _forged_checkpoint_sql(scratch, 2)[:2]:
        with pytest.raises(sa.exc.DBAPIError) as info:
            _as(scratch, "escalation_app", (text, params))
        assert info.value.orig.sqlstate == "42501"


def test_the_sealer_role_may_insert_checkpoints(scratch):
    _chain(PostgresAuditStore(scratch))
    _seal(scratch)
    with scratch.begin() as conn:
        conn.execute(sa.text("SET LOCAL ROLE escalation_sealer"))
        for text, params in _forged_checkpoint_sql(scratch, 2):
            conn.execute(sa.text(text), params)
        conn.rollback()


@pytest.mark.parametrize("role", ["escalation_sealer", "escalation_app"])
def test_audit_checkpoint_runs_as_the_sealer_not_as_the_application(
    scratch, cli_env, tmp_path, role
):
    _chain(PostgresAuditStore(scratch))
    env = _env(scratch, cli_env, tmp_path)
    env["ESCALATION_DATABASE_URL"] = _as_role(env["ESCALATION_DATABASE_URL"], role)
    res = run_cli(env, "audit", "checkpoint")
    if role == "escalation_sealer":
        assert res.returncode == 0, res.stderr
        assert _verify(scratch).checkpoint_id == 1
    else:
        assert res.returncode == 2, res.stderr
        assert "may not seal checkpoints" in res.stderr and "escalation_sealer" in res.stderr
        assert "Traceback" not in res.stderr


# ------------------------------------------------------------------------- smaller
def test_digest_without_a_public_key_says_the_signature_was_not_checked(
    scratch, cli_env, tmp_path
):
    _chain(PostgresAuditStore(scratch))
    cp = _seal(scratch)
    digest = tmp_path / "cp1.json"
    digest.write_text(json.dumps(signed_digest(cp)))
    env = {k: v for k, v in _env(scratch, cli_env, tmp_path).items()
           if k != "ESCALATION_CHECKPOINT_KEY"}
    res = run_cli(env, "audit", "verify", "--all", "--digest", str(digest))
    assert res.returncode == 0, res.stderr
    assert "WARNING: the signature of" in res.stderr and "was NOT checked" in res.stderr
    res = run_cli(env, "audit", "verify", "--all", "--digest", str(digest), "--json")
    assert json.loads(res.stdout)["digest_signature_checked"] is False
    res = run_cli(env, "audit", "verify", "--all", "--digest", str(digest),
                  "--public-key", str(tmp_path / "cp.pub"), "--json")
    assert json.loads(res.stdout)["digest_signature_checked"] is True


def test_verify_counts_rows_and_disputes(scratch, cli_env, tmp_path):
    store = PostgresAuditStore(scratch)
    _chain(store)
    _chain(store)
    _seal(scratch)
    res = run_cli(_env(scratch, cli_env, tmp_path), "audit", "verify", "--all")
    assert res.returncode == 0, res.stderr
    assert ("ok: chains intact, 6 row(s) of 2 chain(s) checked; last signed checkpoint 1 "
            "matches; projection rows NOT compared with their chains (add --projection)"
            ) in res.stdout
    assert "note: projection rows (escalation_state) were NOT compared" in res.stderr
    res = run_cli(_env(scratch, cli_env, tmp_path), "audit", "verify", "--all", "--json")
    body = json.loads(res.stdout)
    assert (body["rows"], body["disputes"], body["projection_compared"]) == (6, 2, False)
    res = run_cli(_env(scratch, cli_env, tmp_path), "audit", "verify", "--all", "--projection")
    assert res.returncode == 0, res.stderr
    assert ("6 row(s) of 2 chain(s) checked; last signed checkpoint 1 matches; projection "
            "rows compared with their chains") in res.stdout
    assert any("--projection" in note for note in body["notes"])
    res = run_cli(_env(scratch, cli_env, tmp_path), "audit", "verify", "--all", "--projection",
                  "--json")
    body = json.loads(res.stdout)
    assert (body["ok"], body["rows"], body["projection_compared"]) == (True, 6, True)
    assert not any("--projection" in note for note in body["notes"])


def test_a_digest_mismatch_names_the_digest_checkpoint(scratch, cli_env, tmp_path, monkeypatch):
    """A forged head sealed and signed by a later checkpoint (a sealer without the checks):
    the older digest's mismatch names checkpoint 1, the digest's, not the last one."""
    from escalation.service_layer import checkpoint as cpmod

    store = PostgresAuditStore(scratch)
    victim = _chain(store)
    older = _seal(scratch)
    digest = tmp_path / "cp1.json"
    digest.write_text(json.dumps(signed_digest(older)))
    _rewrite_whole_chain(scratch, victim, 2, "mallory")
    with monkeypatch.context() as m:  # no head check, and a full seal (sealing the tails)
        m.setattr(cpmod, "_check_heads", lambda *a, **k: None)
        m.setattr(cpmod, "_trusted", lambda *a, **k: None)
        _seal(scratch)
    env = _env(scratch, cli_env, tmp_path)
    res = run_cli(env, "audit", "verify", "--all", "--digest", str(digest),
                  "--public-key", str(tmp_path / "cp.pub"))
    assert res.returncode == 1
    assert f"dispute {victim} seq 3 differs from checkpoint 1" in res.stderr
    assert "differs from checkpoint 2" not in res.stderr


def _old_chain(engine: sa.Engine, month: str) -> UUID:
    """A chain created (and last written) in ``month`` (e.g. ``2015-03``): a dispute's rows
    copied under a new id with old times and their hashes recomputed, and its projection row
    copied with them, as if enqueued then."""
    import uuid

    from escalation.domain import audit_hash

    source = _chain(PostgresAuditStore(engine))
    new_id = uuid.uuid4()
    old = datetime.fromisoformat(f"{month}-10T09:00:00+00:00")
    with engine.begin() as conn:
        rows = conn.execute(sa.text("SELECT * FROM escalation_audit WHERE dispute_id = :d"
                                    " ORDER BY seq"), {"d": source}).mappings().all()
        prev = bytes(32)
        for row in rows:
            fields = {**row, "dispute_id": new_id, "decided_at": old, "recorded_at": old,
                      "chain_created_at": old}
            fields["prev_hash"] = prev
            fields["row_hash"] = prev = audit_hash.row_hash(prev, fields)
            cols = list(fields)
            conn.execute(sa.text(f"INSERT INTO escalation_audit ({', '.join(cols)}) VALUES "
                                 f"({', '.join(':' + c for c in cols)})"),
                         {**fields, "details": json.dumps(fields["details"])})
        # its projection row, written with the rows as every append does: the chain's
        # current head, which an incremental seal compares with the head it sealed
        from escalation.adapters.tables import escalation_state

        state = conn.execute(sa.select(escalation_state).where(
            escalation_state.c.dispute_id == source)).mappings().one()
        conn.execute(escalation_state.insert().values(
            {**state, "dispute_id": new_id, "last_hash": prev, "created_at": old,
             "updated_at": old}))
    return new_id


def test_a_sealed_chain_removed_by_retention_is_excused_only_by_a_true_row(scratch):
    """A chain sealed in a signed checkpoint whose 2015 partition drop-expired removed: verify
    passes and the next seal covers the removal. The same chain in a partition dropped by
    hand and logged with a forged range is a mismatch and a named retention problem."""
    with scratch.begin() as conn:
        for m in ("2015-03-01", "2016-05-01"):
            conn.execute(sa.text("SELECT escalation_audit_ensure_partition(:m)"), {"m": m})
    kept = _old_chain(scratch, "2015-03")
    hidden = _old_chain(scratch, "2016-05")
    _seal(scratch)
    assert drop_expired(scratch, ExpiryRun(_db_now(scratch), SEVEN_YEARS, "test",
                                           names=["escalation_audit_y2015m03"])).removed == [
                            "escalation_audit_y2015m03"]
    report = _verify(scratch)
    assert report.ok, report
    assert _seal(scratch).retention_count == 1
    # by hand: the 2016 partition dropped, logged as if its range were another month's
    with scratch.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE escalation_audit DETACH PARTITION "
                             f"{PARTITION_SCHEMA}.escalation_audit_y2016m05"))
        conn.execute(sa.text(f"DROP TABLE {PARTITION_SCHEMA}.escalation_audit_y2016m05"))
    _insert_retention(scratch, "escalation_audit_y2016m05", datetime(2016, 4, 1, tzinfo=UTC),
                      datetime(2016, 6, 1, tzinfo=UTC))
    report = _verify(scratch)
    assert [n for n, _ in report.retention_problems] == ["escalation_audit_y2016m05"]
    assert report.checkpoint_mismatches == [(hidden, 3)]
    assert kept not in {d for d, _ in report.checkpoint_mismatches}


@pytest.mark.parametrize("role", ["escalation_app", "escalation_auditor"])
def test_verify_runs_as_the_application_and_the_auditor_role(scratch, cli_env, tmp_path, role):
    """verify reads every table it checks (the ladder chains' heads on ``ladder_release``
    included) with the grants of the application role and of the read-only auditor role."""
    _chain(PostgresAuditStore(scratch))
    _seal(scratch)
    env = _env(scratch, cli_env, tmp_path)
    env["ESCALATION_DATABASE_URL"] = _as_role(env["ESCALATION_DATABASE_URL"], role)
    res = run_cli(env, "audit", "verify", "--all")
    assert res.returncode == 0, res.stderr
    assert "permission denied" not in res.stderr

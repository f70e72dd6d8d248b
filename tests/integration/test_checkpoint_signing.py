"""Checkpoints are signed with Ed25519; whoever holds the public key and an old digest detects
a rewrite offline (signature) and against the database (heads), and a digest rewritten by
someone without the private key does not verify."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from tests.helpers import run_cli as _cli
from tests.integration.test_audit_checkpoint import _chain, _rewrite_whole_chain


def test_signed_checkpoint_verifies_offline_and_exposes_a_rewrite(
    scratch, cli_env: dict[str, str], tmp_path: Path
) -> None:
    engine: sa.Engine = scratch
    url = engine.url.render_as_string(hide_password=False)
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    env = {k: v for k, v in cli_env.items() if k != "ESCALATION_CHECKPOINT_KEY"}
    env["ESCALATION_DATABASE_URL"] = url
    assert _cli(env, "audit", "keygen", "--private-out", str(priv),
                "--public-out", str(pub)).returncode == 0
    assert priv.stat().st_mode & 0o077 == 0
    # without a key, sealing is refused (one line, exit 2)
    res = _cli(env, "audit", "checkpoint")
    assert res.returncode == 2 and "ESCALATION_CHECKPOINT_KEY_FILE" in res.stderr
    env["ESCALATION_CHECKPOINT_KEY_FILE"] = str(priv)
    assert _cli(env, "audit", "public-key").stdout.encode() == pub.read_bytes()
    store = PostgresAuditStore(engine)
    victim = _chain(store)
    _chain(store)
    d1 = tmp_path / "d1.json"
    assert _cli(env, "audit", "checkpoint", "--out", str(d1)).returncode == 0
    assert json.loads(d1.read_text())["signature"]["alg"] == "Ed25519"
    _chain(store)
    d2 = tmp_path / "d2.json"
    assert _cli(env, "audit", "checkpoint", "--out", str(d2)).returncode == 0
    ok = _cli(env, "audit", "verify-digest", str(d2), "--public-key", str(pub),
              "--previous", str(d1))
    assert ok.returncode == 0, ok.stderr
    assert "chained to checkpoint" in ok.stdout
    # a --previous that is not the checkpoint just before: refused, never an unchecked "ok"
    for newer, older in ((d1, d2), (d1, d1)):
        res = _cli(env, "audit", "verify-digest", str(newer), "--public-key", str(pub),
                   "--previous", str(older))
        assert res.returncode == 1 and "not the one just before" in res.stderr, res.stderr
    # the older digest given as the newer: said which way round they go, and that 1 is first
    assert "--previous takes the older digest" in res.stderr
    assert "checkpoint 1 is the first: it has no previous one" in res.stderr, res.stderr
    # a digest edited without the private key (e.g. to match rewritten tables) fails offline
    forged = {**json.loads(d1.read_text()), "heads_root": "00" * 32}
    bad = tmp_path / "forged.json"
    bad.write_text(json.dumps(forged))
    res = _cli(env, "audit", "verify-digest", str(bad), "--public-key", str(pub))
    assert res.returncode == 1 and "does not verify" in res.stderr
    res = _cli(env, "audit", "verify", "--digest", str(bad), "--public-key", str(pub))
    assert res.returncode == 1 and "signature does not verify" in res.stderr
    # a chain rewritten end to end: the old signed digest exposes it, for that dispute too
    _rewrite_whole_chain(engine, victim, 2, "mallory")
    res = _cli(env, "audit", "verify", "--dispute", str(victim), "--digest", str(d1),
               "--public-key", str(pub))
    assert res.returncode == 1
    assert f"dispute {victim} seq 3 differs from checkpoint" in res.stderr
    # and the forged head is not sealed
    res = _cli(env, "audit", "checkpoint")
    assert res.returncode == 1 and "refusing to seal" in res.stderr

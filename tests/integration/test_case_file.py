"""The examiner's case file: ``audit case-file`` exports a Reg E dispute with its rows,
deadlines (rule, citation, met/missed), ladder file, calendars, the signed checkpoint digest
and an inclusion proof; ``audit verify-bundle`` checks it with no database or Redis
reachable, fails on any one-byte edit, on a forged chain re-signed with the operator's key
(the inclusion proof in the old signed root fails) and on a file re-signed with another key
when the examiner pins the key; a dispute that does not verify gets no case file."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.domain.case_file import encode, public_key_from_pem, verify_bundle
from tests.conftest import signing_key_pem
from tests.helpers import run_cli
from tests.integration.test_audit_checkpoint import _chain, _rewrite_whole_chain

OFFLINE = {"ESCALATION_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
           "ESCALATION_REDIS_URL": "redis://127.0.0.1:1/0"}


def _sign(doc: dict[str, Any], pem: bytes) -> dict[str, Any]:
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    body = {k: v for k, v in doc.items() if k != "signature"}
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    value = key.sign(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                ensure_ascii=False).encode())
    return {**body, "signature": {"alg": "Ed25519", "public_key": base64.b64encode(raw).decode(),
                                  "value": base64.b64encode(value).decode()}}


def _rehash(entry: dict[str, Any]) -> None:
    """Recompute a dispute's row hashes after an edit (what a forger would do)."""
    prev = bytes(32)
    for row in entry["rows"]:
        row["prev_hash"] = prev.hex()
        prev = hashlib.sha256(prev + row["canonical"].encode()).digest()
        row["row_hash"] = prev.hex()


def test_case_file_exports_and_verifies_offline(scratch: sa.Engine, cli_env: dict[str, str],
                                                tmp_path: Path) -> None:
    env = {**cli_env, "ESCALATION_OPERATOR": "jane.doe",
           "ESCALATION_DATABASE_URL": scratch.url.render_as_string(hide_password=False)}
    did = str(uuid.uuid4())
    res = run_cli(env, "enqueue", "--dispute-id", did, "--ladder", "reg_e_error_resolution",
                  "--tier", "standard", "--opened-at", "2026-12-02T09:00:00+00:00",
                  "--notice-at", "2026-12-01T14:30:00+00:00",
                  "--attribute", "new_account=false", "--attribute", "point_of_sale=false",
                  "--attribute", "foreign_initiated=false", "--materiality", "1250.00",
                  "--source-hash", "9b1d")
    assert res.returncode == 0, res.stderr
    store = PostgresAuditStore(scratch)
    other = _chain(store)
    before = run_cli(env, "audit", "case-file", did, "--out", str(tmp_path / "x.json"))
    assert before.returncode == 1 and "no checkpoint yet" in before.stderr
    digest_file = tmp_path / "cp1.json"
    assert run_cli(env, "audit", "checkpoint", "--out", str(digest_file)).returncode == 0
    res = run_cli(env, "resolve", did, "--outcome", "error_corrected", "--reason", "refunded")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "case.json"
    res = run_cli(env, "audit", "case-file", did, "--out", str(out), "--actor", "examiner.desk")
    assert res.returncode == 0, res.stderr
    pub = tmp_path / "cp.pub"
    pub.write_text(run_cli(env, "audit", "public-key").stdout)

    raw = out.read_bytes()
    doc = json.loads(raw)
    (entry,) = doc["disputes"]
    assert entry["dispute_id"] == did and len(entry["rows"]) == 2
    assert entry["sealed"]["seq"] == 1 and entry["sealed"]["proof"]
    # the digest is the one `audit checkpoint` wrote, signature included (Ed25519 is
    # deterministic), so the examiner can compare it with the copy kept elsewhere
    assert doc["checkpoint"] == json.loads(digest_file.read_text())
    deadlines = {d["deadline"]: d for d in entry["deadlines"]}
    assert deadlines and all(d["citation"].startswith("12 CFR 1005") for d in deadlines.values())
    assert {d["status"] for d in deadlines.values()} <= {"met", "missed", "at_risk", "pending",
                                                          "undetermined"}
    assert any(d["rule"] for d in deadlines.values())
    (ladder,) = doc["ladders"]
    assert ladder["ladder"] == "reg_e_error_resolution"
    assert hashlib.sha256(ladder["text"].encode()).hexdigest() == ladder["sha256"]
    assert doc["calendars"]["versions"]

    # offline: no database, no Redis reachable
    offline = {**env, **OFFLINE}
    res = run_cli(offline, "audit", "verify-bundle", str(out), "--public-key", str(pub))
    assert res.returncode == 0, res.stderr
    assert "ok:" in res.stdout and "pinned key" in res.stdout
    assert "rows 2-2 are newer than the checkpoint" in res.stderr
    res = run_cli(offline, "audit", "verify-bundle", str(out))
    assert res.returncode == 0 and "PUBLIC KEY NOT PINNED" in res.stderr

    pinned = public_key_from_pem(pub.read_bytes())
    assert verify_bundle(raw, pinned).ok
    # any one-byte edit fails: every byte of the first row's canonical bytes and of the
    # signatures, and a sample spread over the whole file
    first = raw.index(b'"canonical":') + 12
    spots = [*range(first, first + 400), *range(0, len(raw) - 1, max(1, len(raw) // 700)),
             len(raw) - 1, raw.rindex(b'"value"') + 10, raw.index(b'"heads_root"') + 15]
    for at in spots:
        for flip in (0x01, 0x20):
            bent = bytearray(raw)
            bent[at] ^= flip
            assert not verify_bundle(bytes(bent), pinned).ok, (at, raw[at - 20: at + 20])
    assert not verify_bundle(raw[:-1], pinned).ok and not verify_bundle(raw + b" ", pinned).ok

    # a forged chain (actor changed, hashes recomputed) re-signed with the operator's own
    # key still fails: its head is not in the signed root of the old checkpoint
    key_pem = signing_key_pem().encode()
    forged = json.loads(raw)
    row = json.loads(forged["disputes"][0]["rows"][0]["canonical"])
    row["actor"] = "mallory"
    forged["disputes"][0]["rows"][0]["canonical"] = json.dumps(
        row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    _rehash(forged["disputes"][0])
    report = verify_bundle(encode(_sign(forged, key_pem)), pinned)
    assert not report.ok
    assert any("not in the signed Merkle root" in e for e in report.errors), report.errors
    # a deadline turned from missed/pending to met and re-signed by another key: refused
    # under the pinned key (and without a pin the result says the key was not pinned)
    other_key = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    edited = json.loads(raw)
    edited["disputes"][0]["deadlines"][0]["status"] = "met"
    edited["checkpoint"] = _sign(edited["checkpoint"], other_key)
    report = verify_bundle(encode(_sign(edited, other_key)), pinned)
    assert not report.ok and "not signed by the pinned public key" in report.errors[0]
    assert any("NOT PINNED" in w for w in verify_bundle(encode(_sign(edited, other_key))).warnings)

    # a dispute whose chain was rewritten gets no case file
    _rewrite_whole_chain(scratch, other, 2, "mallory")
    res = run_cli(env, "audit", "case-file", str(other), "--out", str(tmp_path / "o.json"))
    assert res.returncode == 1 and "does not verify" in res.stderr, res.stderr
    assert not (tmp_path / "o.json").exists()
    res = run_cli(env, "audit", "case-file", str(uuid.uuid4()), "--out", str(tmp_path / "n.json"))
    assert res.returncode != 0 and "no audit rows" in res.stderr
    res = run_cli(env, "audit", "case-file", "--decision", "NO_SUCH", "--out",
                  str(tmp_path / "n.json"))
    assert res.returncode == 2 and "unknown decision/event 'NO_SUCH'" in res.stderr, res.stderr


def test_case_file_names_a_dispute_by_its_external_id_as_audit_show_does(
        scratch: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "ESCALATION_DATABASE_URL": scratch.url.render_as_string(
        hide_password=False)}
    ext = f"OLD-{uuid.uuid4().hex[:8]}"
    res = run_cli(env, "enqueue", "--source", "t", "--external-id", ext, "--source-hash", "ab",
                  "--due-in", "1h", "--materiality", "10.00")
    assert res.returncode == 0, res.stderr
    assert run_cli(env, "audit", "checkpoint", "--out", str(tmp_path / "cp.json")).returncode == 0
    shown = run_cli(env, "audit", "show", ext, "--json")
    assert shown.returncode == 0, shown.stderr
    did = json.loads(shown.stdout.splitlines()[0])["dispute_id"]
    out = tmp_path / "x.json"
    res = run_cli(env, "audit", "case-file", ext, "--out", str(out))
    assert res.returncode == 0, res.stderr
    (entry,) = json.loads(out.read_bytes())["disputes"]
    assert entry["dispute_id"] == did
    missing = run_cli(env, "audit", "case-file", "NO-SUCH-1", "--out", str(tmp_path / "n.json"))
    assert missing.returncode == 3 and "no dispute with id or external id" in missing.stderr
    assert not (tmp_path / "n.json").exists()


def test_the_offline_verifier_needs_no_server_library() -> None:
    code = ("import sys, escalation.domain.case_file; "
            "bad = {'sqlalchemy', 'psycopg', 'redis'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_filtered_set_in_one_case_file_and_bad_requests(scratch: sa.Engine, monkeypatch) -> None:
    import pytest

    from escalation.adapters.calendar_files import load_institution_calendars
    from escalation.adapters.checkpoints import PostgresCheckpoints
    from escalation.adapters.ladder_files import LadderCatalog
    from escalation.adapters.signing import Ed25519DigestSigner
    from escalation.bootstrap import case_file_ports_for
    from escalation.domain.errors import InvalidInput
    from escalation.ports import AuditFilter
    from escalation.service_layer.case_file import ExportCaseFile, export_case_file
    from escalation.service_layer.checkpoint import create_checkpoint
    from escalation.settings import get_settings
    from tests.integration.audit_support import T0, make_escalation

    monkeypatch.setenv("ESCALATION_CHECKPOINT_KEY", signing_key_pem())
    store = PostgresAuditStore(scratch)
    climbed = {str(_chain(store)) for _ in range(3)}
    store.record_enqueue(make_escalation(), "svc", T0)  # never promoted: not in the set
    key = serialization.load_pem_private_key(signing_key_pem().encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    create_checkpoint(PostgresCheckpoints(scratch), "test", Ed25519DigestSigner(key))
    settings = get_settings()
    cals = load_institution_calendars(None, settings.institution_calendar,
                                      settings.institution_timezone)
    ports = case_file_ports_for(scratch, settings,
                                LadderCatalog.from_dir(settings.ladders_dir, strict=False).get,
                                cals)
    data = export_case_file(ExportCaseFile(
        (), "examiner.desk", AuditFilter(decision="PROMOTED_TO_COMPLIANCE")), ports)
    doc = json.loads(data)
    assert {d["dispute_id"] for d in doc["disputes"]} == climbed
    assert all(len(d["rows"]) == 3 and d["sealed"]["seq"] == 3 for d in doc["disputes"])
    raw_key = key.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
    report = verify_bundle(data, raw_key)
    assert report.ok and report.key_pinned, report.errors
    # nothing named, or a search that matches nothing: refused, naming the field
    for cmd in (ExportCaseFile((), "x"),
                ExportCaseFile((), "x", AuditFilter(decision="PROMOTED_TO_NOWHERE"))):
        with pytest.raises(InvalidInput, match="dispute_ids"):
            export_case_file(cmd, ports)

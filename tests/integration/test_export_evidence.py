"""A whole-ledger export names the checkpoint that covers it: ``audit export`` writes the
signed digest of the newest checkpoint signed by the configured key and that checkpoint's
sealed heads next to the file, and signs the manifest; ``audit verify-bundle`` checks the
export offline (CSV with a byte order mark and JSON Lines): file SHA-256, every row's hash
and link, the heads against the signed root. A rewritten chain (hashes and file SHA-256
recomputed, manifest signature removed) is caught by the sealed head; an edited heads file,
a flipped byte and another key are caught too."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.domain.audit_hash import canonical_bytes
from escalation.domain.case_file import public_key_from_pem, verify_export
from tests.helpers import run_cli
from tests.integration.test_audit_checkpoint import _chain
from tests.integration.test_case_file import OFFLINE


def _verify(manifest: dict[str, Any], data: bytes, heads: bytes | None,
            key: bytes | None) -> Any:
    lines = data.splitlines(keepends=True)
    return verify_export(manifest, lines, None if heads is None else
                         heads.splitlines(keepends=True), key)


def test_export_names_its_checkpoint_and_verifies_offline(
        scratch: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "ESCALATION_DATABASE_URL":
           scratch.url.render_as_string(hide_password=False)}
    store = PostgresAuditStore(scratch)
    victim = _chain(store)
    _chain(store)
    assert run_cli(env, "audit", "checkpoint").returncode == 0
    _chain(store)  # after the checkpoint: not covered yet
    pub = tmp_path / "cp.pub"
    pub.write_text(run_cli(env, "audit", "public-key").stdout)
    key = public_key_from_pem(pub.read_bytes())
    for fmt, extra in (("jsonl", ()), ("csv", ("--bom",))):
        out = tmp_path / f"ledger.{fmt}"
        res = run_cli(env, "audit", "export", "--format", fmt, "--out", str(out), *extra)
        assert res.returncode == 0, res.stderr
        manifest = json.loads((tmp_path / f"ledger.{fmt}.manifest.json").read_text())
        cp = manifest["checkpoint"]
        assert cp["digest"]["checkpoint_id"] == 1 and cp["digest"]["signature"]["alg"] == "Ed25519"
        assert manifest["signature"]["alg"] == "Ed25519"
        heads = (tmp_path / cp["heads_file"]).read_bytes()
        assert hashlib.sha256(heads).hexdigest() == cp["heads_sha256"]
        for target in (out, tmp_path / f"ledger.{fmt}.manifest.json"):
            res = run_cli({**env, **OFFLINE}, "audit", "verify-bundle", str(target),
                          "--public-key", str(pub))
            assert res.returncode == 0, res.stderr
            assert "ok:" in res.stdout and "1 dispute(s) are not covered" in res.stderr
        data = out.read_bytes()
        assert _verify(manifest, data, heads, key).ok
        # a flipped byte in the file, in the heads, another key pinned: each fails
        bent = bytearray(data)
        bent[len(bent) // 2] ^= 0x01
        assert not _verify(manifest, bytes(bent), heads, key).ok
        bent_heads = bytearray(heads)
        bent_heads[40] ^= 0x01
        assert not _verify(manifest, data, bytes(bent_heads), key).ok
        assert not _verify(manifest, data, heads, bytes(32)).ok

    # a consistent rewrite of one chain in the JSON Lines export: the file SHA-256 fixed,
    # the manifest's signature dropped (the forger has no key): the sealed head exposes it
    manifest = json.loads((tmp_path / "ledger.jsonl.manifest.json").read_text())
    heads = (tmp_path / manifest["checkpoint"]["heads_file"]).read_bytes()
    rows = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_bytes().split(b"\n")
            if line]
    prev = None
    for row in sorted((r for r in rows if r["dispute_id"] == str(victim)),
                      key=lambda r: r["seq"]):
        if row["seq"] == 1:
            row["actor"] = "mallory"
        if prev is not None:
            row["prev_hash"] = prev
        row["row_hash"] = hashlib.sha256(bytes.fromhex(row["prev_hash"])
                                         + canonical_bytes(row)).hexdigest()
        prev = row["row_hash"]
    forged = b"".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
                      for r in rows)
    unsigned = {k: v for k, v in manifest.items() if k != "signature"}
    unsigned["sha256"] = hashlib.sha256(forged).hexdigest()
    report = _verify(unsigned, forged, heads, key)
    assert not report.ok
    assert any(f"dispute {victim} seq 3 differs from the head checkpoint 1 sealed" in e
               for e in report.errors), report.errors
    assert any("not signed by the pinned public key" in e for e in report.errors)


def _forge(data: bytes, victim: str) -> bytes:
    """A JSON Lines export with one row's actor changed and that dispute's chain rehashed
    (what a forger without the key can do)."""
    rows = [json.loads(line) for line in data.split(b"\n") if line]
    prev = None
    for row in sorted((r for r in rows if r["dispute_id"] == victim), key=lambda r: r["seq"]):
        if row["seq"] == 1:
            row["actor"] = "mallory"
        if prev is not None:
            row["prev_hash"] = prev
        row["row_hash"] = hashlib.sha256(bytes.fromhex(row["prev_hash"])
                                         + canonical_bytes(row)).hexdigest()
        prev = row["row_hash"]
    return b"".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
                    for r in rows)


def test_verify_bundle_wants_the_pinned_signature_the_file_given_and_reads_empty_text(
        scratch: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "ESCALATION_DATABASE_URL":
           scratch.url.render_as_string(hide_password=False)}
    offline = {**env, **OFFLINE}
    # the CLI's first use releases every ladder version as baseline: ladder chains whose
    # trace_id is the empty string (not NULL)
    res = run_cli(env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--ladder",
                  "dispute_review", "--tier", "standard", "--opened-at",
                  "2026-12-02T09:00:00+00:00", "--materiality", "1250.00",
                  "--source-hash", "9b1d")
    assert res.returncode == 0, res.stderr
    victim = str(_chain(PostgresAuditStore(scratch)))
    assert run_cli(env, "audit", "checkpoint").returncode == 0
    pub = tmp_path / "p.pem"
    pub.write_text(run_cli(env, "audit", "public-key").stdout)

    # a genuine CSV export verifies, its ladder rows' "" included
    csv_file = tmp_path / "audit.csv"
    assert run_cli(env, "audit", "export", "--format", "csv", "--out",
                   str(csv_file)).returncode == 0
    res = run_cli(offline, "audit", "verify-bundle", str(csv_file), "--public-key", str(pub))
    assert res.returncode == 0, res.stderr
    assert "ok:" in res.stdout and "does not recompute" not in res.stderr
    baseline = [line for line in csv_file.read_text().splitlines() if "LADDER_BASELINE" in line]
    assert baseline and all(",'," in line for line in baseline)  # trace_id "" as a lone '

    # an edited export stripped of its signature and checkpoint fails under a pinned key
    ex = tmp_path / "s.jsonl"
    assert run_cli(env, "audit", "export", "--format", "jsonl", "--out", str(ex)).returncode == 0
    manifest_file = tmp_path / "s.jsonl.manifest.json"
    genuine = json.loads(manifest_file.read_text())
    forged = _forge(ex.read_bytes(), victim)
    stripped = {k: v for k, v in genuine.items() if k not in ("signature", "checkpoint")}
    stripped["sha256"] = hashlib.sha256(forged).hexdigest()
    ex.write_bytes(forged)
    manifest_file.write_text(json.dumps(stripped))
    res = run_cli(offline, "audit", "verify-bundle", str(ex), "--public-key", str(pub))
    assert res.returncode == 1 and "\nok:" not in "\n" + res.stdout
    assert "the file is not signed by the pinned public key" in res.stderr
    assert "names no checkpoint signed by the pinned public key" in res.stderr
    # without a pinned key it holds together but is said loudly to be unsigned, never "ok"
    res = run_cli(offline, "audit", "verify-bundle", str(ex))
    assert res.returncode == 0, res.stderr
    last = res.stdout.splitlines()[-1]
    assert last.startswith("NOT SIGNED:"), res.stdout
    assert not any(line.startswith("ok:") for line in res.stdout.splitlines())
    assert "EXPORT NOT SIGNED" in res.stderr
    res = run_cli(offline, "audit", "verify-bundle", str(ex), "--json")
    assert json.loads(res.stdout)["signed"] is False

    # the file given is the file checked: a copy with its manifest copied beside it fails on
    # the name, and an edited copy fails on its own bytes too
    original = tmp_path / "ex.jsonl"
    assert run_cli(env, "audit", "export", "--format", "jsonl", "--out",
                   str(original)).returncode == 0
    copy = tmp_path / "ex2.jsonl"
    copy.write_bytes(original.read_bytes())
    (tmp_path / "ex2.jsonl.manifest.json").write_bytes(
        (tmp_path / "ex.jsonl.manifest.json").read_bytes())
    for target in (copy, tmp_path / "ex2.jsonl.manifest.json"):
        res = run_cli(offline, "audit", "verify-bundle", str(target), "--public-key", str(pub))
        assert res.returncode == 1 and "\nok:" not in "\n" + res.stdout
        assert "the manifest is the manifest of 'ex.jsonl', not of 'ex2.jsonl'" in res.stderr
        assert "SHA-256 differs" not in res.stderr
    bent = bytearray(copy.read_bytes())
    bent[len(bent) // 2] ^= 0x01
    copy.write_bytes(bytes(bent))
    res = run_cli(offline, "audit", "verify-bundle", str(copy), "--public-key", str(pub))
    assert res.returncode == 1 and "SHA-256 differs from the manifest's" in res.stderr
    res = run_cli(offline, "audit", "verify-bundle", str(original), "--public-key", str(pub))
    assert res.returncode == 0 and "ok:" in res.stdout, res.stderr

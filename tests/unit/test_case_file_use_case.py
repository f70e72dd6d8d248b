"""The examiner's case file and the export manifest (service_layer.case_file) on the
in-memory fakes: a hashed FakeAuditLog under a FakeCheckpointStore, sealed and signed with a
fixed Ed25519 key. What the file carries is read back by the offline verifier
(``domain.case_file.verify_bundle``) and member by member; what is refused writes nothing.
Against PostgreSQL and through the CLI and API: tests/integration/test_case_file.py,
tests/api/test_api_case_file.py."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.adapters.evidence import Ed25519DocumentSigner
from escalation.adapters.signing import Ed25519DigestSigner, Ed25519DigestVerifier
from escalation.domain.calendars import builtin_calendars
from escalation.domain.case_file import public_key_from_pem, verify_bundle
from escalation.domain.errors import InvalidInput, NotFound
from escalation.domain.merkle import head_leaf, merkle_root, root_from_inclusion
from escalation.ports import EvidenceFile
from escalation.service_layer.case_file import (
    CaseFilePorts,
    CaseFileRefused,
    ExportCaseFile,
    export_case_file,
    heads_path,
    seal_export,
)
from escalation.service_layer.checkpoint import seal_checkpoint, signed_digest
from tests.fakes import (
    FakeAuditLog,
    FakeCaseFileSources,
    FakeCheckpointStore,
    FakeLadders,
    FakeLedgerReports,
    FakeLedgerSearch,
    pending,
)
from tests.unit.test_fire_and_enqueue import LADDER

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))  # fixed: reproducible signatures
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
ROOT = Path(__file__).resolve().parents[2]
LADDER_TEXT = (ROOT / "ladders" / "dispute_review.v1.toml").read_text("utf-8")


class World:
    """Three disputes on a hashed ledger (a promoted to seq 2), the shipped ladder file."""

    def __init__(self) -> None:
        self.log = FakeAuditLog(hashed=True)
        self.store = FakeCheckpointStore(self.log, now=T0)
        self.a, self.b, self.c = (uuid.UUID(int=n) for n in (1, 2, 3))
        self.log.record_enqueue_many(
            [pending(LADDER, "standard", T0 + timedelta(hours=24), dispute_id=d,
                     external_id=f"ext-{d.int}") for d in (self.a, self.b, self.c)], "svc", T0)
        self.log.append(self.log.states[self.a], "PROMOTED", "w1", T0 + timedelta(hours=24),
                        tier="senior")
        self.signer = Ed25519DocumentSigner(KEY)
        self.sources = FakeCaseFileSources(ladder_files={("dispute_review", 1): EvidenceFile(
            "dispute_review.v1.toml", LADDER_TEXT,
            hashlib.sha256(LADDER_TEXT.encode()).hexdigest())})
        self.ports = CaseFilePorts(
            events=self.log, ledger=FakeLedgerSearch(self.log),
            reports=FakeLedgerReports(self.log, T0), checkpoints=self.store,
            ladders=FakeLadders([LADDER]).get, calendars=builtin_calendars(),
            files=self.sources, signer=self.signer)

    def seal(self, key: Ed25519PrivateKey = KEY) -> None:
        seal_checkpoint(self.store, "ops", Ed25519DigestSigner(key),
                        Ed25519DigestVerifier(key.public_key()))

    def export(self, *ids: uuid.UUID) -> bytes:
        return export_case_file(ExportCaseFile(dispute_ids=ids, actor="examiner"), self.ports)


def test_the_case_file_carries_every_row_the_sealed_head_and_its_proof() -> None:
    w = World()
    w.seal()
    raw = w.export(w.a, w.b, w.a)  # a named twice: once in the file
    report = verify_bundle(raw, public_key_from_pem(w.signer.public_key_pem().encode()))
    assert report.ok, report.errors
    assert report.checkpoint_id == 1
    doc = json.loads(raw)
    assert (doc["format"], doc["created_by"]) == ("escalation-case-file/1", "examiner")
    assert doc["checkpoint"] == signed_digest(w.store.checkpoints[0])
    assert [d["dispute_id"] for d in doc["disputes"]] == [str(w.a), str(w.b)]
    a = doc["disputes"][0]
    assert a["external_id"] == "ext-1"
    trail = w.log.trail(w.a)
    assert [r["row_hash"] for r in a["rows"]] == [r.row_hash for r in trail]
    assert json.loads(a["rows"][1]["canonical"])["event"] == "PROMOTED"
    # a's sealed head is its seq 2; the heads sort by UUID bytes, so a (int 1) is leaf 0 of 3
    assert (a["sealed"]["seq"], a["sealed"]["leaf_index"]) == (2, 0)
    leaf = head_leaf(w.a, 2, bytes.fromhex(trail[-1].row_hash))
    proof = [bytes.fromhex(p) for p in a["sealed"]["proof"]]
    assert root_from_inclusion(leaf, 0, 3, proof) == w.store.checkpoints[0].heads_root
    assert doc["ladders"] == [{"ladder": "dispute_review", "version": 1,
                               "file": "dispute_review.v1.toml",
                               "sha256": hashlib.sha256(LADDER_TEXT.encode()).hexdigest(),
                               "text": LADDER_TEXT}]


def test_a_file_changed_after_signing_fails_the_offline_verifier() -> None:
    w = World()
    w.seal()
    raw = w.export(w.b)
    changed = raw.replace(b"ext-2", b"ext-9")
    assert changed != raw
    assert not verify_bundle(changed).ok


def test_without_a_checkpoint_signed_by_the_key_nothing_is_exported() -> None:
    w = World()
    with pytest.raises(CaseFileRefused, match="no checkpoint yet signed by the configured key"):
        w.export(w.a)
    w.seal(OTHER_KEY)  # a checkpoint, but signed by another key: passed over
    with pytest.raises(CaseFileRefused, match="no checkpoint yet signed by the configured key"):
        w.export(w.a)


def test_a_dispute_that_does_not_verify_is_refused_naming_it() -> None:
    w = World()
    w.seal()
    i = next(i for i, r in enumerate(w.log.ledger) if r.dispute_id == w.b)
    w.log.ledger[i] = replace(w.log.ledger[i], actor="mallory")  # hash left as it was
    with pytest.raises(CaseFileRefused, match=f"dispute {w.b} does not verify") as refused:
        w.export(w.a, w.b)
    # said in words, not as Python reprs of the report's lists
    assert "UUID(" not in str(refused.value) and "[]" not in str(refused.value)


def test_bad_input_names_the_field() -> None:
    w = World()
    w.seal()
    with pytest.raises(InvalidInput, match="dispute_ids: name at least one dispute") as no_ids:
        w.export()
    assert no_ids.value.field == "dispute_ids"
    with pytest.raises(NotFound, match="dispute_ids: no audit rows for dispute"):
        w.export(uuid.UUID(int=99))


def test_the_export_manifest_names_the_signed_checkpoint_and_its_heads(tmp_path: Path) -> None:
    w = World()
    w.seal()
    out, manifest_file = tmp_path / "ledger.csv", tmp_path / "ledger.manifest.json"
    manifest_file.write_text(json.dumps({"row_count": 4}))
    manifest = seal_export(out, manifest_file, w.store, w.signer)
    assert json.loads(manifest_file.read_text()) == manifest
    assert manifest["checkpoint"]["digest"] == signed_digest(w.store.checkpoints[0])
    data = heads_path(out).read_bytes()
    assert manifest["checkpoint"]["heads_sha256"] == hashlib.sha256(data).hexdigest()
    lines = [line.split(",") for line in data.decode().splitlines()]
    assert [(d, int(s)) for d, s, _ in lines] == [(str(w.a), 2), (str(w.b), 1), (str(w.c), 1)]
    leaves = [head_leaf(uuid.UUID(d), int(s), bytes.fromhex(h)) for d, s, h in lines]
    assert merkle_root(leaves) == w.store.checkpoints[0].heads_root  # rebuilds the signed root
    assert manifest["signature"]["alg"] == "Ed25519" and manifest["row_count"] == 4


def test_without_a_key_the_manifest_names_no_checkpoint_and_is_unsigned(tmp_path: Path) -> None:
    w = World()
    w.seal()
    out, manifest_file = tmp_path / "ledger.csv", tmp_path / "ledger.manifest.json"
    manifest_file.write_text(json.dumps({"row_count": 4}))
    manifest = seal_export(out, manifest_file, w.store, None)
    assert manifest == {"row_count": 4, "checkpoint": None}
    assert not heads_path(out).exists()

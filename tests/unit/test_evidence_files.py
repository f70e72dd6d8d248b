"""The case file carries a ladder file only when its bytes are the released ones: a file
edited after release, or whose release row names other bytes, is left out (the verifier then
warns that the file was not available)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from escalation.adapters.evidence import EvidenceFiles
from escalation.domain.errors import LadderError


def test_only_the_released_bytes_are_evidence(tmp_path: Path) -> None:
    path = tmp_path / "dispute_review.v1.toml"
    path.write_bytes(b'name = "dispute_review"\n')
    digest = hashlib.sha256(path.read_bytes()).hexdigest()

    def ladder(name: str, version: int) -> Any:
        if (name, version) != ("dispute_review", 1):
            raise LadderError(f"unknown {name}@{version}")
        return SimpleNamespace(source=str(path), checksum=digest)

    releases = {("dispute_review", 1): digest}
    files = EvidenceFiles(ladder, None, lambda: releases)
    found = files.ladder_file("dispute_review", 1)
    assert found is not None and found.sha256 == digest and found.name == path.name
    assert found.text == 'name = "dispute_review"\n'
    assert files.ladder_file("dispute_review", 2) is None
    releases[("dispute_review", 1)] = "00" * 32  # the release recorded other bytes
    assert files.ladder_file("dispute_review", 1) is None
    releases[("dispute_review", 1)] = digest
    path.write_bytes(b'name = "edited"\n')  # edited after it was loaded and released
    assert files.ladder_file("dispute_review", 1) is None
    assert files.calendar_files() == []

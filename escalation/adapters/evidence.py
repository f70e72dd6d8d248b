"""Files and the signature of the examiner's case file (implement
``service_layer.case_file.CaseFileSources`` and ``ports.DocumentSigner``; the format is
``domain.case_file``).

* :class:`EvidenceFiles`: a ladder version's file as released (read through the released
  catalog, so the bytes are the ones whose SHA-256 the release recorded) and the institution
  calendars file, verbatim;
* :class:`Ed25519DocumentSigner`: Ed25519 (RFC 8032) with the checkpoint signing key
  (``adapters.signing``) over the canonical JSON of a document without its ``signature``
  member, the checkpoint digest's rule. Ed25519 is deterministic: the digest of a checkpoint
  signed here is byte for byte the one ``audit checkpoint --out`` wrote.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from escalation.domain.case_file import signed_bytes
from escalation.domain.errors import LadderError
from escalation.domain.ladder import Ladder
from escalation.ports import EvidenceFile


class EvidenceFiles:
    """The ``CaseFileSources`` port on the ladder directory and the calendars file.

    Args:
        ladder: ``(name, version) -> Ladder`` (raises LadderError when unknown).
        calendars_file: ``ESCALATION_CALENDARS_FILE`` or None.
        released: ``() -> {(name, version): checksum}`` of the release rows
            (``LadderHistoryStore.released_checksums``): a file that differs from its
            release is not the evidence and is left out. None: no release check.
    """

    def __init__(self, ladder: Callable[[str, int], Ladder], calendars_file: Path | None,
                 released: Callable[[], Mapping[tuple[str, int], str]] | None = None) -> None:
        self._ladder = ladder
        self._calendars_file = calendars_file
        self._released = released

    def ladder_file(self, ladder: str, version: int) -> EvidenceFile | None:
        """The file of ``ladder@version`` if it is known, readable and still the released
        bytes (its SHA-256 equals the checksum its release row recorded); else None."""
        try:
            found = self._ladder(ladder, version)
        except LadderError:
            return None
        if not found.source:
            return None
        try:
            data = Path(found.source).read_bytes()
        except OSError:
            return None
        digest = hashlib.sha256(data).hexdigest()
        if digest != found.checksum:
            return None
        if self._released is not None:
            release = self._released().get((ladder, version))
            if release is not None and release != digest:
                return None
        return EvidenceFile(Path(found.source).name, data.decode("utf-8"), digest)

    def calendar_files(self) -> list[EvidenceFile]:
        """The configured calendars file (empty when none is configured)."""
        if self._calendars_file is None:
            return []
        data = self._calendars_file.read_bytes()
        return [EvidenceFile(self._calendars_file.name, data.decode("utf-8"),
                             hashlib.sha256(data).hexdigest())]


class Ed25519DocumentSigner:
    """The ``DocumentSigner`` port with an Ed25519 private key (see the module doc)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

    def sign(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """``document`` plus ``signature = {alg: "Ed25519", public_key, value}`` (base64)."""
        raw = self._key.public_key().public_bytes(serialization.Encoding.Raw,
                                                  serialization.PublicFormat.Raw)
        body = {k: v for k, v in document.items() if k != "signature"}
        value = self._key.sign(signed_bytes(body))
        return {**body, "signature": {"alg": "Ed25519",
                                      "public_key": base64.b64encode(raw).decode(),
                                      "value": base64.b64encode(value).decode()}}

    def public_key_pem(self) -> str:
        """SubjectPublicKeyInfo PEM of the key."""
        return self._key.public_key().public_bytes(
            serialization.Encoding.PEM,
            serialization.PublicFormat.SubjectPublicKeyInfo).decode()

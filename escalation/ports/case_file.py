"""The case file's ports: the files it carries verbatim and its signer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class EvidenceFile:
    """One file a case file carries verbatim: its name, UTF-8 text and SHA-256 (hex)."""

    name: str
    text: str
    sha256: str


class DocumentSigner(Protocol):
    """Signs evidence documents with the checkpoint key (adapter:
    ``adapters.evidence.Ed25519DocumentSigner``; docs/audit.md)."""

    def sign(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """``document`` with a ``signature`` member ``{alg, public_key, value}``: Ed25519 over
        the canonical JSON of the document without that member (deterministic, RFC 8032)."""
        ...

    def public_key_pem(self) -> str:
        """The signing key's public half (SubjectPublicKeyInfo PEM)."""
        ...

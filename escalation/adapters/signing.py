"""Ed25519 signatures of audit checkpoint digests (RFC 8032, via ``cryptography``).

A digest (``service_layer.checkpoint.digest_of``) is signed over its canonical JSON form
(keys sorted, no whitespace, UTF-8) without the ``signature`` member; the signature member is
``{"alg": "Ed25519", "public_key": <base64 raw 32 bytes>, "value": <base64 64 bytes>}``.
The private key comes from ``ESCALATION_CHECKPOINT_KEY_FILE`` (a PKCS#8 PEM file) or
``ESCALATION_CHECKPOINT_KEY`` (the PEM text); the public key is published (``escalation audit
public-key``) and kept by whoever verifies offline: a digest signed by it cannot be forged by
someone who can write the database, so an old digest plus the public key expose any rewrite.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from escalation.domain.errors import ConfigError, InvalidInput
from escalation.ports import CheckpointSignature, SignatureStatus

KEY_FILE_ENV = "ESCALATION_CHECKPOINT_KEY_FILE"
KEY_ENV = "ESCALATION_CHECKPOINT_KEY"
PUBLIC_KEY_FILE_ENV = "ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE"


def canonical(digest: Mapping[str, Any]) -> bytes:
    """The signed bytes: canonical JSON of ``digest`` without its ``signature`` member."""
    body = {k: v for k, v in digest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def generate_keypair(private_out: Path, public_out: Path) -> None:
    """Write a new Ed25519 private key (PKCS#8 PEM, mode 0600, refusing to overwrite) and its
    public key (SubjectPublicKeyInfo PEM).

    Raises:
        InvalidInput: ``private_out`` exists.
    """
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(private_out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInput(f"{private_out} exists; not overwriting a signing key") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    public_out.write_bytes(public_pem(key.public_key()))


def public_pem(key: Ed25519PublicKey) -> bytes:
    """SubjectPublicKeyInfo PEM of ``key``."""
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private_key(environ: dict[str, str] | None = None) -> Ed25519PrivateKey | None:
    """The configured signing key, or None when neither variable is set.

    Raises:
        ConfigError: unreadable, not PEM, or not an Ed25519 key.
    """
    env = os.environ if environ is None else environ
    text: bytes | None = None
    source = ""
    if env.get(KEY_FILE_ENV):
        source = env[KEY_FILE_ENV]
        try:
            text = Path(source).read_bytes()
        except OSError as exc:
            raise ConfigError(f"{KEY_FILE_ENV}: cannot read {source}: {exc}") from None
    elif env.get(KEY_ENV):
        source, text = KEY_ENV, env[KEY_ENV].encode()
    if text is None:
        return None
    try:
        key = serialization.load_pem_private_key(text, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: not a PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{source}: not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file.

    Raises:
        InvalidInput: unreadable or not an Ed25519 public key.
    """
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidInput(f"{path}: not an Ed25519 public key")
    return key


def sign(digest: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """``digest`` with its ``signature`` member (see the module doc)."""
    raw_pub = key.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
    return {**digest, "signature": {
        "alg": "Ed25519", "public_key": base64.b64encode(raw_pub).decode(),
        "value": base64.b64encode(key.sign(canonical(digest))).decode()}}


def verify_signature(digest: dict[str, Any], key: Ed25519PublicKey) -> str | None:
    """None when ``digest`` carries a valid Ed25519 signature by ``key``; else why not."""
    sig = digest.get("signature")
    if not isinstance(sig, dict) or sig.get("alg") != "Ed25519":
        return "digest is not signed (no Ed25519 signature)"
    try:
        key.verify(base64.b64decode(str(sig.get("value", "")), validate=True), canonical(digest))
    except (InvalidSignature, ValueError):
        return "digest signature does not verify with the given public key"
    return None


def raw_public(key: Ed25519PublicKey) -> bytes:
    """The raw 32-byte form of ``key`` (RFC 8032)."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Ed25519DigestSigner:
    """The ``DigestSigner`` port: signs checkpoint digests with ``key``."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

    def sign_digest(self, digest: Mapping[str, Any]) -> CheckpointSignature:
        """Ed25519 over :func:`canonical` of ``digest``."""
        return CheckpointSignature(raw_public(self._key.public_key()),
                                   self._key.sign(canonical(digest)))


class Ed25519DigestVerifier:
    """The ``DigestVerifier`` port: checks stored checkpoint signatures under ``key``."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        self._raw = raw_public(key)

    def check_digest(self, digest: Mapping[str, Any],
                     signature: CheckpointSignature | None) -> SignatureStatus:
        """VALID when ``signature`` verifies under the configured key; WRONG_KEY when it
        names another key; INVALID when it does not verify; UNSIGNED when absent."""
        if signature is None:
            return SignatureStatus.UNSIGNED
        if bytes(signature.public_key) != self._raw:
            return SignatureStatus.WRONG_KEY
        try:
            self._key.verify(bytes(signature.value), canonical(digest))
        except InvalidSignature:
            return SignatureStatus.INVALID
        return SignatureStatus.VALID


def configured_public_key(environ: Mapping[str, str] | None = None,
                          path: Path | None = None) -> Ed25519PublicKey | None:
    """The public key checkpoints are trusted under: ``path`` if given, else
    ``ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE``, else the public half of the configured
    signing key; None when none is configured.

    Raises:
        InvalidInput: the public key file is unreadable or not Ed25519.
        ConfigError: the signing key is unreadable or not Ed25519.
    """
    env = os.environ if environ is None else environ
    if path is None and env.get(PUBLIC_KEY_FILE_ENV):
        path = Path(env[PUBLIC_KEY_FILE_ENV])
    if path is not None:
        return load_public_key(path)
    key = load_private_key(dict(env))
    return None if key is None else key.public_key()

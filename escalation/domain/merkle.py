"""RFC 6962 (Certificate Transparency) Merkle tree hash over byte-string leaves (pure).

* leaf hash  = SHA-256(0x00 || leaf)
* node hash  = SHA-256(0x01 || left || right)
* MTH({})    = SHA-256("")                                   (empty tree)
* MTH(D[n])  = node(MTH(D[0:k]), MTH(D[k:n])), k = largest power of two < n

(RFC 6962 section 2.1.) The distinct 0x00/0x01 prefixes stop a leaf being passed off as an
inner node (second-preimage). Used by audit checkpoints over the ledger's chain heads:
:func:`head_leaf` is the leaf encoding of one head.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from uuid import UUID

from escalation.domain.errors import InvalidInput

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""Root of the empty tree (RFC 6962: the hash of the empty string)."""


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``: 32 bytes."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: 32 bytes."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash of ``leaves`` (in the given order): 32 bytes.

    Iterative bottom-up form (equal to the recursive definition: pairing left to right
    and carrying an odd last node up unchanged). O(n) hashing, O(n) memory for the level.
    """
    if not leaves:
        return EMPTY_ROOT
    level = [leaf_hash(leaf) for leaf in leaves]
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def head_leaf(dispute_id: UUID, last_seq: int, last_hash: bytes) -> bytes:
    """Leaf bytes of one chain head: 16-byte UUID || 8-byte big-endian seq || 32-byte hash.

    Raises:
        InvalidInput: ``last_seq`` outside 1..2**63-1 or ``last_hash`` not 32 bytes.
    """
    if not 1 <= last_seq < 2**63:
        raise InvalidInput(f"last_seq out of range: {last_seq}")
    digest = bytes(last_hash)
    if len(digest) != 32:
        raise InvalidInput(f"last_hash must be 32 bytes, got {len(digest)}")
    return dispute_id.bytes + last_seq.to_bytes(8, "big") + digest


def checkpoint_hash(
    checkpoint_id: int, head_count: int, heads_root: bytes, prev_checkpoint_hash: bytes
) -> bytes:
    """Hash chaining a checkpoint to its predecessor: 32 bytes.

    ``SHA-256("escalation-checkpoint-v1" || id (8 bytes BE) || head_count (8 bytes BE) ||
    heads_root || prev_checkpoint_hash)``; the first checkpoint's ``prev`` is 32 zero bytes.
    """
    data = (
        b"escalation-checkpoint-v1"
        + checkpoint_id.to_bytes(8, "big")
        + head_count.to_bytes(8, "big")
        + bytes(heads_root)
        + bytes(prev_checkpoint_hash)
    )
    return hashlib.sha256(data).digest()

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
from datetime import UTC, datetime
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


def _levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree, leaf hashes first, the root's one-element level last (the
    bottom-up form of :func:`merkle_root`: an odd last node is carried up unchanged)."""
    level = [leaf_hash(leaf) for leaf in leaves]
    levels = [level]
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        levels.append(nxt)
        level = nxt
    return levels


def inclusion_proofs(leaves: Sequence[bytes], indexes: Sequence[int]) -> dict[int, list[bytes]]:
    """RFC 6962 audit paths (section 2.1.1, ``PATH(m, D[n])``) of the leaves at ``indexes``.

    The tree is built once (O(n) hashing, O(n) memory), so many proofs over one checkpoint's
    heads cost one tree. Each path lists the sibling hashes from the leaf up to the root.

    Raises:
        InvalidInput: an index outside ``0..len(leaves)-1``.
    """
    size = len(leaves)
    for index in indexes:
        if not 0 <= index < size:
            raise InvalidInput(f"leaf index {index} outside a tree of {size} leaves")
    levels = _levels(leaves) if indexes else []
    proofs: dict[int, list[bytes]] = {}
    for index in indexes:
        path: list[bytes] = []
        i = index
        for level in levels[:-1]:
            sibling = i ^ 1
            if sibling < len(level):
                path.append(level[sibling])
            i >>= 1
        proofs[index] = path
    return proofs


def root_from_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes | None:
    """The root that audit path ``path`` gives for ``leaf`` at ``index`` in a tree of ``size``
    leaves, or None when the path cannot belong to such a tree (RFC 9162 section 2.1.3.2,
    the verification of an RFC 6962 inclusion proof). Compare the result with a trusted root.
    """
    if not 0 <= index < size or any(len(p) != 32 for p in path):
        return None
    fn, sn = index, size - 1
    r = leaf_hash(leaf)
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


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


def retention_hash(rows: Sequence[tuple[str, str, datetime, datetime, int]]) -> bytes:
    """Hash of the retention rows a checkpoint covers: 32 bytes.

    Each row is ``(partition_name, action, range_from, range_to, row_count)`` (aware times,
    written as UTC ISO-8601 ``2015-03-01T00:00:00.000000Z``); the rows are sorted by name and
    action, and ``SHA-256("escalation-retention-v1\\n" || line...)`` is taken over one line
    per row, ``name SP action SP range_from SP range_to SP row_count LF`` (ASCII). The empty
    set hashes the prefix alone.

    Raises:
        InvalidInput: a naive time.
    """
    def iso(t: datetime) -> str:
        if t.tzinfo is None:
            raise InvalidInput("retention range times must be timezone-aware")
        return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    data = bytearray(b"escalation-retention-v1\n")
    for name, action, range_from, range_to, count in sorted(rows):
        data += f"{name} {action} {iso(range_from)} {iso(range_to)} {int(count)}\n".encode("ascii")
    return hashlib.sha256(bytes(data)).digest()

"""RFC 6962 inclusion proofs over checkpoint heads: every leaf of trees of 1..70 leaves
proves into the root; a changed sibling, leaf, index or an extra step does not (the tree
size itself is signed in the digest). One known
vector is computed by hand from the RFC's recursive definition."""

from __future__ import annotations

import hashlib

import pytest

from escalation.domain.errors import InvalidInput
from escalation.domain.merkle import (
    inclusion_proofs,
    leaf_hash,
    merkle_root,
    node_hash,
    root_from_inclusion,
)


def test_every_leaf_proves_into_its_root_and_nothing_else_does() -> None:
    for size in range(1, 71):
        leaves = [hashlib.sha256(f"{size}-{i}".encode()).digest()[: 1 + i % 7]
                  for i in range(size)]
        root = merkle_root(leaves)
        proofs = inclusion_proofs(leaves, range(size))
        for i, path in proofs.items():
            assert root_from_inclusion(leaves[i], i, size, path) == root
            assert root_from_inclusion(leaves[i] + b"x", i, size, path) != root
            if size > 1:
                assert root_from_inclusion(leaves[i], (i + 1) % size, size, path) != root
            for j in range(len(path)):
                bent = [*path[:j], bytes(32), *path[j + 1:]]
                assert root_from_inclusion(leaves[i], i, size, bent) != root
        assert root_from_inclusion(leaves[0], 0, size, [*proofs[0], bytes(32)]) != root


def test_a_three_leaf_path_follows_the_rfc_definition() -> None:
    a, b, c = b"a", b"b", b"c"
    # MTH(D[3]) = node(MTH(a, b), leaf(c)); PATH(2, D[3]) = [MTH(a, b)]
    assert inclusion_proofs([a, b, c], [2])[2] == [node_hash(leaf_hash(a), leaf_hash(b))]
    assert inclusion_proofs([a, b, c], [0])[0] == [leaf_hash(b), leaf_hash(c)]


def test_an_index_outside_the_tree_is_refused() -> None:
    with pytest.raises(InvalidInput, match="leaf index 3"):
        inclusion_proofs([b"a", b"b", b"c"], [3])
    assert root_from_inclusion(b"a", 0, 0, []) is None

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privacy_ledger.audit.merkle import SM3_HASHER, MerkleTree, TreeHasher, sha256_hasher
from privacy_ledger.errors import AuditParameterInvalid, HashSizeInvalid, ProofRangeInvalid
from tests.privacy_ledger.audit.vectors import LEAVES, ROOTS, SHA256_EMPTY, SM3_EMPTY


def _mth(h: TreeHasher, leaves: list[bytes]) -> bytes:
    """RFC 9162 2.1.1, written recursively and independently of MerkleTree."""
    if not leaves:
        return h.digest(b"")
    if len(leaves) == 1:
        return h.digest(b"\x00" + leaves[0])
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return h.digest(b"\x01" + _mth(h, leaves[:k]) + _mth(h, leaves[k:]))


def test_sha256_rfc6962_roots_of_every_prefix() -> None:
    tree = MerkleTree(hasher=sha256_hasher())
    assert tree.root() == SHA256_EMPTY
    for i, leaf in enumerate(LEAVES):
        tree.append_data(leaf)
        assert tree.root() == ROOTS[i], i
    assert tree.root().hex() == "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    for size in range(1, 9):
        assert tree.root(size) == ROOTS[size - 1]


def test_sm3_empty_root_and_prefixes_pinned() -> None:
    tree = MerkleTree()
    assert tree.hasher is SM3_HASHER
    assert tree.root() == SM3_EMPTY
    assert SM3_HASHER.hash_leaf(b"") == hashlib.new("sm3", b"\x00").digest()
    left, right = SM3_HASHER.hash_leaf(b"a"), SM3_HASHER.hash_leaf(b"b")
    tree.append_data(b"a")
    tree.append_data(b"b")
    assert tree.root() == hashlib.new("sm3", b"\x01" + left + right).digest()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=8), max_size=70))
def test_roots_match_the_recursive_definition(leaves: list[bytes]) -> None:
    h = sha256_hasher()
    tree = MerkleTree(hasher=h)
    for leaf in leaves:
        tree.append_data(leaf)
    for size in range(len(leaves) + 1):
        assert tree.root(size) == _mth(h, leaves[:size])


def test_leaf_hash_size_is_checked() -> None:
    tree = MerkleTree()
    with pytest.raises(HashSizeInvalid, match="leaf_hash: has size 31"):
        tree.append_leaf_hash(b"x" * 31)


def test_ranges_are_checked() -> None:
    tree = MerkleTree()
    for i in range(5):
        tree.append_data(bytes([i]))
    with pytest.raises(ProofRangeInvalid, match="beyond the tree size 5"):
        tree.root(6)
    with pytest.raises(ProofRangeInvalid, match="not inside"):
        tree.range_hash(3, 3)
    with pytest.raises(ProofRangeInvalid, match="not aligned"):
        tree.range_hash(1, 3)
    with pytest.raises(ProofRangeInvalid, match="index: 5 is beyond size 5"):
        tree.leaf_hash(5)


def test_truncate_rewinds_to_an_earlier_tree() -> None:
    tree = MerkleTree()
    for i in range(11):
        tree.append_data(bytes([i]))
    expected = tree.root(6)
    tree.truncate(6)
    assert tree.size == 6 and tree.root() == expected
    tree.append_data(b"new")
    assert tree.size == 7
    with pytest.raises(AuditParameterInvalid, match="size: 9"):
        tree.truncate(9)

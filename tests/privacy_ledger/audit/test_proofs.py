"""Proofs against RFC 6962 vectors and every error case of transparency-dev/merkle's verifier."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privacy_ledger.audit.merkle import SM3_HASHER, MerkleTree, TreeHasher, sha256_hasher
from privacy_ledger.audit.proofs import (
    consistency_proof,
    inclusion_proof,
    root_from_consistency_proof,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from privacy_ledger.errors import (
    HashSizeInvalid,
    ProofInvalid,
    ProofRangeInvalid,
    ProofSizeInvalid,
    RootMismatch,
)
from tests.privacy_ledger.audit.vectors import (
    CONSISTENCY,
    INCLUSION,
    LEAVES,
    ROOTS,
    SHA256_EMPTY,
    SOME_HASH,
)

H = sha256_hasher()


def _tree(n: int = 8) -> MerkleTree:
    tree = MerkleTree(hasher=H)
    for leaf in LEAVES[:n]:
        tree.append_data(leaf)
    return tree


def _flip(proof: list[bytes], i: int, bit: int) -> list[bytes]:
    out = list(proof)
    out[i] = bytes([out[i][0] ^ bit]) + out[i][1:]
    return out


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_vectors_generate_and_verify(index: int, size: int, proof: list[bytes]) -> None:
    assert inclusion_proof(_tree(), index, size) == proof
    leaf = H.hash_leaf(LEAVES[index])
    assert root_from_inclusion_proof(H, index, size, leaf, proof) == ROOTS[size - 1]
    assert verify_inclusion(H, index, size, leaf, proof, ROOTS[size - 1]) is None


@pytest.mark.parametrize(("size1", "size2", "proof"), CONSISTENCY)
def test_consistency_vectors_generate_and_verify(
    size1: int, size2: int, proof: list[bytes]
) -> None:
    assert consistency_proof(_tree(), size1, size2) == proof
    root1, root2 = ROOTS[size1 - 1], ROOTS[size2 - 1]
    assert root_from_consistency_proof(H, size1, size2, proof, root1) == root2
    assert verify_consistency(H, size1, size2, proof, root1, root2) is None


def _inclusion_probes(index: int, size: int, proof: list[bytes], root: bytes, leaf: bytes):
    probes = [
        ("index - 1", index - 1, size, root, leaf, proof),
        ("index + 1", index + 1, size, root, leaf, proof),
        ("index ^ 2", index ^ 2, size, root, leaf, proof),
        ("size * 2", index, size * 2, root, leaf, proof),
        ("size // 2", index, size // 2, root, leaf, proof),
        ("wrong leaf", index, size, root, b"WrongLeaf", proof),
        ("empty root", index, size, SHA256_EMPTY, leaf, proof),
        ("random root", index, size, SOME_HASH, leaf, proof),
        ("trailing garbage", index, size, root, leaf, [*proof, b""]),
        ("trailing root", index, size, root, leaf, [*proof, root]),
        ("preceding garbage", index, size, root, leaf, [b"", *proof]),
        ("preceding root", index, size, root, leaf, [root, *proof]),
    ]
    probes += [
        (f"flip {i}", index, size, root, leaf, _flip(proof, i, 8)) for i in range(len(proof))
    ]
    if proof:
        probes.append(("removed component", index, size, root, leaf, proof[:-1]))
    if len(proof) > 1:
        probes.append(("inserted", index, size, root, leaf, [proof[0], SOME_HASH, *proof[1:]]))
    return probes


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_every_corrupted_inclusion_proof_is_refused(
    index: int, size: int, proof: list[bytes]
) -> None:
    leaf = H.hash_leaf(LEAVES[index])
    for desc, i, n, root, lh, pr in _inclusion_probes(index, size, proof, ROOTS[size - 1], leaf):
        with pytest.raises(ProofInvalid):
            verify_inclusion(H, i, n, lh, pr, root)
            pytest.fail(f"verified corrupted proof: {desc}")


def test_inclusion_error_cases_are_typed() -> None:
    leaf = H.hash_leaf(LEAVES[0])
    with pytest.raises(ProofRangeInvalid, match="index: 8 is beyond size 8"):
        verify_inclusion(H, 8, 8, leaf, [], ROOTS[7])
    with pytest.raises(ProofRangeInvalid, match="index: 0 is beyond size 0"):
        verify_inclusion(H, 0, 0, leaf, [], SHA256_EMPTY)
    with pytest.raises(ProofRangeInvalid, match="index: -1"):
        verify_inclusion(H, -1, 8, leaf, [], ROOTS[7])
    with pytest.raises(HashSizeInvalid, match="leaf_hash: has size 9"):
        verify_inclusion(H, 0, 8, b"WrongLeaf", INCLUSION[0][2], ROOTS[7])
    with pytest.raises(ProofSizeInvalid, match="wrong proof size 4, want 3"):
        verify_inclusion(H, 0, 8, leaf, [*INCLUSION[0][2], SOME_HASH], ROOTS[7])
    with pytest.raises(ProofSizeInvalid, match="wrong proof size 2, want 3"):
        verify_inclusion(H, 0, 8, leaf, INCLUSION[0][2][:2], ROOTS[7])
    with pytest.raises(HashSizeInvalid, match=r"proof\[1\]: has size 5"):
        verify_inclusion(H, 0, 8, leaf, [SOME_HASH, b"short", SOME_HASH], ROOTS[7])
    with pytest.raises(RootMismatch, match="does not match") as info:
        verify_inclusion(H, 0, 8, leaf, INCLUSION[0][2], ROOTS[6])
    assert info.value.expected == ROOTS[6] and info.value.calculated == ROOTS[7]


def test_single_entry_tree() -> None:
    leaf = H.hash_leaf(b"data")
    verify_inclusion(H, 0, 1, leaf, [], leaf)
    with pytest.raises(HashSizeInvalid):
        verify_inclusion(H, 0, 1, b"", [], leaf)
    with pytest.raises(RootMismatch):
        verify_inclusion(H, 0, 1, leaf, [], b"")


def _consistency_probes(size1: int, size2: int, root1: bytes, root2: bytes, proof: list[bytes]):
    probes = [
        ("size1 - 1", size1 - 1, size2, root1, root2, proof),
        ("size1 + 1", size1 + 1, size2, root1, root2, proof),
        ("size1 ^ 2", size1 ^ 2, size2, root1, root2, proof),
        ("size2 * 2", size1, size2 * 2, root1, root2, proof),
        ("size2 // 2", size1, size2 // 2, root1, root2, proof),
        ("wrong root1", size1, size2, b"WrongRoot", root2, proof),
        ("wrong root2", size1, size2, root1, b"WrongRoot", proof),
        ("swapped roots", size1, size2, root2, root1, proof),
        ("empty proof", size1, size2, root1, root2, []),
        ("trailing garbage", size1, size2, root1, root2, [*proof, b""]),
        ("trailing root1", size1, size2, root1, root2, [*proof, root1]),
        ("trailing root2", size1, size2, root1, root2, [*proof, root2]),
        ("preceding garbage", size1, size2, root1, root2, [b"", *proof]),
        ("preceding root1", size1, size2, root1, root2, [root1, *proof]),
        ("preceding root2", size1, size2, root1, root2, [root2, *proof]),
        ("preceding proof[0]", size1, size2, root1, root2, [proof[0], *proof]),
        ("truncated", size1, size2, root1, root2, proof[:-1]),
    ]
    probes += [
        (f"flip {i}", size1, size2, root1, root2, _flip(proof, i, 16)) for i in range(len(proof))
    ]
    return probes


@pytest.mark.parametrize(("size1", "size2", "proof"), CONSISTENCY)
def test_every_corrupted_consistency_proof_is_refused(
    size1: int, size2: int, proof: list[bytes]
) -> None:
    root1, root2 = ROOTS[size1 - 1], ROOTS[size2 - 1]
    for desc, s1, s2, r1, r2, pr in _consistency_probes(size1, size2, root1, root2, proof):
        with pytest.raises(ProofInvalid):
            verify_consistency(H, s1, s2, pr, r1, r2)
            pytest.fail(f"verified corrupted proof: {desc}")


def test_consistency_edge_cases_follow_the_reference() -> None:
    r1, r2 = b"don't care 1", b"don't care 2"
    verify_consistency(H, 0, 0, [], r1, r1)
    verify_consistency(H, 0, 1, [], r1, r2)  # anything extends the empty tree
    verify_consistency(H, 1, 1, [], r2, r2)
    with pytest.raises(RootMismatch):
        verify_consistency(H, 0, 0, [], r1, r2)
    with pytest.raises(RootMismatch):
        verify_consistency(H, 1, 1, [], SHA256_EMPTY, r2)
    with pytest.raises(ProofRangeInvalid, match=r"size2 \(0\) < size1 \(1\)"):
        verify_consistency(H, 1, 0, [], r1, r2)
    with pytest.raises(ProofRangeInvalid, match=r"size2 \(1\) < size1 \(2\)"):
        verify_consistency(H, 2, 1, [], r1, r2)
    with pytest.raises(ProofSizeInvalid, match="empty proof"):
        verify_consistency(H, 1, 2, [], r1, r2)
    for s1, s2 in ((0, 0), (1, 1)):
        with pytest.raises(ProofSizeInvalid, match="size1 = size2, but proof is not empty"):
            verify_consistency(H, s1, s2, [SHA256_EMPTY], SHA256_EMPTY, SHA256_EMPTY)
    with pytest.raises(ProofSizeInvalid, match="expected empty proof from the empty tree"):
        verify_consistency(H, 0, 1, [SHA256_EMPTY], SHA256_EMPTY, SHA256_EMPTY)
    with pytest.raises(ProofRangeInvalid, match="from an empty tree is meaningless"):
        root_from_consistency_proof(H, 0, 3, [SHA256_EMPTY], SHA256_EMPTY)
    with pytest.raises(ProofSizeInvalid, match="wrong proof size 2, want 3"):
        verify_consistency(H, 6, 8, CONSISTENCY[1][2][:2], ROOTS[5], ROOTS[7])
    with pytest.raises(RootMismatch, match="root1"):
        verify_consistency(H, 6, 8, CONSISTENCY[1][2], ROOTS[4], ROOTS[7])
    with pytest.raises(RootMismatch, match="root2"):
        verify_consistency(H, 6, 8, CONSISTENCY[1][2], ROOTS[5], ROOTS[6])


def test_generation_rejects_bad_ranges() -> None:
    tree = _tree(5)
    with pytest.raises(ProofRangeInvalid, match="index: 5 is beyond size 5"):
        inclusion_proof(tree, 5, 5)
    with pytest.raises(ProofRangeInvalid, match="size: 6 is beyond the tree size 5"):
        inclusion_proof(tree, 1, 6)
    with pytest.raises(ProofRangeInvalid, match="old_size: 4 not in"):
        consistency_proof(tree, 4, 3)
    with pytest.raises(ProofRangeInvalid, match="new_size: 9 is beyond"):
        consistency_proof(tree, 1, 9)


@pytest.mark.parametrize("hasher", [H, SM3_HASHER], ids=["sha256", "sm3"])
@settings(max_examples=40, deadline=None)
@given(size=st.integers(min_value=1, max_value=300), data=st.data())
def test_all_proofs_for_random_sizes_verify(
    hasher: TreeHasher, size: int, data: st.DataObject
) -> None:
    tree = MerkleTree(hasher=hasher)
    for i in range(size):
        tree.append_data(i.to_bytes(4, "big"))
    for n in data.draw(st.lists(st.integers(1, size), min_size=1, max_size=4), label="sizes"):
        root = tree.root(n)
        for index in {0, n - 1, data.draw(st.integers(0, n - 1), label="index")}:
            proof = inclusion_proof(tree, index, n)
            verify_inclusion(hasher, index, n, tree.leaf_hash(index), proof, root)
        old = data.draw(st.integers(0, n), label="old")
        proof = consistency_proof(tree, old, n)
        verify_consistency(hasher, old, n, proof, tree.root(old), root)


def test_all_proofs_exhaustive_small_trees() -> None:
    tree = _tree(8)
    for i in range(8, 40):
        tree.append_data(bytes([i]))
    for n in range(1, 41):
        root = tree.root(n)
        for index in range(n):
            proof = inclusion_proof(tree, index, n)
            verify_inclusion(H, index, n, tree.leaf_hash(index), proof, root)
        for old in range(n + 1):
            verify_consistency(H, old, n, consistency_proof(tree, old, n), tree.root(old), root)

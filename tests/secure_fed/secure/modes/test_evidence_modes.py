"""Evidence and pairwise distances computed under CKKS and under shares equal the plaintext."""

from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import decrypt_score, generate_keys, load_encrypted, pack_class_major
from crypto.errors import CryptoError
from crypto.shares.additive import split
from crypto.shares.codec import RING_PREDICTIONS
from secure_fed.errors import AuthorityRequestMalformed, ScoringInvalid
from secure_fed.secure.computation.evidence import (
    ckks_evidence,
    ckks_pair_distance,
    evidence_sums,
    integer_mask,
    open_evidence,
    open_sums,
    share_evidence,
    slice_fields,
    slice_from_fields,
)
from secure_fed.secure.scoring.evidence import (
    EvidenceSlice,
    evidence_mask,
    pairwise_distances,
    plain_evidence,
)

N, C, ROWS = 300, 6, 80
RNG = np.random.default_rng(0)
P = np.clip(RNG.normal(0, 3, size=(N, C)), -8, 8)
Q = np.clip(RNG.normal(0, 3, size=(N, C)), -8, 8)
SLICE_ROWS = RNG.choice(N, size=ROWS, replace=False)
LABELS = RNG.integers(0, C, size=ROWS)
MASK = evidence_mask(rows=SLICE_ROWS, labels=LABELS, shape=(N, C))


@pytest.fixture(scope="module")
def keys():  # type: ignore[no-untyped-def]
    return generate_keys("CKKS_SCORING")


def test_ckks_evidence_decrypts_to_the_plaintext_value(keys) -> None:  # type: ignore[no-untyped-def]
    enc = ckks_evidence(pack_class_major(keys.public_context, P), MASK)
    assert enc.kind == "score" and len(enc.vectors) == 1  # one scalar reaches the key authority
    expected = plain_evidence({"p": P}, MASK)["p"]
    assert decrypt_score(keys, enc) == pytest.approx(expected, abs=1e-3)


def test_ckks_pair_distance_decrypts_to_the_mean_squared_distance(keys) -> None:  # type: ignore[no-untyped-def]
    public = keys.public_context
    enc = ckks_pair_distance(pack_class_major(public, P), pack_class_major(public, Q))
    expected = pairwise_distances({"p": P, "q": Q})[("p", "q")]
    assert decrypt_score(keys, enc) == pytest.approx(expected, rel=1e-3)


def test_ckks_evidence_refuses_a_foreign_mask(keys) -> None:  # type: ignore[no-untyped-def]
    up = pack_class_major(keys.public_context, P)
    with pytest.raises(ScoringInvalid, match="not the upload's"):
        ckks_evidence(up, MASK[:10])
    with pytest.raises(ScoringInvalid, match="all zeros"):
        ckks_evidence(up, np.zeros_like(MASK))


def test_share_evidence_opens_exactly_the_encoded_value() -> None:
    first, second = split(RING_PREDICTIONS.encode(P))
    mask = integer_mask(rows=SLICE_ROWS, labels=LABELS, shape=(N, C))
    value = open_evidence(
        share_evidence(first, mask), share_evidence(second, mask), rows=ROWS, classes=C
    )
    encoded = RING_PREDICTIONS.decode(RING_PREDICTIONS.encode(P))
    assert value == pytest.approx(plain_evidence({"p": encoded}, MASK)["p"], abs=1e-12)
    # one share alone is uniformly random: its sum says nothing about the value
    assert share_evidence(first, mask) != share_evidence(second, mask)


def test_integer_mask_matches_the_real_mask_and_checks_its_input() -> None:
    mask = integer_mask(rows=SLICE_ROWS, labels=LABELS, shape=(N, C))
    np.testing.assert_allclose(mask / (C * ROWS), MASK)
    with pytest.raises(ScoringInvalid, match="inside the shape"):
        integer_mask(rows=np.array([N]), labels=np.array([0]), shape=(N, C))
    with pytest.raises(ScoringInvalid, match="not the mask's"):
        share_evidence(np.zeros((2, 2), dtype=np.uint64), mask)


def test_ckks_evidence_loads_as_a_score_over_the_slice_rows(keys) -> None:  # type: ignore[no-untyped-def]
    """What the key authority parses: one value at a score's level, laid out ``|R| x C``."""
    enc = ckks_evidence(pack_class_major(keys.public_context, P), MASK)
    assert (enc.layout.n_samples, enc.layout.n_classes) == (ROWS, C)
    loaded = load_encrypted(
        keys.public_context, enc.to_bytes(), kind="score", n_samples=ROWS, n_classes=C
    )
    assert decrypt_score(keys, loaded) == pytest.approx(
        plain_evidence({"p": P}, MASK)["p"], abs=1e-3
    )
    with pytest.raises(CryptoError, match="shape"):  # another row count is another layout
        load_encrypted(keys.public_context, enc.to_bytes(), kind="score", n_samples=N, n_classes=C)


def test_evidence_sums_of_both_parties_open_to_each_uploads_value() -> None:
    piece = EvidenceSlice(
        rows=tuple(int(r) for r in SLICE_ROWS), labels=tuple(int(y) for y in LABELS)
    )
    pairs = [split(RING_PREDICTIONS.encode(m)) for m in (P, Q)]
    first = evidence_sums([a for a, _ in pairs], piece)
    second = evidence_sums([b for _, b in pairs], piece)
    encoded = {
        k: RING_PREDICTIONS.decode(RING_PREDICTIONS.encode(m)) for k, m in (("p", P), ("q", Q))
    }
    expected = plain_evidence(encoded, MASK)
    assert open_sums(first, second, rows=ROWS, classes=C) == pytest.approx(
        [expected["p"], expected["q"]], abs=1e-12
    )
    with pytest.raises(ScoringInvalid, match="do not match"):
        open_sums(first, second[:1], rows=ROWS, classes=C)
    with pytest.raises(ScoringInvalid, match="no shares"):
        evidence_sums([], piece)


def test_a_slice_is_named_by_its_rows_and_labels_and_junk_is_refused() -> None:
    piece = EvidenceSlice(rows=(3, 1), labels=(0, 2))
    assert slice_from_fields(slice_fields(piece)) == piece
    assert slice_from_fields({"op": "evidence"}) is None
    for junk in (
        {"rows": [1, 2]},
        {"rows": [1, 2], "labels": [0]},
        {"rows": [1.0], "labels": [0]},
        {"rows": [True], "labels": [0]},
        {"rows": "1", "labels": [0]},
    ):
        with pytest.raises(AuthorityRequestMalformed, match="evidence slice"):
            slice_from_fields(junk)

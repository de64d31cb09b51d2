"""Evidence and pairwise distances computed under CKKS and under shares equal the plaintext."""

from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import decrypt_score, generate_keys, pack_class_major
from crypto.shares.additive import split
from crypto.shares.codec import RING_PREDICTIONS
from secure_fed.errors import ScoringInvalid
from secure_fed.secure.modes.evidence import (
    ckks_evidence,
    ckks_pair_distance,
    integer_mask,
    open_evidence,
    share_evidence,
)
from secure_fed.secure.scoring.evidence import evidence_mask, pairwise_distances, plain_evidence

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

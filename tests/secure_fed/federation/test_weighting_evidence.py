"""The evidence of correctness, the near-duplicate counts and the labeled public slice."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import (
    AttackSpecInvalid,
    ScoringInvalid,
    UnknownAttack,
)
from secure_fed.evaluation.collusion import COLLUSION_REGISTRY, collude
from secure_fed.secure.scoring.evidence import (
    EvidenceSlice,
    evidence_mask,
    near_duplicates,
    pairwise_distances,
    plain_evidence,
)


def test_evidence_is_the_mean_centred_true_class_logit() -> None:
    rng = np.random.default_rng(0)
    p = rng.normal(size=(20, 4))
    rows, labels = [3, 7, 11], [0, 2, 3]
    mask = evidence_mask(rows=rows, labels=labels, shape=(20, 4))
    expected = np.mean([p[r, y] - p[r].mean() for r, y in zip(rows, labels, strict=True)])
    assert plain_evidence({"a": p}, mask)["a"] == pytest.approx(expected)
    # linear: the evidence of a weighted sum is the weighted sum of the evidence
    q = rng.normal(size=(20, 4))
    both = plain_evidence({"a": p, "b": q, "mix": 0.3 * p + 0.7 * q}, mask)
    assert both["mix"] == pytest.approx(0.3 * both["a"] + 0.7 * both["b"])
    # a per-row constant (logits are defined up to one) changes nothing
    shifted = plain_evidence({"a": p + rng.normal(size=(20, 1))}, mask)["a"]
    assert shifted == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rows", "labels", "fragment"),
    [
        ([], [], "at least one row"),
        ([1, 1], [0, 0], "distinct"),
        ([20], [0], "distinct and in"),
        ([1], [4], "labels must be in"),
        ([1, 2], [0], "one label per row"),
    ],
)
def test_bad_slices_are_refused(rows: list[int], labels: list[int], fragment: str) -> None:
    with pytest.raises(ScoringInvalid, match=fragment):
        evidence_mask(rows=rows, labels=labels, shape=(20, 4))


def test_slice_checks_itself_and_builds_its_mask() -> None:
    with pytest.raises(ScoringInvalid, match="one label per row"):
        EvidenceSlice(rows=(1, 2), labels=(0,))
    mask = EvidenceSlice(rows=(0,), labels=(1,)).mask((3, 2))
    np.testing.assert_allclose(mask, [[-0.5, 0.5], [0, 0], [0, 0]])


def test_near_duplicates_count_copies_not_honest_neighbours() -> None:
    rng = np.random.default_rng(1)
    mats = {f"h{k}": rng.normal(size=(50, 3)) for k in range(6)}
    mats["c1"] = mats["h0"] + rng.normal(0, 0.01, size=(50, 3))
    mats["c2"] = mats["h0"].copy()
    counts = near_duplicates(pairwise_distances(mats), sorted(mats))
    assert counts["h0"] == counts["c1"] == counts["c2"] == 2
    assert all(counts[f"h{k}"] == 0 for k in range(1, 6))


def test_a_far_minority_cannot_make_honest_uploads_look_like_copies() -> None:
    """Before the typical distance, noise at the bound inflated the median pair: everyone
    honest became a 'near-duplicate' of everyone and lost six sevenths of its weight."""
    rng = np.random.default_rng(2)
    mats = {f"h{k}": rng.normal(size=(50, 3)) for k in range(7)}
    mats.update({f"n{k}": rng.normal(0, 40, size=(50, 3)) for k in range(3)})
    counts = near_duplicates(pairwise_distances(mats), sorted(mats))
    assert all(v == 0 for v in counts.values())


def test_near_duplicates_validate_their_input() -> None:
    with pytest.raises(ScoringInvalid, match="theta"):
        near_duplicates({}, ["a"], theta=1.5)
    with pytest.raises(ScoringInvalid, match="lack"):
        near_duplicates({}, ["a", "b"])
    with pytest.raises(ScoringInvalid, match="finite"):
        near_duplicates({("a", "b"): -1.0}, ["a", "b"])


def test_collusion_hooks_see_the_honest_uploads() -> None:
    rng = np.random.default_rng(4)
    honest = {f"h{k}": rng.normal(size=(30, 3)) for k in range(4)}
    mean = np.mean(np.stack([honest[p] for p in sorted(honest)]), axis=0)
    sent = collude("honest_mean", honest, ["x", "y"], bound=8.0)
    np.testing.assert_allclose(sent["x"], mean, atol=1e-6)
    copies = collude("copy", honest, ["x"], bound=8.0)
    np.testing.assert_allclose(copies["x"], honest["h0"], atol=1e-6)
    confident = collude("confident", honest, ["x"], bound=8.0)
    assert np.abs(confident["x"]).max() == pytest.approx(8.0)
    assert (confident["x"].argmax(1) == mean.argmax(1)).all()
    for kind in COLLUSION_REGISTRY:
        out = collude(kind, honest, ["x", "y", "z"], bound=8.0, seed=1)
        assert all(m.shape == (30, 3) and np.abs(m).max() <= 8.0 for m in out.values())


def test_collusion_refuses_bad_requests() -> None:
    honest = {"h": np.zeros((4, 2))}
    with pytest.raises(UnknownAttack, match="registered"):
        collude("nope", honest, ["x"], bound=8.0)
    with pytest.raises(AttackSpecInvalid, match="at least one colluder"):
        collude("copy", honest, [], bound=8.0)
    with pytest.raises(AttackSpecInvalid, match="sent 0 uploads"):
        collude(lambda h, n, k, rng: [], honest, ["x"], bound=8.0)
    with pytest.raises(AttackSpecInvalid, match="malformed"):
        collude(lambda h, n, k, rng: [np.zeros((3, 2))], honest, ["x"], bound=8.0)

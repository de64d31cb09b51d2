"""One copy rule in plaintext, shares and ckks, which a far or inside minority cannot inflate.

The copy threshold ``tau = max(theta x typical, floor)`` takes its typical distance
from values every mode's servers already opened under the release plan
(:func:`~secure_fed.secure.scoring.evidence.round_typical`): the smaller of the mean
pair distance within the robust subset ``H`` (the opened moments) and the final
scores' whitened estimate. Each gatekeeper derives it from its own plan tracker.

* the identity behind the first estimate, exactly, on synthetic uploads;
* the gatekeeper's threshold (a real :class:`PlanTracker` fed the values a round
  opens) stays put as three far colluders of thirteen go farther, and as a
  coalition places one member inside ``H`` (which the first estimate alone lets
  through: shown);
* real engine rounds (signed envelopes, the outlier policy, every mode's own
  copies step) on the same uploads: equal copies counts in the three modes, no
  honest upload counted when far colluders are present, and a jittered copy group
  still found in an all-honest round. On the earlier shares rule (``2K/(K-1)``
  times the median ranking score) the far-colluder round counted every honest
  upload as a copy (the test failed on that code in shares mode).
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from secure_fed.errors import ScoringInvalid
from secure_fed.evaluation.adaptive import RoundView, forge
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.computation.requests import score_request
from secure_fed.secure.computation.share_copies import copies_threshold as shares_threshold
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import (
    DUPLICATE_FLOOR,
    DUPLICATE_THETA,
    copies_threshold,
    pairwise_distances,
    round_typical,
    subset_typical,
    whitened_typical,
)
from secure_fed.secure.scoring.mahalanobis import (
    PlainBackend,
    ScoringConfig,
    pooled_covariance,
)
from tests.secure_fed.secure.helpers import BOUND, Harness, population

N, C = 200, 10
HONEST = population(10, N, C, seed=5)


def far_colluders(scale: float, count: int = 3) -> dict[str, np.ndarray]:
    """``count`` far uploads, each confidently on a different wrong class at ``scale``."""
    mean = np.mean([HONEST[p] for p in sorted(HONEST)], axis=0)
    out = {}
    for j in range(count):
        target = (mean.argmax(axis=1) + 1 + j) % C
        sent = np.full_like(mean, -scale)
        sent[np.arange(N), target] = scale
        out[f"x{j}"] = np.clip(sent, -BOUND, BOUND)
    return out


def coalition(kind: str) -> dict[str, np.ndarray]:
    """The evaluation's adaptive coalition of three (it sees the honest uploads)."""
    views = [
        RoundView(
            round_id=1,
            own=HONEST["p00"],
            honest=HONEST,
            index=j,
            colluders=3,
            bound=BOUND,
            evidence=None,
        )
        for j in range(3)
    ]
    return {f"x{j}": forge(kind, v).astype(np.float64) for j, v in enumerate(views)}


# --- the statistic ----------------------------------------------------------------------


def test_the_subset_estimate_is_exactly_the_mean_pair_distance_within_the_subset() -> None:
    """``2 h/(h-1) tr(Sigma_H)``, ``Sigma_H = M / (h S)``: the mean of ``d_jk`` over H's pairs."""
    rng = np.random.default_rng(11)
    mats = {f"u{j}": rng.normal(0.0, 1.0 + 0.2 * j, (N, C)) for j in range(7)}
    subset = ["u0", "u2", "u3", "u5", "u6"]
    rows = 150  # the moment rows S < N: the identity holds on them
    backend = PlainBackend(mats)
    moment = backend.moments(subset, rows)
    cov = pooled_covariance(second_moment=moment, count=len(subset), samples=rows)
    pairs = pairwise_distances({p: mats[p][:rows] for p in subset})
    found = subset_typical(cov, subset=len(subset))
    assert found == pytest.approx(float(np.mean(list(pairs.values()))), rel=1e-12)
    # uploads drawn around a common mean with per-row covariance Sigma: E d_jk = 2 tr(Sigma)
    sigma = np.diag(np.linspace(0.2, 2.0, C))
    draws = {f"v{j}": rng.multivariate_normal(np.zeros(C), sigma, size=4000) for j in range(6)}
    ids = sorted(draws)
    cov = pooled_covariance(
        second_moment=PlainBackend(draws).moments(ids, 4000), count=6, samples=4000
    )
    assert subset_typical(cov, subset=6) == pytest.approx(2 * np.trace(sigma), rel=0.02)


def test_the_statistics_refuse_what_is_not_a_round() -> None:
    with pytest.raises(ScoringInvalid, match="two members"):
        subset_typical(np.eye(C), subset=1)
    with pytest.raises(ScoringInvalid, match="finite square"):
        subset_typical(np.full((C, C), np.nan), subset=3)
    with pytest.raises(ScoringInvalid, match="needs the final scores"):
        whitened_typical({}, np.eye(C - 1, C))
    w = np.eye(C - 1, C)
    assert whitened_typical({"a": 1.0, "b": 2.0, "c": np.nan}, w) == 2 * (C - 1) * 2.0 / (C - 1)
    assert whitened_typical({"a": np.inf, "b": np.nan, "c": 1.0}, w) == 0.0  # the floor then
    with pytest.raises(ScoringInvalid, match="non-zero"):
        whitened_typical({"a": 1.0}, np.zeros((C - 1, C)))
    with pytest.raises(ScoringInvalid, match="typical distance"):
        copies_threshold(-1.0)
    assert copies_threshold(None) == DUPLICATE_FLOOR
    assert copies_threshold(8.0) == DUPLICATE_THETA * 8.0


# --- the gatekeeper's threshold ----------------------------------------------------------


def tracker_of(mats: dict[str, np.ndarray], *, ranking: bool = True) -> PlanTracker:
    """A gatekeeper's plan tracker after the scoring releases of ``mats`` (plaintext values)."""
    ids = sorted(mats)
    plan = ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=(N, C),
        scoring=ScoringConfig(min_subset=3, c_steps=1 if ranking else 0),
        copies=True,
    )
    tracker = PlanTracker(plan=plan, enrolled=frozenset(ids))
    backend = PlainBackend(mats)
    rows = plan.moment_samples
    if ranking:
        for pid, value in backend.ranking_scores(ids, rows).items():
            ask = score_request(
                round_id=1,
                step="ranking",
                participant=pid,
                roster=ids,
                centre=ids,
                samples=rows,
                whitening=None,
            )
            assert tracker.reason(ask) is None
            tracker.record(ask, np.array([value]))
    subset = tuple(tracker.subset or ids)
    moments = ReleaseRequest(
        round_id=1,
        purpose="moments",
        contributors=subset,
        value_kind="aggregate",
        shape=(C, C),
        centre=subset,
        samples=rows,
    )
    assert tracker.reason(moments) is None, tracker.reason(moments)
    tracker.record(moments, backend.moments(list(subset), rows))
    assert tracker.whiten is not None
    for pid, value in backend.final_scores(ids, list(subset), tracker.whiten).items():
        ask = score_request(
            round_id=1,
            step="final",
            participant=pid,
            roster=ids,
            centre=subset,
            samples=N,
            whitening=tracker.whitening_claim("final"),
        )
        assert tracker.reason(ask) is None
        tracker.record(ask, np.array([value]))
    return tracker


def honest_pairs(mats: dict[str, np.ndarray]) -> list[float]:
    d = pairwise_distances(mats)
    return [v for (a, b), v in d.items() if a in HONEST and b in HONEST]


def test_far_colluders_at_growing_distance_do_not_move_the_threshold() -> None:
    """Three far colluders of thirteen, from the bound's eighth to the bound: tau stays put.

    The earlier shares rule (``2K/(K-1)`` times the median ranking score) grows with
    them (about 20-fold at the bound), past every honest pair distance.
    """
    alone = tracker_of(dict(HONEST)).copies_threshold()
    assert DUPLICATE_FLOOR < alone < min(honest_pairs(HONEST))
    for scale in (1.0, 2.0, 4.0, 8.0):
        mats = {**HONEST, **far_colluders(scale)}
        tracker = tracker_of(mats)
        assert not set(tracker.subset or ()) & {"x0", "x1", "x2"}  # outside H
        assert tracker.copies_threshold() == pytest.approx(alone, rel=0.25)
        assert shares_threshold(tracker) == tracker.copies_threshold()  # the helper's
        ranking = sorted(tracker.ranking_scores.values())
        earlier = DUPLICATE_THETA * 2 * 13 / 12 * ranking[len(ranking) // 2]
        if scale == 8.0:
            assert earlier > 3 * max(honest_pairs(mats)) > 10 * tracker.copies_threshold()


@pytest.mark.parametrize("kind", ["threshold_inflate", "threshold_inside"])
def test_an_adaptive_coalition_does_not_raise_tau_past_an_honest_pair(kind: str) -> None:
    """Including a member placed inside H: it widens H (the subset estimate alone would
    count every honest pair as a copy), not the threshold."""
    mats = {**HONEST, **coalition(kind)}
    tracker = tracker_of(mats)
    alone = tracker_of(dict(HONEST)).copies_threshold()
    assert tracker.copies_threshold() < 2 * alone < min(honest_pairs(mats))
    assert tracker.final_scores and tracker.whiten is not None
    if kind == "threshold_inside":
        assert "x2" in (tracker.subset or ())  # the inside member made it into H
        subset = tuple(tracker.subset or ())
        backend = PlainBackend(mats)
        cov = pooled_covariance(
            second_moment=backend.moments(list(subset), N), count=len(subset), samples=N
        )
        subset_only = copies_threshold(subset_typical(cov, subset=len(subset)))
        assert subset_only > max(honest_pairs(mats))  # what the first estimate alone allows
        assert tracker.copies_threshold() == pytest.approx(
            copies_threshold(
                round_typical(
                    covariance=cov,
                    subset=len(subset),
                    scores=tracker.final_scores,
                    whiten=tracker.whiten,
                )
            )
        )


def test_without_a_ranking_pass_the_threshold_is_the_floor() -> None:
    """H is then everybody, far uploads included: nothing robust to read, so the floor."""
    tracker = tracker_of({**HONEST, **far_colluders(8.0)}, ranking=False)
    assert tracker.copies_typical is None and tracker.copies_threshold() == DUPLICATE_FLOOR


# --- the three modes through real engine rounds ------------------------------------------


def engine_copies(tmp_path: Path, mode: str, mats: dict[str, np.ndarray]) -> dict[str, object]:
    """One engine round in ``mode`` (outlier policy, signed envelopes); the audited copies."""
    ids = sorted(mats)
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode=mode, shape=(N, C), participant_ids=ids, min_participants=3, audit=sink
    )
    harness = Harness(dep, tmp_path / mode, ids=ids, min_participants=3, audit=sink)
    harness.round(1, mats)
    events = sink.named("outlier.decision")
    return {str(e["participant_id"]): e["copies"] for e in events}


def jittered_group() -> dict[str, np.ndarray]:
    """All honest; p08 and p09 send p07's matrix with small noise (pair distance ~0.1-0.2)."""
    rng = np.random.default_rng(21)
    mats = dict(HONEST)
    for pid in ("p08", "p09"):
        mats[pid] = np.clip(mats["p07"] + rng.normal(0.0, 0.08, (N, C)), -BOUND, BOUND)
    return mats


@pytest.mark.slow
def test_the_three_modes_count_the_same_copies_and_no_honest_one(tmp_path: Path) -> None:
    """Ten honest and three far colluders, then an all-honest round with a copy group."""
    mats = {**HONEST, **far_colluders(8.0)}
    found = {mode: engine_copies(tmp_path / "far", mode, mats) for mode in ("plaintext", "shares")}
    found["ckks"] = engine_copies(tmp_path / "far", "ckks", mats)
    assert found["plaintext"] == found["shares"] == found["ckks"], found
    for mode, copies in found.items():
        assert all(copies[p] == 0 for p in HONEST), (mode, copies)  # none down-weighted
    group = jittered_group()
    d = pairwise_distances(group)
    assert all(DUPLICATE_FLOOR < d[p] for p in combinations(("p07", "p08", "p09"), 2))
    counts = {mode: engine_copies(tmp_path / "group", mode, group) for mode in found}
    assert counts["plaintext"] == counts["shares"] == counts["ckks"], counts
    expected = {p: 2 if p in ("p07", "p08", "p09") else 0 for p in group}
    assert counts["plaintext"] == expected

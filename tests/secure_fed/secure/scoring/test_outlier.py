from __future__ import annotations

import pytest
from scipy.stats import chi2

from privacy_ledger.errors import UnknownEventType
from secure_fed.errors import OutlierConfigInvalid, StaleRound
from secure_fed.secure.scoring.outlier import (
    IMPOSSIBLE_SCORE_SLACK,
    Decision,
    MemoryAuditSink,
    OutlierConfig,
    OutlierPolicy,
    excluded_ids,
)


def test_thresholds_are_chi_square_quantiles() -> None:
    low, high = OutlierConfig().thresholds(9)
    assert low == pytest.approx(chi2.ppf(0.99, 9))
    assert high == pytest.approx(chi2.ppf(0.999, 9))
    assert high == pytest.approx(27.877, abs=1e-3)


def test_one_noisy_round_does_not_exclude_an_honest_participant() -> None:
    policy = OutlierPolicy(dof=9)
    policy.decide({"a": 9.0, "b": 8.0}, round_id=1)
    decisions = policy.decide({"a": 40.0, "b": 8.0}, round_id=2)  # one bad round: EMA 24.5
    assert decisions["a"].action == "downweight"
    assert 0.05 < decisions["a"].factor < 1.0
    assert excluded_ids(policy.decide({"a": 9.0, "b": 8.0}, round_id=3)) == set()


def test_gross_attack_is_excluded_at_once_and_persistent_drift_later() -> None:
    policy = OutlierPolicy(dof=9)
    honest = {f"h{i}": 9.0 for i in range(5)}
    policy.decide({"a": 9.0, "b": 9.0, **honest}, round_id=1)
    second = policy.decide({"a": 500.0, "b": 9.0, **honest}, round_id=2)
    assert excluded_ids(second) == {"a"}  # hard: 500 > 3 * 27.9
    assert second["a"].factor == 0.0
    third = policy.decide({"a": 9.0, "b": 45.0, **honest}, round_id=3)
    assert excluded_ids(third) == set()  # a behaves: readmitted
    assert third["a"].smoothed > 27.9  # although its history is still high ...
    assert third["a"].action == "downweight" and third["a"].factor == 0.05  # ... at min_factor
    assert third["b"].action == "downweight"  # EMA of b: 27.0, below 27.9
    fourth = policy.decide({"a": 9.0, "b": 45.0, **honest}, round_id=4)
    assert excluded_ids(fourth) == {"b"}  # b: EMA 36 and 45 > 27.9


def test_factor_never_leaves_min_factor_to_one() -> None:
    policy = OutlierPolicy(dof=9)
    policy.decide({"a": 9.0, "b": 9.0, "c": 9.0}, round_id=1)
    policy.decide({"a": 900.0, "b": 9.0, "c": 9.0}, round_id=2)  # a excluded: EMA 454.5
    for rid in range(3, 8):  # a honest again while its EMA decays through both thresholds
        d = policy.decide({"a": 9.0, "b": 9.0, "c": 9.0}, round_id=rid)["a"]
        assert d.action != "exclude" and 0.05 <= d.factor <= 1.0, (rid, d)


def test_same_round_enters_the_history_once() -> None:
    policy = OutlierPolicy(dof=9)
    policy.decide({"a": 9.0, "b": 8.0}, round_id=1)
    first = policy.decide({"a": 40.0, "b": 8.0}, round_id=2)
    again = policy.decide({"a": 40.0, "b": 8.0}, round_id=2)  # e.g. re-filtered after a restart
    assert again == first and policy.history["a"] == pytest.approx(24.5)
    with pytest.raises(StaleRound, match="round 1 is older"):
        policy.decide({"a": 9.0, "b": 8.0}, round_id=1)


def test_only_a_minority_is_excluded_and_never_below_min_keep() -> None:
    scores = {"a": 900.0, "b": 800.0, "c": 700.0, "d": 9.0, "e": 8.0}
    # a majority above the cut: the model's own cuts (dispersion scaling would read a
    # majority's spread as the honest one)
    model_cuts = OutlierConfig(dispersion=False)
    decisions = OutlierPolicy(dof=9, config=model_cuts).decide(scores, round_id=1)
    assert excluded_ids(decisions) == {"a", "b"}  # (5 - 1) // 2 = 2; c is down-weighted
    assert decisions["c"].action == "downweight" and decisions["c"].factor == 0.05
    strict = OutlierPolicy(dof=9, min_keep=4, config=model_cuts)
    assert excluded_ids(strict.decide(scores, round_id=1)) == {"a"}
    with pytest.raises(OutlierConfigInvalid, match="min_keep"):
        OutlierPolicy(dof=9, min_keep=0)


def test_down_weight_only_policy_never_excludes() -> None:
    policy = OutlierPolicy(dof=9, config=OutlierConfig(exclude=False))
    decisions = policy.decide({"a": 900.0, "b": 9.0, "c": 8.0, "d": 25.0}, round_id=1)
    assert excluded_ids(decisions) == set()
    assert decisions["a"].action == "downweight" and decisions["a"].factor == 0.05
    assert decisions["d"].action == "downweight" and 0.05 < decisions["d"].factor < 1


def test_decisions_carry_score_thresholds_and_factor() -> None:
    decisions = OutlierPolicy(dof=4).decide({"x": 1.0, "y": 100.0, "z": 2.0}, round_id=3)
    assert sorted(decisions) == ["x", "y", "z"]
    y = decisions["y"]
    assert y.action == "exclude" and y.excluded and y.factor == 0.0 and y.score == 100.0
    assert y.exclude_threshold == pytest.approx(chi2.ppf(0.999, 4))
    assert y.downweight_threshold == pytest.approx(chi2.ppf(0.99, 4))
    assert {p: d.factor for p, d in decisions.items()} == {"x": 1.0, "y": 0.0, "z": 1.0}
    assert Decision.from_dict(y.to_dict()) == y


@pytest.mark.parametrize(
    ("action", "factor"), [("exclude", 0.5), ("downweight", 0.0), ("keep", 1.5), ("drop", 1.0)]
)
def test_decision_factor_must_match_action(action: str, factor: float) -> None:
    with pytest.raises(OutlierConfigInvalid, match="action|factor"):
        Decision(participant_id="p", score=1.0, smoothed=1.0, action=action, factor=factor)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("exclude_quantile", 1.0),
        ("downweight_quantile", 0.9995),
        ("ema", 1.0),
        ("hard_factor", 0.5),
        ("min_factor", 2.0),
        ("min_factor", 0.0),
        ("exclude", "no"),
    ],
)
def test_config_is_validated(field: str, value: float) -> None:
    with pytest.raises(OutlierConfigInvalid, match=field):
        OutlierConfig(**{field: value})


def test_bad_scores_and_dof_are_refused() -> None:
    with pytest.raises(OutlierConfigInvalid, match="dof"):
        OutlierPolicy(dof=0)
    for bad in (float("nan"), float("inf"), "3", True):
        with pytest.raises(OutlierConfigInvalid, match="'a'"):
            OutlierPolicy(dof=3).decide({"a": bad}, round_id=1)  # type: ignore[dict-item]


def test_a_negative_score_is_excluded_and_moves_nothing_else() -> None:
    """A squared distance below 0 (a ckks value beyond the headroom wraps its score) is no
    honest upload's: excluded whatever the configuration, never the round's stall (it
    raised before), and left out of the dispersion and the history."""
    honest = {"a": 40.0, "b": 42.0, "c": 44.0, "d": 41.0}
    reference = OutlierPolicy(dof=3, config=OutlierConfig(exclude=False)).decide(honest, round_id=1)
    for score in (-7.4e6, -1.0, -0.011):
        policy = OutlierPolicy(dof=3, config=OutlierConfig(exclude=False), min_keep=4)
        out = policy.decide({**honest, "x": score}, round_id=1)
        assert out["x"].action == "exclude" and out["x"].factor == 0.0
        assert {p: out[p] for p in honest} == reference  # dispersion unchanged
        assert "x" not in policy.history
    # within the noise allowance a slightly negative score is an ordinary (tiny) score
    near = OutlierPolicy(dof=3).decide({**honest, "x": -IMPOSSIBLE_SCORE_SLACK / 2}, round_id=1)
    assert near["x"].action == "keep"


def test_memory_sink_refuses_unregistered_events() -> None:
    with pytest.raises(UnknownEventType, match="outlier.decision"):
        MemoryAuditSink().record("outlier.guess", {})


def test_honest_heterogeneity_is_not_mistaken_for_poisoning() -> None:
    # heterogeneous honest models score far above C - 1 = 9 but close to each other
    honest = {"a": 280.0, "b": 300.0, "c": 320.0, "d": 260.0, "e": 310.0}
    policy = OutlierPolicy(dof=9, config=OutlierConfig(exclude=False))
    decisions = policy.decide(honest, round_id=1)
    assert {d.action for d in decisions.values()} == {"keep"}
    # the applied (scaled) cuts are what the decision records
    scale = 300.0 / 9  # lower median of the five scores
    assert decisions["a"].downweight_threshold == pytest.approx(policy.low * scale)
    # without the correction every honest participant would be down-weighted to min_factor
    plain = OutlierPolicy(dof=9, config=OutlierConfig(exclude=False, dispersion=False))
    assert {d.factor for d in plain.decide(honest, round_id=1).values()} == {0.05}


def test_a_gross_outlier_is_still_caught_and_a_minority_cannot_raise_the_cuts() -> None:
    scores = {"a": 280.0, "b": 300.0, "c": 320.0, "d": 260.0, "e": 30_000.0}
    decisions = OutlierPolicy(dof=9).decide(scores, round_id=1)
    assert decisions["e"].action == "exclude"
    assert {decisions[p].action for p in "abcd"} == {"keep"}
    # two colluders (a minority of five) with huge scores move the lower median at most to
    # an honest score (here c's 320), never beyond the largest honest one
    policy = OutlierPolicy(dof=9)
    assert policy.dispersion({**scores, "d": 1e9, "e": 1e9}) == pytest.approx(320.0 / 9)
    assert policy.dispersion({"a": 1.0, "b": 2.0}) == 1.0  # never below the model's cuts

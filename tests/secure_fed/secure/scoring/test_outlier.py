from __future__ import annotations

import pytest
from scipy.stats import chi2

from privacy_ledger.errors import UnknownEventType
from secure_fed.errors import OutlierConfigInvalid
from secure_fed.secure.scoring.outlier import MemoryAuditSink, OutlierConfig, OutlierPolicy


def test_thresholds_are_chi_square_quantiles() -> None:
    low, high = OutlierConfig().thresholds(9)
    assert low == pytest.approx(chi2.ppf(0.99, 9))
    assert high == pytest.approx(chi2.ppf(0.999, 9))
    assert high == pytest.approx(27.877, abs=1e-3)


def test_one_noisy_round_does_not_exclude_an_honest_participant() -> None:
    policy = OutlierPolicy(dof=9)
    policy.decide_all({"a": 9.0, "b": 8.0})
    decisions = policy.decide_all({"a": 40.0, "b": 8.0})  # one bad round: EMA 24.5
    assert decisions["a"].action == "downweight"
    assert 0.05 < decisions["a"].factor < 1.0
    assert policy.decide({"a": 9.0, "b": 8.0}) == set()


def test_gross_attack_is_excluded_at_once_and_persistent_drift_later() -> None:
    policy = OutlierPolicy(dof=9)
    honest = {f"h{i}": 9.0 for i in range(5)}
    policy.decide_all({"a": 9.0, "b": 9.0, **honest})
    assert policy.decide({"a": 500.0, "b": 9.0, **honest}) == {"a"}  # hard: 500 > 3 * 27.9
    assert policy.decide({"a": 9.0, "b": 45.0, **honest}) == set()  # a behaves: readmitted
    assert policy.last["a"].smoothed > 27.9  # although its history is still high
    assert policy.last["b"].action == "downweight"  # EMA of b: 27.0, below 27.9
    assert policy.decide({"a": 9.0, "b": 45.0, **honest}) == {"b"}  # b: EMA 36 and 45 > 27.9


def test_only_a_minority_is_excluded_and_never_below_min_keep() -> None:
    scores = {"a": 900.0, "b": 800.0, "c": 700.0, "d": 9.0, "e": 8.0}
    policy = OutlierPolicy(dof=9)
    assert policy.decide(scores) == {"a", "b"}  # (5 - 1) // 2 = 2; c is down-weighted
    assert policy.last["c"].action == "downweight" and policy.last["c"].factor == 0.05
    strict = OutlierPolicy(dof=9, min_keep=4)
    assert strict.decide(scores) == {"a"}
    with pytest.raises(OutlierConfigInvalid, match="min_keep"):
        OutlierPolicy(dof=9, min_keep=0)


def test_down_weight_only_policy_never_excludes() -> None:
    policy = OutlierPolicy(dof=9, config=OutlierConfig(exclude=False))
    assert policy.decide({"a": 900.0, "b": 9.0, "c": 8.0, "d": 25.0}) == set()
    assert policy.last["a"].action == "downweight" and policy.last["a"].factor == 0.05
    assert policy.last["d"].action == "downweight" and 0.05 < policy.last["d"].factor < 1


def test_every_decision_is_audited_with_score_and_thresholds() -> None:
    sink = MemoryAuditSink()
    policy = OutlierPolicy(dof=4, audit=sink)
    policy.round_id = 3
    policy.decide({"x": 1.0, "y": 100.0, "z": 2.0})
    events = sink.named("outlier.decision")
    assert [e["participant_id"] for e in events] == ["x", "y", "z"]
    assert events[1]["action"] == "exclude" and events[1]["round_id"] == 3
    assert events[1]["exclude_threshold"] == pytest.approx(chi2.ppf(0.999, 4))
    assert events[0]["score"] == 1.0 and "downweight_threshold" in events[0]
    assert policy.factors() == {"x": 1.0, "y": 0.0, "z": 1.0}


@pytest.mark.parametrize("field,value", [("exclude_quantile", 1.0), ("downweight_quantile", 0.9995),
                                         ("ema", 1.0), ("hard_factor", 0.5), ("min_factor", 2.0),
                                         ("exclude", "no")])
def test_config_is_validated(field: str, value: float) -> None:
    with pytest.raises(OutlierConfigInvalid, match=field):
        OutlierConfig(**{field: value})


def test_bad_scores_and_dof_are_refused() -> None:
    with pytest.raises(OutlierConfigInvalid, match="dof"):
        OutlierPolicy(dof=0)
    with pytest.raises(OutlierConfigInvalid, match="'a'"):
        OutlierPolicy(dof=3).decide({"a": -1.0})
    with pytest.raises(OutlierConfigInvalid, match="'a'"):
        OutlierPolicy(dof=3).decide({"a": float("nan")})


def test_memory_sink_refuses_unregistered_events() -> None:
    with pytest.raises(UnknownEventType, match="outlier.decision"):
        MemoryAuditSink().record("outlier.guess", {})

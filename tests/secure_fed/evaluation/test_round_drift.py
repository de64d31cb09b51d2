"""The differencing estimators of ``bench/round_drift.py`` on synthetic upload matrices.

Two publications of successive rounds, the second without participant j, give
j's upload back exactly when nobody's predictions changed, and off by exactly
the sum of the others' drift (equal weights) when they did. No federation runs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

_BENCH = Path(__file__).resolve().parents[3] / "bench" / "round_drift.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_round_drift", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rd = _load()

IDS = ("a", "b", "c", "d", "e")
SHAPE = (40, 10)


def _uploads(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {pid: rng.normal(0.0, 2.0, SHAPE) for pid in IDS}


def _weights(rng: np.random.Generator) -> dict[str, float]:
    raw = rng.uniform(0.5, 1.5, len(IDS))
    return {pid: float(w) for pid, w in zip(IDS, raw / raw.sum(), strict=True)}


@pytest.mark.parametrize("j", IDS)
def test_unchanged_predictions_recover_the_upload_exactly(j: str) -> None:
    rng = np.random.default_rng(11)
    up, w = _uploads(rng), _weights(rng)
    figs = rd.pair_metrics(up, up, j, w_prev=w, w_curr=w)
    for name in ("equal", "weighted", "weighted_ls"):
        assert figs[name]["err_prev"] < 1e-9, name
        assert figs[name]["argmax"] == 1.0
        assert figs[name]["corr"] == pytest.approx(1.0)
    assert figs["reference"]["dist_to_mean"] > 1.0  # the leak is not the mean's doing


def test_equal_weight_error_is_the_others_drift_sum() -> None:
    rng = np.random.default_rng(12)
    prev = _uploads(rng)
    curr = {pid: m + rng.normal(0.0, 0.3, SHAPE) for pid, m in prev.items()}
    j, others = "c", [p for p in IDS if p != "c"]
    pub_prev = rd.weighted_publication(prev, {p: 1 / len(IDS) for p in IDS})
    pub_curr = rd.weighted_publication(curr, {p: 1 / len(others) for p in others})
    est = rd.equal_weight_estimate(pub_prev, pub_curr, len(IDS))
    drift_sum = sum(prev[p] - curr[p] for p in others)
    np.testing.assert_allclose(est, prev[j] + drift_sum, atol=1e-10)
    figs = rd.pair_metrics(prev, curr, j)
    assert figs["equal"]["err_prev"] == pytest.approx(rd.rms(drift_sum), rel=1e-9)
    assert figs["equal"]["err_curr"] == pytest.approx(
        rd.rms(drift_sum + prev[j] - curr[j]), rel=1e-9
    )
    assert set(figs) == {"equal", "reference"}  # no weights given, no weighted estimate


def test_published_weights_recover_exactly_with_the_natural_scale() -> None:
    rng = np.random.default_rng(13)
    prev, w = _uploads(rng), _weights(rng)
    j = "b"
    pub_prev = rd.weighted_publication(prev, w)
    pub_curr = rd.weighted_publication(prev, rd.renormalised(w, j))
    est = rd.difference_estimate(pub_prev, pub_curr, w[j], 1.0 - w[j])
    np.testing.assert_allclose(est, prev[j], atol=1e-10)
    s = rd.least_squares_scale(pub_prev, pub_curr, w[j], prev[j])
    assert s == pytest.approx(1.0 - w[j], rel=1e-9)


def test_least_squares_scale_is_no_worse_than_the_natural_one() -> None:
    rng = np.random.default_rng(14)
    prev, w_prev, w_curr = _uploads(rng), _weights(rng), _weights(rng)
    curr = {pid: 0.8 * m + rng.normal(0.0, 0.5, SHAPE) for pid, m in prev.items()}
    for j in IDS:
        figs = rd.pair_metrics(prev, curr, j, w_prev=w_prev, w_curr=w_curr)
        assert figs["weighted_ls"]["err_prev"] <= figs["weighted"]["err_prev"] + 1e-12
        assert figs["equal"]["err_prev"] > 0.1


def test_drift_and_argmax_helpers() -> None:
    rng = np.random.default_rng(15)
    prev = _uploads(rng)
    curr = {pid: m + 1.0 for pid, m in prev.items()}  # a constant shift: drift 1, argmax kept
    drift = rd.participant_drift(prev, curr)
    for pid in IDS:
        assert drift[pid]["drift"] == pytest.approx(1.0)
        assert drift[pid]["rel_drift"] == pytest.approx(1.0 / drift[pid]["dist_to_mean"])
    a = prev["a"]
    assert rd.argmax_agreement(a, a + 5.0) == 1.0
    assert rd.argmax_agreement(a, -a) == 0.0
    rows = np.zeros(SHAPE[0], dtype=bool)
    rows[:3] = True
    assert rd.argmax_agreement(a, a, rows) == 1.0

"""Round-to-round drift of uploads, and what differencing two publications reveals.

Run ``python bench/round_drift.py [--rounds 5 --seeds 0 1 --participants 4]``;
prints one JSON object.

Threat: an aggregator that sees the publications of successive rounds subtracts
them. If round t-1 publishes over roster R and round t over R minus participant
j (a dropout), then with equal weights

    p̂_j = |R| * pub_{t-1} - (|R| - 1) * pub_t = p_j^{t-1} + sum_{i != j} (p_i^{t-1} - p_i^t),

exact when predictions do not change between rounds and off by the other
participants' drift otherwise. With the published weights w (round t-1) and v
(round t, over R minus j) the estimate is ``p̂_j = (pub_{t-1} - s * pub_t) / w_j``;
``s = 1 - w_j`` is what an attacker can use (``weighted``), the least-squares
``s`` against the true ``p_j^{t-1}`` (``weighted_ls``) needs the answer and is
an upper bound on what any ``s`` achieves.

Measured on real demo federations (``Federation`` with the demo's defaults:
digits, Dirichlet(0.5), epsilon 8, the default architectures cycling
mlp / cnn / transformer / logreg, mode ``plaintext``; the predictions are the same
as in the secure modes). After every round the accepted upload matrices (as the
participants sent them, clipped) are read from the engine's round state and
decoded; the publication of a simulated dropout is recomputed from the others'
captured uploads. The others' round-t uploads do not depend on j's absence at
round t (they are computed before round t aggregates), so the simulation is
exact for the uploads; the renormalised weights are an approximation of what the
weighting would assign without j. The local-only twins are off (``baseline=False``):
they do not touch the federated participants' predictions.

How to read it (every figure is an RMS over the ``N_pub x C`` logit cells, or a
mean of per-(seed, participant) values):

* ``drift``: RMS(p_k^t - p_k^{t-1}); ``rel_drift``: that / RMS(p_k^t - mean_k p_k^t).
* ``dist_to_mean``: RMS(p_j^{t-1} - mean_k p_k^{t-1}), the signal the attacker
  wants. An estimate whose ``err_prev`` (RMS(p̂_j - p_j^{t-1})) is much below it leaks
  j's upload; one at or above it reveals no more than the published mean.
* ``err_prev`` / ``err_curr``: error against j's upload of round t-1 / t.
* ``corr``: Pearson correlation of p̂_j and p_j^{t-1} over cells; ``corr_dev`` the same
  after subtracting the round t-1 mean upload from both (what is *not* in the mean).
* ``argmax``: fraction of public rows where argmax p̂_j == argmax p_j^{t-1};
  ``argmax_mean``: the same for the published mean alone (free to the attacker);
  ``argmax_disagree``: agreement on the rows where j's argmax differs from the mean's
  (j's own label information; None when there is no such row).
* ``unchanged``: the same estimators on one round's uploads (t-1 == t): ~0 error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

__all__ = [
    "argmax_agreement",
    "difference_estimate",
    "drift_rms",
    "equal_weight_estimate",
    "equal_weights",
    "least_squares_scale",
    "pair_metrics",
    "participant_drift",
    "renormalised",
    "rms",
    "weighted_publication",
]


# -- estimators (pure numpy) -------------------------------------------------------------


def rms(x: np.ndarray) -> float:
    """Root mean square over every cell."""
    a = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(np.mean(a * a)))


def weighted_publication(
    uploads: Mapping[str, np.ndarray], weights: Mapping[str, float]
) -> np.ndarray:
    """``sum_i weights[i] * uploads[i]`` over the ids in ``weights`` (float64)."""
    return np.asarray(
        sum(float(w) * np.asarray(uploads[pid], dtype=np.float64) for pid, w in weights.items()),
        dtype=np.float64,
    )


def equal_weights(ids: Sequence[str]) -> dict[str, float]:
    """Weight ``1 / len(ids)`` each."""
    return {pid: 1.0 / len(ids) for pid in ids}


def renormalised(weights: Mapping[str, float], without: str) -> dict[str, float]:
    """``weights`` without ``without``, rescaled to sum to 1."""
    rest = {p: float(w) for p, w in weights.items() if p != without}
    total = sum(rest.values())
    return {p: w / total for p, w in rest.items()}


def equal_weight_estimate(pub_prev: np.ndarray, pub_curr: np.ndarray, roster: int) -> np.ndarray:
    """``|R| * pub_{t-1} - (|R| - 1) * pub_t`` (equal weights, one dropout at round t)."""
    return roster * np.asarray(pub_prev, np.float64) - (roster - 1) * np.asarray(
        pub_curr, np.float64
    )


def difference_estimate(
    pub_prev: np.ndarray, pub_curr: np.ndarray, w_j: float, s: float
) -> np.ndarray:
    """``(pub_{t-1} - s * pub_t) / w_j``: j's round t-1 upload from two publications."""
    return (np.asarray(pub_prev, np.float64) - s * np.asarray(pub_curr, np.float64)) / w_j


def least_squares_scale(
    pub_prev: np.ndarray, pub_curr: np.ndarray, w_j: float, target: np.ndarray
) -> float:
    """The ``s`` minimising ``||difference_estimate(...) - target||`` over all cells.

    Needs the answer (``target``): an upper bound on the attacker's accuracy.
    """
    prev, curr = np.asarray(pub_prev, np.float64), np.asarray(pub_curr, np.float64)
    residual = prev - w_j * np.asarray(target, np.float64)
    denom = float(np.sum(curr * curr))
    return float(np.sum(residual * curr) / denom) if denom > 0 else 0.0


def drift_rms(prev: np.ndarray, curr: np.ndarray) -> float:
    """RMS(curr - prev)."""
    return rms(np.asarray(curr, np.float64) - np.asarray(prev, np.float64))


def argmax_agreement(a: np.ndarray, b: np.ndarray, rows: np.ndarray | None = None) -> float | None:
    """Fraction of rows (of ``rows`` when given) where the argmaxes of ``a`` and ``b`` agree."""
    same = np.argmax(a, axis=1) == np.argmax(b, axis=1)
    if rows is not None:
        same = same[rows]
    return float(np.mean(same)) if same.size else None


def _corr(a: np.ndarray, b: np.ndarray) -> float | None:
    x, y = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    if np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def pair_metrics(
    prev: Mapping[str, np.ndarray],
    curr: Mapping[str, np.ndarray],
    j: str,
    *,
    w_prev: Mapping[str, float] | None = None,
    w_curr: Mapping[str, float] | None = None,
) -> dict[str, dict[str, float | None]]:
    """Differencing figures for ``j`` dropping out at round t (uploads ``prev`` -> ``curr``).

    ``prev`` holds round t-1's uploads (roster R), ``curr`` round t's (at least R minus
    j). ``w_prev`` / ``w_curr`` are the published weights (``None``: only the equal-weight
    estimate); ``w_curr`` is renormalised over R minus j.
    """
    ids = sorted(prev)
    others = [p for p in ids if p != j]
    target, target_curr = np.asarray(prev[j], np.float64), np.asarray(curr[j], np.float64)
    mean_prev = weighted_publication(prev, equal_weights(ids))
    cases: dict[str, np.ndarray] = {
        "equal": equal_weight_estimate(
            mean_prev, weighted_publication(curr, equal_weights(others)), len(ids)
        )
    }
    if w_prev is not None and w_curr is not None:
        pub_prev = weighted_publication(prev, {p: w_prev[p] for p in ids})
        pub_curr = weighted_publication(curr, renormalised({p: w_curr[p] for p in ids}, j))
        w_j = float(w_prev[j])
        cases["weighted"] = difference_estimate(pub_prev, pub_curr, w_j, 1.0 - w_j)
        s = least_squares_scale(pub_prev, pub_curr, w_j, target)
        cases["weighted_ls"] = difference_estimate(pub_prev, pub_curr, w_j, s)
    disagree = np.argmax(target, axis=1) != np.argmax(mean_prev, axis=1)
    out: dict[str, dict[str, float | None]] = {}
    for name, est in cases.items():
        out[name] = {
            "err_prev": rms(est - target),
            "err_curr": rms(est - target_curr),
            "corr": _corr(est, target),
            "corr_dev": _corr(est - mean_prev, target - mean_prev),
            "argmax": argmax_agreement(est, target),
            "argmax_disagree": argmax_agreement(est, target, disagree) if disagree.any() else None,
        }
    out["reference"] = {
        "dist_to_mean": rms(target - mean_prev),
        "argmax_mean": argmax_agreement(mean_prev, target),
        "disagree_rows": float(np.mean(disagree)),
        "w_j": None if w_prev is None else float(w_prev[j]),
    }
    return out


def participant_drift(
    prev: Mapping[str, np.ndarray], curr: Mapping[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    """Per participant: drift RMS, distance of its round-t upload to the mean, and their ratio."""
    ids = sorted(set(prev) & set(curr))
    mean_curr = weighted_publication(curr, equal_weights(ids))
    out = {}
    for pid in ids:
        d = drift_rms(prev[pid], curr[pid])
        spread = rms(np.asarray(curr[pid], np.float64) - mean_curr)
        out[pid] = {"drift": d, "dist_to_mean": spread, "rel_drift": d / spread if spread else 0.0}
    return out


# -- federation runs ------------------------------------------------------------------------


def run_federation(
    participants: int, rounds: int, seed: int, workdir: Path
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, float]], dict[str, object], float]:
    """Run the demo federation in plaintext mode; per round: uploads, published weights.

    Returns the uploads and weights per round, the architectures and each round's
    training status (with the epsilon spent so far) and mean test accuracy, and the largest
    difference between the captured publication (times the sharpening temperature)
    and the weighted sum recomputed from the captured uploads.
    """
    import torch

    from secure_fed.demo_options import DemoConfig
    from secure_fed.federation.federation import Federation
    from secure_fed.federation.messages import decode_publication
    from secure_fed.federation.store import JsonFileRoundStore
    from secure_fed.learning.budget_gate import InMemoryBudgetGate
    from secure_fed.wire import decode_matrix

    torch.set_num_threads(1)
    demo = DemoConfig(participants=participants, rounds=rounds, seed=seed, mode="plaintext")
    config = replace(demo.federation_config(), baseline=False)
    task = demo.load_data()
    fed = Federation(
        config=config,
        task=task,
        budget=InMemoryBudgetGate(epsilon=config.epsilon, delta=config.delta),
        store=JsonFileRoundStore(directory=workdir),
    )
    uploads: list[dict[str, np.ndarray]] = []
    weights: list[dict[str, float]] = []
    training: list[dict[str, str]] = []
    accuracy: list[float] = []
    check = 0.0
    for _ in range(rounds):
        result = fed.run_round()
        state = fed.engine.state(result.round_id)
        if state.stage.value != "published":
            raise RuntimeError(f"round {result.round_id} did not publish: {result.reason}")
        mats = {
            pid: decode_matrix(u.payload).astype(np.float64)
            for pid, u in state.uploads.items()
            if pid not in state.excluded
        }
        uploads.append(mats)
        training.append(
            {
                r.participant_id: f"{r.private_training} eps={r.epsilon_spent or 0:.2f}"
                for r in result.rows
            }
        )
        weights.append({p: float(w) for p, w in state.weights.items()})
        accuracy.append(round(result.mean_accuracy()[0], 4))
        assert state.publication is not None
        pub = decode_publication(state.publication, max_bytes=len(state.publication))
        recomputed = weighted_publication(mats, state.weights)
        published = pub.aggregate.astype(np.float64) * config.sharpen_temperature
        check = max(check, float(np.max(np.abs(published - recomputed))))
    archs = {m.participant.participant_id: m.architecture for m in fed.members}
    return (
        uploads,
        weights,
        {"architectures": archs, "training": training, "accuracy": accuracy},
        check,
    )


# -- summaries ------------------------------------------------------------------------------


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    v = [float(x) for x in values if x is not None]
    if not v:
        return {"mean": None, "median": None, "max": None}
    return {
        "mean": round(float(np.mean(v)), 4),
        "median": round(float(np.median(v)), 4),
        "max": round(float(np.max(v)), 4),
    }


def _mean(values: Sequence[float | None]) -> float | None:
    v = [float(x) for x in values if x is not None]
    return round(float(np.mean(v)), 4) if v else None


_ESTIMATES = ("equal", "weighted", "weighted_ls")
_FIELDS = ("err_prev", "err_curr", "corr", "corr_dev", "argmax", "argmax_disagree")


def _summarise(records: list[dict[str, object]]) -> dict[str, object]:
    """Mean / median / max of drift; means of the differencing figures."""

    def col(key: str, sub: str | None = None) -> list[float | None]:
        out: list[float | None] = []
        for r in records:
            v = r[key]
            if sub is not None:
                assert isinstance(v, dict)
                v = v[sub]
            out.append(v if v is None else float(v))  # type: ignore[arg-type]
        return out

    summary: dict[str, object] = {
        "n": len(records),
        "drift": _stats(col("drift")),
        "rel_drift": _stats(col("rel_drift")),
        "dist_to_mean": _stats(col("dist_to_mean")),
        "argmax_mean": _mean(col("argmax_mean")),
        "disagree_rows": _mean(col("disagree_rows")),
        "w_j": _stats(col("w_j")),
    }
    for name in _ESTIMATES:
        if all(name in r for r in records):
            summary[name] = {f: _mean(col(name, f)) for f in _FIELDS}
            errors = _stats(col(name, "err_prev"))
            summary[name]["err_prev_median"] = errors["median"]  # type: ignore[index]
            summary[name]["err_prev_max"] = errors["max"]  # type: ignore[index]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--participants", type=int, nargs="+", default=[4])
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    warnings.filterwarnings("ignore", category=UserWarning)
    started = time.perf_counter()
    records: list[dict[str, object]] = []
    sanity: list[float] = []
    runs = []
    with tempfile.TemporaryDirectory(prefix="round-drift-") as tmp:
        for k in args.participants:
            for seed in args.seeds:
                t0 = time.perf_counter()
                ups, ws, info, check = run_federation(
                    k, args.rounds, seed, Path(tmp) / f"{k}-{seed}"
                )
                archs = info["architectures"]
                assert isinstance(archs, dict)
                runs.append(
                    {
                        "participants": k,
                        "seed": seed,
                        **info,
                        "publication_check_max_abs": check,
                        "seconds": round(time.perf_counter() - t0, 1),
                    }
                )
                for t in range(1, len(ups)):
                    prev, curr = ups[t - 1], ups[t]
                    drift = participant_drift(prev, curr)
                    for j in sorted(set(prev) & set(curr)):
                        figs = pair_metrics(prev, curr, j, w_prev=ws[t - 1], w_curr=ws[t])
                        rec: dict[str, object] = {
                            "participants": k,
                            "seed": seed,
                            "round": t + 1,
                            "participant": j,
                            "architecture": archs.get(j),
                            "drift": drift[j]["drift"],
                            "rel_drift": drift[j]["rel_drift"],
                            **figs["reference"],
                            **{n: figs[n] for n in _ESTIMATES if n in figs},
                        }
                        records.append(rec)
                for t in range(len(ups)):
                    for j in sorted(ups[t]):
                        same = pair_metrics(ups[t], ups[t], j, w_prev=ws[t], w_curr=ws[t])
                        sanity.extend(
                            float(same[n]["err_prev"] or 0.0) for n in ("equal", "weighted")
                        )
    report: dict[str, object] = {"benchmark": "round_drift", "rounds": args.rounds, "runs": runs}
    by_k: dict[str, object] = {}
    for k in args.participants:
        mine = [r for r in records if r["participants"] == k]
        by_round = {
            str(t): _summarise([r for r in mine if r["round"] == t])
            for t in sorted({int(r["round"]) for r in mine})  # type: ignore[call-overload]
        }
        names = {str(r["participant"]): f"{r['participant']} ({r['architecture']})" for r in mine}
        by_participant = {
            label: _summarise([r for r in mine if r["participant"] == pid])
            for pid, label in sorted(names.items())
        }
        by_k[str(k)] = {
            "overall": _summarise(mine),
            "per_round": by_round,
            "per_participant": by_participant,
        }
    report["by_participants"] = by_k
    report["unchanged_predictions_max_err"] = max(sanity) if sanity else None
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()

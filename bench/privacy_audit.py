"""The one-run empirical privacy audit: its cost, and the accuracy canaries cost.

Prints one JSON document. In one run, for each seed, the in-process federation on
the demo's defaults (digits, 4 participants, 5 rounds, epsilon 8, logit adjustment)
runs twice on the same data split and initial models: once without canaries and once
with the demo's audit (64 canaries per participant, 16 guesses each side, 95%).
Reported: the honest participants' mean test accuracy after the last round in both
arms (per seed and the mean; the target: canaries cost at most 1 point, i.e. the
mean of without - with is at most 1; its standard error over seeds beside it), the audit's time per
participant and round (scoring the canaries and computing the bound, as the trainer
runs it; recording the ledger entry is not included), and every audit's bound beside
the accounted epsilon. ``--quick``: one seed, two rounds.
It also measures what the audit detects (``detection``): one participant's DP-SGD
charged epsilon 1 and run with 0, 5, 10, 30 or 100% of the charged noise (the
tests' test-only switch), three repeats each, the bound beside the accounted 1. ``--mode`` picks the
aggregation mode (plaintext by default: the canaries do not depend on it).

The DP noise comes from ``secrets`` in both arms, so two runs differ by their noise
too: the accuracy difference is a mean over seeds, each seed's shown beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/crypto.py shadows crypto

from torch import nn

from secure_fed.federation.aggregator_builder import private_parts
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.models import build_model
from secure_fed.learning.privacy_audit import (
    AuditResult,
    AuditSettings,
    CanaryAudit,
    epsilon_lower_bound,
    make_canaries,
)
from secure_fed.learning.private_training import DPGoal, PrivateTrainer, evaluate

TARGET_POINTS = 1.0


class _TimedAudit(CanaryAudit):
    """The participant's own audit, timed each time the trainer runs it."""

    def __init__(self, inner: CanaryAudit) -> None:
        super().__init__(inner.canaries, inner.settings, delta=inner.delta)
        self.seconds: list[float] = []

    def run(self, model: nn.Module, **kwargs: Any) -> AuditResult:
        start = time.perf_counter()
        try:
            return super().run(model, **kwargs)
        finally:
            self.seconds.append(time.perf_counter() - start)


def _arm(
    seed: int, rounds: int, mode: str, audit: AuditSettings | None, work: Path
) -> dict[str, Any]:
    """Run one federation; return its final accuracy, audit times and audits."""
    config = FederationConfig(
        rounds=rounds, seed=seed, mode=mode, baseline=False, privacy_audit=audit
    )
    fed = Federation(
        config=config,
        task=load_task("digits", seed=seed),
        budget=InMemoryBudgetGate(epsilon=config.epsilon, delta=config.delta),
        store=JsonFileRoundStore(directory=work / f"{seed}-{audit is not None}"),
    )
    timed: list[_TimedAudit] = []
    for member in fed.members:
        trainer = member.participant.trainer
        if isinstance(trainer, PrivateTrainer) and trainer.audit is not None:
            trainer.audit = _TimedAudit(trainer.audit)
            timed.append(trainer.audit)
    start = time.perf_counter()
    results = fed.run()
    fed_accuracy, _ = results[-1].mean_accuracy()
    audits = [
        a.fields()
        for m in fed.members
        if isinstance(m.participant.trainer, PrivateTrainer)
        for a in m.participant.trainer.audits
    ]
    return {
        "accuracy": fed_accuracy,
        "seconds": time.perf_counter() - start,
        "audit_seconds": [s for t in timed for s in t.seconds],
        "audits": audits,
    }


def _power(scales: list[float], *, repeats: int) -> dict[str, Any]:
    """What the audit detects: DP-SGD charged epsilon 1 but run with a fraction of its noise.

    The tests' configuration (``tests/secure_fed/learning/test_privacy_audit_training.py``):
    one participant's digits share, an MLP, 5 rounds of 16 epochs, accounted epsilon 1.
    """
    task = load_task("digits", seed=0)
    idx = private_parts(task, FederationConfig())[0]
    x, y = task.private_x[idx], task.private_y[idx]
    batch = max(4, min(128, len(x) // 3))
    rows = []
    for scale in scales:
        for repeat in range(repeats):
            settings = AuditSettings()
            canaries = make_canaries(64, public_x=task.public_x, num_classes=task.num_classes)
            trainer = PrivateTrainer(
                model=build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=repeat),
                x=x,
                y=y,
                goal=DPGoal(epsilon=1.0, delta=1e-5, rounds=5),
                budget=InMemoryBudgetGate(epsilon=1.0, delta=1e-5),
                participant_id="p",
                asset_id="a",
                batch_size=batch,
                lr=1.0,
                epochs_per_round=16,
                audit=CanaryAudit(canaries, settings, delta=1e-5),
                test_noise_scale=scale,
            )
            for r in range(1, 6):
                trainer.train_round(f"r{r}")
            last = trainer.audits[-1]
            rows.append(
                {
                    "noise_applied": scale,
                    "repeat": repeat,
                    "correct": last.correct,
                    "guesses": last.guesses,
                    "epsilon_lower_bound": last.epsilon_lower_bound,
                    "epsilon_accounted": last.epsilon_accounted,
                    "detected": last.exceeds_accounted,
                    "accuracy": evaluate(trainer.model, task.test_x, task.test_y),
                }
            )
    ceiling = epsilon_lower_bound(64, 32, 32, delta=1e-5)
    return {"accounted_epsilon": 1.0, "best_possible_bound": ceiling, "runs": rows}


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, two rounds")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", default="plaintext")
    args = parser.parse_args(argv)
    seeds, rounds = ([0], 2) if args.quick else (args.seeds, args.rounds)
    warnings.filterwarnings("ignore")
    settings = AuditSettings()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work:
        for seed in seeds:
            without = _arm(seed, rounds, args.mode, None, Path(work))
            with_canaries = _arm(seed, rounds, args.mode, settings, Path(work))
            runs.append({"seed": seed, "without": without, "with": with_canaries})
    power = _power([0.0, 0.05, 0.1, 0.3, 1.0], repeats=1 if args.quick else 3)
    times = [s for r in runs for s in r["with"]["audit_seconds"]]
    diff = [100 * (r["with"]["accuracy"] - r["without"]["accuracy"]) for r in runs]
    exceeded = [
        a
        for r in runs
        for a in r["with"]["audits"]
        if float(a["epsilon_lower_bound"]) > float(a["epsilon_accounted"])
    ]
    last = [[a for a in r["with"]["audits"] if a["rounds_to"] == f"r{rounds}"] for r in runs]
    out = {
        "benchmark": "privacy_audit",
        "config": {
            "dataset": "digits",
            "participants": 4,
            "rounds": rounds,
            "epsilon": 8.0,
            "mode": args.mode,
            "seeds": seeds,
            "canaries": settings.canaries,
            "guesses_per_side": settings.per_side,
            "confidence": settings.confidence,
        },
        "audit_seconds_per_participant_round": {
            "mean": float(np.mean(times)),
            "max": float(np.max(times)),
            "count": len(times),
        },
        "accuracy": {
            "without_canaries": [r["without"]["accuracy"] for r in runs],
            "with_canaries": [r["with"]["accuracy"] for r in runs],
            "mean_without": float(np.mean([r["without"]["accuracy"] for r in runs])),
            "mean_with": float(np.mean([r["with"]["accuracy"] for r in runs])),
            "points_with_minus_without": diff,
            "mean_points_with_minus_without": float(np.mean(diff)),
            "standard_error_points": float(np.std(diff, ddof=1) / np.sqrt(len(diff)))
            if len(diff) > 1
            else None,
            "cost_points": -float(np.mean(diff)),
            "target_cost_points": TARGET_POINTS,
            "within_target": bool(-float(np.mean(diff)) <= TARGET_POINTS),
        },
        "run_seconds": {
            "without": [r["without"]["seconds"] for r in runs],
            "with": [r["with"]["seconds"] for r in runs],
        },
        "audits_above_accounted": len(exceeded),
        "final_audits": [
            {
                k: a[k]
                for k in (
                    "participant",
                    "correct",
                    "guesses",
                    "epsilon_lower_bound",
                    "epsilon_accounted",
                )
            }
            for group in last
            for a in group
        ],
    }
    out["detection"] = power
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

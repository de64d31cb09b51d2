"""Quality of the robust pooled Mahalanobis filter on real, DP-trained participants.

Prints one JSON document. For each Dirichlet alpha, one federation of 10
participants with mixed architectures (mlp, cnn, transformer, logreg; DP-SGD at
epsilon 8) is trained for a few rounds on digits; then the last three
participants become attackers: each registered attack is applied to their real
predictions on the held-out test set, and the filter (scores of
``secure_fed.secure.scoring.mahalanobis``, the same in all three modes; decisions of
``secure_fed.secure.scoring.outlier``; weights of
``secure_fed.federation.weighting``, through the engine's own path
``DynamicWeighting.weigh(scores, factors, max_weight=cap)`` with the outlier
factors and the federation's default cap ``1 / quorum``) is run on the ten
prediction matrices, with exclusion on and with down-weighting only.

Attacks: every registered one (clipped to the public bound) and ``alie``
("A little is enough", Baruch et al. 2019): the colluding attackers know the
honest predictions and all send ``mean - z * std`` cell by cell (the top class
of the honest mean lowered, the other classes raised), with
``z = Phi^-1((K - s) / K)``, ``s = floor(K / 2 + 1) - attackers``: close enough to
the honest mean to score like an honest participant.

Reported per (alpha, attack, policy): attacker uploads excluded or weighted
below 5% (target >= 95%), honest uploads excluded (target <= 5%), and the
accuracy of the weighted aggregate on the test set next to the honest-only
aggregate (target: within 2 points). ``--quick``: 2 rounds, alpha 0.5 only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/crypto.py shadows crypto

from secure_fed.evaluation.attacks import make_attack
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.federation.weighting import DynamicWeighting
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND, predict_public
from secure_fed.secure.scoring.mahalanobis import PlainBackend, ScoringConfig, pooled_mahalanobis
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy, excluded_ids

ATTACKS = ("label_flip", "sign_flip", "scaling", "constant", "gaussian", "alie")
K, ATTACKERS = 10, 3
QUORUM = 5  # FederationConfig(participants=10).quorum()
CAP = 1.0 / QUORUM  # FederationConfig(participants=10).weight_cap()


def alie(honest: list[np.ndarray]) -> np.ndarray:
    """The colluders' common upload: ``z`` honest standard deviations from the mean."""
    s = K // 2 + 1 - ATTACKERS
    z = float(norm.ppf((K - s) / K))
    stack = np.stack(honest)
    mean, std = stack.mean(axis=0), stack.std(axis=0)
    sign = -np.ones_like(mean)
    sign[np.arange(len(mean)), mean.argmax(axis=1)] = 1.0
    return np.asarray(np.clip(mean - z * std * sign, -PUBLIC_LOGIT_BOUND, PUBLIC_LOGIT_BOUND))


def trained_predictions(
    dataset: str, alpha: float, rounds: int, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Train one federation; return every participant's test-set logits and the labels."""
    task = load_task(dataset, seed=seed)
    config = FederationConfig(participants=K, rounds=rounds, alpha=alpha, seed=seed, baseline=False)
    fed = Federation(
        config=config,
        task=task,
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tempfile.mkdtemp()),
    )
    fed.run()
    preds = {
        m.participant.participant_id: predict_public(m.participant.model, task.test_x)
        for m in fed.members
    }
    return preds, task.test_y


def evaluate(
    preds: dict[str, np.ndarray], labels: np.ndarray, attackers: set[str], exclude: bool
) -> dict[str, object]:
    """Score, decide, weight and aggregate once; return the quality figures."""
    ids = sorted(preds)
    n = len(labels)
    scores = pooled_mahalanobis(
        PlainBackend(preds), ids, num_samples=n, config=ScoringConfig(min_subset=5)
    ).scores
    policy = OutlierPolicy(
        dof=preds[ids[0]].shape[1] - 1, min_keep=5, config=OutlierConfig(exclude=exclude)
    )
    decisions = policy.decide(scores, round_id=1)
    excluded = excluded_ids(decisions)
    kept = [p for p in ids if p not in excluded]
    terms = DynamicWeighting().weigh(
        {p: scores[p] for p in kept}, {p: decisions[p].factor for p in kept}, max_weight=CAP
    )
    weights = {p: t.weight for p, t in terms.items()}
    agg = np.sum([weights[p] * preds[p] for p in kept], axis=0)
    honest = [p for p in ids if p not in attackers]
    hw = DynamicWeighting().weigh(
        {p: scores[p] for p in honest}, dict.fromkeys(honest, 1.0), max_weight=CAP
    )
    honest_agg = np.sum([hw[p].weight * preds[p] for p in honest], axis=0)
    caught = [p for p in attackers if p in excluded or weights.get(p, 0.0) < 0.05]
    return {
        "attackers_caught": len(caught) / len(attackers) if attackers else None,
        "honest_excluded": sum(p in excluded for p in honest) / len(honest),
        "attacker_max_weight": round(max((weights.get(p, 0.0) for p in attackers), default=0.0), 4),
        "attacker_total_weight": round(sum(weights.get(p, 0.0) for p in attackers), 4),
        "accuracy_aggregate": round(float(np.mean(agg.argmax(1) == labels)), 4),
        "accuracy_honest_only": round(float(np.mean(honest_agg.argmax(1) == labels)), 4),
        "scores_honest": [round(scores[p], 1) for p in honest],
        "scores_attackers": [round(scores[p], 1) for p in sorted(attackers)],
    }


def main() -> None:
    """Run the benchmark and print JSON."""
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, alpha 0.5 only")
    parser.add_argument("--dataset", default="digits", help="digits (default) or fashion_mnist")
    args = parser.parse_args()
    alphas = (0.5,) if args.quick else (100.0, 0.5)
    rounds = 2 if args.quick else 3
    results: list[dict[str, object]] = []
    out: dict[str, object] = {
        "dataset": args.dataset,
        "K": K,
        "attackers": ATTACKERS,
        "rounds_trained": rounds,
        "results": results,
    }
    for alpha in alphas:
        t = time.perf_counter()
        preds, labels = trained_predictions(args.dataset, alpha, rounds, seed=0)
        train_seconds = round(time.perf_counter() - t, 1)
        ids = sorted(preds, key=lambda p: int(p.split("-")[1]))
        attackers = set(ids[-ATTACKERS:])
        clean = evaluate(preds, labels, set(), exclude=True)
        results.append(
            {
                "alpha": alpha,
                "attack": None,
                "train_seconds": train_seconds,
                "exclude": True,
                **clean,
            }
        )
        for j, kind in enumerate(ATTACKS):
            attacked = dict(preds)
            common = alie([preds[p] for p in ids if p not in attackers])
            for k, p in enumerate(sorted(attackers)):
                if kind == "alie":
                    attacked[p] = common
                    continue
                fn = make_attack(kind, bound=PUBLIC_LOGIT_BOUND, seed=100 * j + k)
                attacked[p] = np.clip(fn(preds[p]), -PUBLIC_LOGIT_BOUND, PUBLIC_LOGIT_BOUND)
            for exclude in (True, False):
                results.append(
                    {
                        "alpha": alpha,
                        "attack": kind,
                        "exclude": exclude,
                        **evaluate(attacked, labels, attackers, exclude),
                    }
                )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""Quality of the robust filter and of the weighting on real, DP-trained participants.

Prints one JSON document. For each Dirichlet alpha, one federation of 10
participants with mixed architectures (mlp, cnn, transformer, logreg; DP-SGD at
epsilon 8) is trained for a few rounds on digits; then the last three
participants become attackers and the round's server side is replayed in the
clear on their predictions on the held-out test set: scores of
``secure_fed.secure.scoring.mahalanobis`` (the same in all three modes),
decisions of ``secure_fed.secure.scoring.outlier``, evidence of correctness
and near-duplicate counts of ``secure_fed.secure.scoring.evidence``, weights of
``secure_fed.federation.weighting`` through the engine's own path
``DynamicWeighting(registered=counts).weigh(factors, max_weight=cap,
evidence=..., copies=...)`` with the federation's default cap ``1 / quorum``,
with exclusion on and with down-weighting only. The first ``EVIDENCE_ROWS``
test rows are the labeled slice the evidence is measured on; accuracies are on
the other rows.

Attacks: every registered participant-side one (each attacker transforms its
own predictions, clipped to the public bound) and every collusion of
``secure_fed.evaluation.collusion``, whose hook sees all honest uploads of the
round: ``alie``, ``honest_mean``, ``mean_jitter``, ``copy``, ``copy_jitter``,
``confident``.

Reported per (alpha, attack, policy): the attackers' total weight next to
their sample share (target: at most the share + 2 points), the honest
participants' median ratio of weight to sample share (target >= 0.5),
attackers excluded or weighted below 5%, honest uploads excluded, and the
accuracy of the weighted aggregate next to the honest-only aggregate.
``--quick``: 2 rounds, alpha 0.5 only.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/crypto.py shadows crypto

from secure_fed.evaluation.attacks import ATTACK_REGISTRY, make_attack
from secure_fed.evaluation.collusion import COLLUSION_REGISTRY, collude
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.federation.weighting import DynamicWeighting
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND, predict_public
from secure_fed.secure.scoring.evidence import (
    evidence_mask,
    near_duplicates,
    pairwise_distances,
    plain_evidence,
)
from secure_fed.secure.scoring.mahalanobis import PlainBackend, ScoringConfig, pooled_mahalanobis
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy, excluded_ids

K, ATTACKERS = 10, 3
QUORUM = 5  # FederationConfig(participants=10).quorum()
CAP = 1.0 / QUORUM  # FederationConfig(participants=10).weight_cap()
EVIDENCE_ROWS = 100
WEIGHTING = FederationConfig()  # the default merit sensitivity (alpha) and EMA (beta)


def trained_predictions(
    dataset: str, alpha: float, rounds: int, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, int]]:
    """Train one federation; return every participant's test logits, the labels, the counts."""
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
    counts = {m.participant.participant_id: int(m.participant.num_samples) for m in fed.members}
    return preds, task.test_y, counts


def weigh(
    preds: dict[str, np.ndarray],
    labels: np.ndarray,
    ids: list[str],
    counts: dict[str, int],
    *,
    exclude: bool,
) -> tuple[dict[str, float], dict[str, float], set[str], dict[str, int]]:
    """The server side of one round over ``ids``: scores, decisions, evidence, copies, weights."""
    sub = {p: preds[p] for p in ids}
    n, c = next(iter(sub.values())).shape
    scores = pooled_mahalanobis(
        PlainBackend(sub), sorted(ids), num_samples=n, config=ScoringConfig(min_subset=QUORUM)
    ).scores
    policy = OutlierPolicy(dof=c - 1, min_keep=QUORUM, config=OutlierConfig(exclude=exclude))
    decisions = policy.decide(scores, round_id=1)
    excluded = excluded_ids(decisions)
    kept = sorted(p for p in ids if p not in excluded)
    mask = evidence_mask(rows=range(EVIDENCE_ROWS), labels=labels[:EVIDENCE_ROWS], shape=(n, c))
    kept_mats = {p: sub[p] for p in kept}
    copies = near_duplicates(pairwise_distances(kept_mats), kept)
    terms = DynamicWeighting(
        alpha=WEIGHTING.weighting_alpha, beta=WEIGHTING.weighting_beta, registered=counts
    ).weigh(
        {p: decisions[p].factor for p in kept},
        max_weight=CAP,
        evidence=plain_evidence(kept_mats, mask),
        copies=copies,
    )
    merit = {p: round(t.merit, 3) for p, t in terms.items()}
    return {p: t.weight for p, t in terms.items()}, merit, excluded, copies


def evaluate(
    preds: dict[str, np.ndarray],
    labels: np.ndarray,
    attackers: set[str],
    counts: dict[str, int],
    exclude: bool,
) -> dict[str, object]:
    """Score, decide, weigh and aggregate once; return the quality figures."""
    ids = sorted(preds)
    weights, merit, excluded, copies = weigh(preds, labels, ids, counts, exclude=exclude)
    rows = slice(EVIDENCE_ROWS, None)
    agg = np.sum([w * preds[p] for p, w in weights.items()], axis=0)
    honest = [p for p in ids if p not in attackers]
    hw = weigh(preds, labels, honest, counts, exclude=exclude)[0]
    honest_agg = np.sum([w * preds[p] for p, w in hw.items()], axis=0)
    total = sum(counts.values())
    share = {p: counts[p] / total for p in ids}
    caught = [p for p in attackers if p in excluded or weights.get(p, 0.0) < 0.05]
    attacker_weight = sum(weights.get(p, 0.0) for p in attackers)
    attacker_share = sum(share[p] for p in attackers)
    return {
        "attackers_caught": len(caught) / len(attackers) if attackers else None,
        "honest_excluded": sum(p in excluded for p in honest) / len(honest),
        "attacker_total_weight": round(attacker_weight, 4),
        "attacker_sample_share": round(attacker_share, 4),
        "attacker_excess_points": round(100 * (attacker_weight - attacker_share), 2),
        "honest_median_weight_over_share": round(
            float(np.median([weights.get(p, 0.0) / share[p] for p in honest])), 3
        ),
        "accuracy_aggregate": round(float(np.mean(agg[rows].argmax(1) == labels[rows])), 4),
        "accuracy_honest_only": round(
            float(np.mean(honest_agg[rows].argmax(1) == labels[rows])), 4
        ),
        "merit_honest": [merit.get(p) for p in honest],
        "merit_attackers": [merit.get(p) for p in sorted(attackers)],
        "copies_attackers": [copies.get(p) for p in sorted(attackers)],
        "copies_honest_flagged": sum(copies.get(p, 0) > 0 for p in honest),
    }


def attacked(
    preds: dict[str, np.ndarray], attackers: list[str], kind: str, seed: int
) -> dict[str, np.ndarray]:
    """The round's uploads with the attackers' replaced by ``kind``."""
    out = dict(preds)
    if kind in COLLUSION_REGISTRY:
        honest = {p: m for p, m in preds.items() if p not in attackers}
        out.update(collude(kind, honest, attackers, bound=PUBLIC_LOGIT_BOUND, seed=seed))
        return out
    for k, p in enumerate(attackers):
        fn = make_attack(kind, bound=PUBLIC_LOGIT_BOUND, seed=seed + k)
        out[p] = np.clip(fn(preds[p]), -PUBLIC_LOGIT_BOUND, PUBLIC_LOGIT_BOUND)
    return out


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
        "evidence_rows": EVIDENCE_ROWS,
        "merit_alpha": WEIGHTING.weighting_alpha,
        "results": results,
    }
    kinds = [*ATTACK_REGISTRY, *COLLUSION_REGISTRY]
    for alpha in alphas:
        t = time.perf_counter()
        preds, labels, counts = trained_predictions(args.dataset, alpha, rounds, seed=0)
        train_seconds = round(time.perf_counter() - t, 1)
        ids = sorted(preds, key=lambda p: int(p.split("-")[1]))
        attackers = ids[-ATTACKERS:]
        clean = evaluate(preds, labels, set(), counts, exclude=True)
        results.append(
            {
                "alpha": alpha,
                "attack": None,
                "train_seconds": train_seconds,
                "exclude": True,
                **clean,
            }
        )
        for j, kind in enumerate(kinds):
            sent = attacked(preds, attackers, kind, seed=100 * j)
            for exclude in (True, False):
                results.append(
                    {
                        "alpha": alpha,
                        "attack": kind,
                        "exclude": exclude,
                        **evaluate(sent, labels, set(attackers), counts, exclude),
                    }
                )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

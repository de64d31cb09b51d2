"""Federated-distillation quality benchmark: local-only vs FD (with / without DP) vs pooled.

Run ``python bench/federation.py`` (digits and, when the Debian package
``dataset-fashion-mnist`` is installed, a Fashion-MNIST subset) or
``python bench/federation.py --quick``; prints one JSON document.

For every (dataset, K participants) case, Dirichlet(0.5) label skew, epsilon 8
at delta 1e-5 per participant, architectures cycling mlp / cnn / transformer /
logreg, the same split, seeds and schedule:

* ``local_only_dp``: each participant trains alone with the same DP-SGD goal
  (the local-only twins of the DP federation);
* ``local_only_nonprivate``: each trains alone without DP for the same epochs
  (what a participant gets by never sharing anything);
* ``fd_nonprivate``: federated distillation, local training without DP;
* ``fd_dp``: federated distillation with DP-SGD (the product);
* ``pooled``: each architecture trained on the union of all private data
  without DP (the centralized upper reference).

Every configuration reports accuracy, balanced accuracy, macro F1 and (binary tasks)
ROC AUC per participant (``metrics``) and their means (``mean_metrics``); ``accuracy``
and ``mean_accuracy`` keep the earlier layout. ``--datasets`` also takes the generated
imbalanced tabular sets ``bank_imbalanced`` (3% positive) and ``cohort_imbalanced`` (5%);
``--participants 4,10`` the K values; ``--tabular-rows PUB,PRIV,TEST`` subsamples the
tabular sets; ``--no-references`` skips ``local_only_nonprivate`` and ``pooled``;
``--no-logit-adjustment`` runs the plain losses (the minority-class method of
``secure_fed.learning.logit_adjustment`` is on by default). Each
finished case is also printed on stderr as one JSON line (``case_done``).

Targets (docs/benchmarks.md): mean ``fd_dp`` accuracy >= mean ``local_only_dp`` + 5 points
and >= mean ``fd_nonprivate`` - 10 points; on the imbalanced binary sets, ``fd_dp``
balanced accuracy >= ``local_only_dp`` + 5 points and ROC AUC not below it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from secure_fed.errors import DatasetUnavailable
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.federation import Federation, ParticipantRound
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import TaskData, load_task
from secure_fed.learning.metrics import METRIC_NAMES, Scores, evaluate_scores
from secure_fed.learning.models import build_model
from secure_fed.learning.private_training import train_nonprivate

warnings.filterwarnings("ignore", category=UserWarning)


def subsample(task: TaskData, *, public: int, private: int, test: int, seed: int) -> TaskData:
    """Random subset of each part (keeps them disjoint; Fashion-MNIST is 70,000 rows)."""
    rng = np.random.default_rng(seed)

    def pick(n_all: int, n: int) -> np.ndarray:
        return np.sort(rng.permutation(n_all)[: min(n, n_all)])

    pub, priv, tst = (
        pick(len(task.public_x), public),
        pick(len(task.private_y), private),
        pick(len(task.test_y), test),
    )
    return replace(
        task,
        public_x=task.public_x[pub],
        private_x=task.private_x[priv],
        private_y=task.private_y[priv],
        test_x=task.test_x[tst],
        test_y=task.test_y[tst],
    )


def _run(
    task: TaskData, config: FederationConfig, workdir: Path
) -> tuple[dict[str, object], Federation]:
    fed = Federation(
        config=config,
        task=task,
        budget=InMemoryBudgetGate(epsilon=config.epsilon, delta=config.delta),
        store=JsonFileRoundStore(directory=workdir),
    )
    start = time.perf_counter()
    results = fed.run()
    last = results[-1]
    out = {
        "federated": {r.participant_id: _row_metrics(r, local=False) for r in last.rows},
        "local": {
            r.participant_id: _row_metrics(r, local=True)
            for r in last.rows
            if r.accuracy_local is not None
        },
        "epsilon": {
            r.participant_id: round(r.epsilon_spent, 3)
            for r in last.rows
            if r.epsilon_spent is not None
        },
        "architecture": {r.participant_id: r.architecture for r in last.rows},
        "per_round_mean_federated": [round(r.mean_accuracy()[0], 4) for r in results],
        "seconds": round(time.perf_counter() - start, 1),
    }
    return out, fed


def _rounded(scores: Scores) -> dict[str, float | None]:
    return {k: None if v is None else round(v, 4) for k, v in scores.as_dict().items()}


def _row_metrics(row: ParticipantRound, *, local: bool) -> dict[str, float | None]:
    return {
        name: None if (v := row.metric(name, local=local)) is None else round(v, 4)
        for name in METRIC_NAMES
    }


def _nonfederated(
    task: TaskData, fed: Federation, config: FederationConfig
) -> dict[str, dict[str, dict[str, float | None]]]:
    """Local-only without DP and pooled training, per participant (architecture)."""
    epochs = config.rounds * config.epochs_per_round
    local, pooled = {}, {}
    for k, member in enumerate(fed.members):
        pid = member.participant.participant_id
        trainer = member.participant.trainer
        x, y = trainer.x, trainer.y  # type: ignore[union-attr]
        kw = {
            "input_shape": task.input_shape,
            "num_classes": task.num_classes,
            "seed": config.seed * 100 + k,
        }
        alone = build_model(member.architecture, **kw)  # type: ignore[arg-type]
        train_nonprivate(alone, x, y, epochs=epochs, lr=0.05, batch_size=32, seed=k)
        local[pid] = _rounded(evaluate_scores(alone, task.test_x, task.test_y))
        together = build_model(member.architecture, **kw)  # type: ignore[arg-type]
        train_nonprivate(
            together,
            task.private_x,
            task.private_y,
            epochs=max(2, epochs // 2),
            lr=0.05,
            batch_size=32,
            seed=k,
        )
        pooled[pid] = _rounded(evaluate_scores(together, task.test_x, task.test_y))
    return {"local_only_nonprivate": local, "pooled": pooled}


def _means(per_participant: dict[str, dict[str, float | None]]) -> dict[str, float | None]:
    """Mean of each metric over participants (None when no participant has it)."""
    means: dict[str, float | None] = {}
    for name in METRIC_NAMES:
        values = [float(v) for m in per_participant.values() if (v := m[name]) is not None]
        means[name] = round(float(np.mean(values)), 4) if values else None
    return means


def _points(a: float, b: float) -> float:
    return round(100 * (a - b), 1)


def case(
    task: TaskData,
    k: int,
    rounds: int,
    seed: int,
    tmp: Path,
    *,
    references: bool = True,
    **overrides: object,
) -> dict[str, object]:
    """All five configurations for one dataset and participant count.

    ``references=False`` leaves out ``local_only_nonprivate`` and ``pooled``
    (not part of the targets; they cost about a third of a case).
    """
    base = FederationConfig(
        participants=k,
        rounds=rounds,
        alpha=0.5,
        epsilon=8.0,
        seed=seed,
        **overrides,  # type: ignore[arg-type]
    )
    dp, fed_dp = _run(task, base, tmp / f"{task.name}-{k}-dp")
    nondp, _ = _run(
        task, replace(base, private=False, baseline=False), tmp / f"{task.name}-{k}-nodp"
    )
    metrics: dict[str, dict[str, dict[str, float | None]]] = {
        "local_only_dp": dp["local"],  # type: ignore[dict-item]
        "fd_nonprivate": nondp["federated"],  # type: ignore[dict-item]
        "fd_dp": dp["federated"],  # type: ignore[dict-item]
        **(_nonfederated(task, fed_dp, base) if references else {}),
    }
    mean_metrics = {name: _means(v) for name, v in metrics.items()}
    means = {name: float(m["accuracy"] or 0.0) for name, m in mean_metrics.items()}
    accs = {name: {pid: m["accuracy"] for pid, m in per.items()} for name, per in metrics.items()}
    return {
        "dataset": task.name,
        "participants": k,
        "rounds": rounds,
        "alpha": 0.5,
        "epsilon": 8.0,
        "delta": base.delta,
        "architectures": dp["architecture"],
        "n_public": len(task.public_x),
        "n_private": len(task.private_y),
        "n_test": len(task.test_y),
        "epochs_per_round": base.epochs_per_round,
        "lr": base.lr,
        "distill_epochs": base.distill.epochs,
        "logit_adjustment": base.logit_adjustment,
        "positive_rate_test": _positive_rate(task),
        "accuracy": accs,
        "mean_accuracy": means,
        "metrics": metrics,
        "mean_metrics": mean_metrics,
        "epsilon_spent": dp["epsilon"],
        "fd_dp_mean_per_round": dp["per_round_mean_federated"],
        "seconds": {"fd_dp_with_twins": dp["seconds"], "fd_nonprivate": nondp["seconds"]},
        "targets": {
            "fd_dp_minus_local_only_dp_points": _points(means["fd_dp"], means["local_only_dp"]),
            "fd_dp_minus_local_only_nonprivate_points": (
                _points(means["fd_dp"], means["local_only_nonprivate"]) if references else None
            ),
            "fd_nonprivate_minus_fd_dp_points": _points(means["fd_nonprivate"], means["fd_dp"]),
            "met_plus_5_vs_local_only_dp": means["fd_dp"] >= means["local_only_dp"] + 0.05,
            "met_within_10_of_fd_nonprivate": means["fd_dp"] >= means["fd_nonprivate"] - 0.10,
            **_imbalance_targets(mean_metrics),
        },
    }


def _positive_rate(task: TaskData) -> float | None:
    """Share of class 1 in the test set of a binary task (None otherwise)."""
    return round(float(np.mean(task.test_y == 1)), 4) if task.num_classes == 2 else None


def _imbalance_targets(means: dict[str, dict[str, float | None]]) -> dict[str, object]:
    """Balanced accuracy +5 points and ROC AUC not below local-only DP (binary tasks)."""
    fd, local = means["fd_dp"], means["local_only_dp"]
    if fd["roc_auc"] is None or local["roc_auc"] is None:
        return {}
    return {
        "fd_dp_minus_local_only_dp_balanced_points": _points(
            float(fd["balanced_accuracy"] or 0), float(local["balanced_accuracy"] or 0)
        ),
        "met_balanced_plus_5_vs_local_only_dp": float(fd["balanced_accuracy"] or 0)
        >= float(local["balanced_accuracy"] or 0) + 0.05,
        "met_auc_not_below_local_only_dp": fd["roc_auc"] >= local["roc_auc"],
    }


def _fashion_status() -> str:
    probe = subprocess.run(["dpkg", "-s", "dataset-fashion-mnist"], capture_output=True, text=True)
    return (
        "installed"
        if probe.returncode == 0
        else "not installed (apt-get install -y dataset-fashion-mnist)"
    )


#: Datasets the benchmark knows, in run order (the tabular ones have a 3% / 5% positive class).
DATASETS = ("digits", "bank_imbalanced", "cohort_imbalanced", "fashion_mnist")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K=4 only, 3 rounds")
    parser.add_argument(
        "--datasets",
        default="digits,fashion_mnist",
        help="comma-separated subset of " + ",".join(DATASETS),
    )
    parser.add_argument(
        "--participants",
        default="4,10",
        help="comma-separated K values (digits and the tabular sets; Fashion-MNIST is K=4)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-references",
        action="store_true",
        help="skip local-only without DP and pooled training (not in the targets)",
    )
    parser.add_argument(
        "--tabular-rows",
        default=None,
        metavar="PUB,PRIV,TEST",
        help="random subset of the tabular sets' public, private and test rows",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="nominal local learning rate (default: FederationConfig's)",
    )
    parser.add_argument(
        "--no-logit-adjustment",
        action="store_true",
        help="plain DP-SGD and distillation losses (FederationConfig(logit_adjustment=False))",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1: on a shared machine more only oversubscribes)",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/secure-fed-bench-federation"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    rounds = 3 if args.quick else args.rounds
    tag = time.strftime("%Y%m%d-%H%M%S")
    extra: dict[str, object] = {} if args.lr is None else {"lr": args.lr}
    if args.no_logit_adjustment:
        extra["logit_adjustment"] = False
    tmp = args.workdir / tag
    cases: list[dict[str, object]] = []
    wanted = set(args.datasets.split(","))
    unknown = wanted - set(DATASETS)
    if unknown:
        parser.error(f"unknown datasets {sorted(unknown)}; choose from {', '.join(DATASETS)}")
    ks = [4] if args.quick else [int(k) for k in args.participants.split(",")]
    for name in (d for d in DATASETS if d in wanted and d != "fashion_mnist"):
        task = load_task(name, seed=args.seed)
        if args.tabular_rows and name != "digits":
            pub, priv, test = (int(n) for n in args.tabular_rows.split(","))
            task = subsample(task, public=pub, private=priv, test=test, seed=args.seed)
        for k in ks:
            done = case(task, k, rounds, args.seed, tmp, references=not args.no_references, **extra)
            print(json.dumps({"case_done": done}), file=sys.stderr, flush=True)
            cases.append(done)
    fashion = _fashion_status()
    if not args.quick and "fashion_mnist" in wanted:
        try:
            full = load_task("fashion_mnist", seed=args.seed)
        except DatasetUnavailable as exc:
            fashion = f"unavailable: {exc}"
        else:
            # 28x28 inputs: a subset keeps the run to minutes on 2 cores; the transformer is
            # left out (its distillation alone took ~10 s per epoch here under load).
            small = subsample(full, public=500, private=2000, test=1000, seed=args.seed)
            cases.append(
                case(
                    small,
                    4,
                    rounds,
                    args.seed,
                    tmp,
                    references=not args.no_references,
                    architectures=("mlp", "cnn", "logreg"),
                    **extra,
                )
            )
    print(
        json.dumps(
            {
                "benchmark": "federation",
                "fashion_mnist": fashion,
                "cases": cases,
                "wall_seconds": round(time.perf_counter() - started, 1),
                "machine": {"cpus": __import__("os").cpu_count()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

"""Adaptive attacks (attackers who have read this repository) against the weighting.

Prints one JSON document. Ten participants, the last three a coalition
running one kind of :data:`secure_fed.evaluation.adaptive.ADAPTIVE_REGISTRY`
(``slice_aware``, ``threshold_inflate``, ``threshold_inside``, ``jitter``,
``above_chance``, ``stealthy``), through
end-to-end rounds of the in-process federation
(:func:`secure_fed.evaluation.adaptive_rounds.run_arm`: the project's round
engine, every mode's own scoring, copies and weighting). In the same run and
on the same data split, two baselines: ``absent`` (the three contribute
nothing) and ``honest`` (all ten honest).

Reported per (attack, mode, Dirichlet alpha): the honest participants' mean
test accuracy after the last round, per seed and its mean, next to both
baselines; ``points_below_absent`` (mean over seeds) and its worst seed;
whether the target holds (within 2 points of ``absent`` on the mean, 4 on the
worst seed); and per (arm, alpha, seed) whether every participant's decisions
(outlier action, copies count, weighted or not) agree across the modes, every
round. ``--partial PATH`` rewrites PATH with the runs so far after each
federation (long runs). ``--quick``: one seed, plaintext, alpha 0.5, one round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/crypto.py shadows crypto

from secure_fed.evaluation.adaptive import ADAPTIVE_REGISTRY
from secure_fed.evaluation.adaptive_rounds import (
    ARMS,
    ATTACKERS,
    PARTICIPANTS,
    ArmSettings,
    run_arm,
)
from secure_fed.learning.data import TaskData, load_task

TARGET_MEAN_POINTS, TARGET_WORST_POINTS = 2.0, 4.0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 seed, plaintext, alpha 0.5, 1 round"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--modes", default="plaintext,shares,ckks")
    parser.add_argument("--dirichlet", type=float, nargs="+", default=[0.5, 100.0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attacks", default=",".join(ADAPTIVE_REGISTRY))
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--epochs", type=int, default=3, help="local epochs per round")
    parser.add_argument("--architectures", default="mlp,logreg")
    parser.add_argument("--private", action="store_true", help="DP-SGD local training")
    parser.add_argument(
        "--secret-slice",
        action="store_true",
        help="servers draw the slice with a secret key (default: from the seed, reproducible)",
    )
    parser.add_argument("--partial", type=Path, default=None, help="rewrite with runs so far")
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="attacked arms only (their summary needs a run with the baselines: --merge)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        help="run nothing: summarise the runs of these JSON outputs (later ones replace earlier)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.modes, args.dirichlet, args.rounds = [0], "plaintext", [0.5], 1
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every federation the options name; return the JSON document."""
    modes = [m for m in args.modes.split(",") if m]
    attacks = [a for a in args.attacks.split(",") if a]
    arms = attacks if args.no_baselines else [*ARMS, *attacks]
    if args.merge:
        return merge(args.merge, attacks=attacks)
    runs: list[dict[str, Any]] = []
    tasks: dict[int, TaskData] = {}
    started = time.perf_counter()
    for alpha in args.dirichlet:
        for seed in args.seeds:
            task = tasks.setdefault(seed, load_task(args.dataset, seed=seed))
            for mode in modes:
                settings = ArmSettings(
                    dirichlet=alpha,
                    mode=mode,
                    seed=seed,
                    rounds=args.rounds,
                    private=args.private,
                    epochs=args.epochs,
                    architectures=tuple(args.architectures.split(",")),
                    secret_slice=args.secret_slice,
                )
                for arm in arms:
                    t = time.perf_counter()
                    result = run_arm(task, settings, arm)
                    runs.append(
                        {
                            "dirichlet": alpha,
                            "seed": seed,
                            "mode": mode,
                            "arm": arm,
                            "seconds": round(time.perf_counter() - t, 1),
                            **result,
                        }
                    )
                    if args.partial is not None:
                        args.partial.write_text(json.dumps({"runs": runs}))
    return {
        "dataset": args.dataset,
        "participants": PARTICIPANTS,
        "attackers": ATTACKERS,
        "rounds": args.rounds,
        "seeds": args.seeds,
        "modes": modes,
        "dirichlet": args.dirichlet,
        "private_training": args.private,
        "secret_slice": args.secret_slice,
        "epochs_per_round": args.epochs,
        "architectures": args.architectures.split(","),
        "target": {"mean_points": TARGET_MEAN_POINTS, "worst_seed_points": TARGET_WORST_POINTS},
        "seconds": round(time.perf_counter() - started, 1),
        **summarise(runs, attacks=attacks, modes=modes),
        "runs": runs,
    }


def merge(paths: list[Path], *, attacks: list[str]) -> dict[str, Any]:
    """Summarise the runs of several outputs; a later (arm, mode, alpha, seed) replaces one."""
    keyed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        for r in json.loads(path.read_text())["runs"]:
            keyed[(r["arm"], r["mode"], r["dirichlet"], r["seed"])] = r
    runs = list(keyed.values())
    modes = [m for m in ("plaintext", "shares", "ckks") if any(r["mode"] == m for r in runs)]
    present = [a for a in attacks if any(r["arm"] == a for r in runs)]
    return {"merged": [str(p) for p in paths], **_summary_of(runs, present, modes), "runs": runs}


def _summary_of(runs: list[dict[str, Any]], attacks: list[str], modes: list[str]) -> dict[str, Any]:
    """:func:`summarise` over the (attack, mode, alpha, seed) cells that have all three arms."""
    have = {(r["arm"], r["mode"], r["dirichlet"], r["seed"]) for r in runs}
    complete = [
        r
        for r in runs
        if r["arm"] in ARMS or {(a, r["mode"], r["dirichlet"], r["seed"]) for a in ARMS} <= have
    ]
    return summarise(complete, attacks=attacks, modes=modes)


def summarise(
    runs: list[dict[str, Any]], *, attacks: list[str], modes: list[str]
) -> dict[str, Any]:
    """Per (attack, mode, alpha) accuracies and the target; decisions agreement across modes."""
    acc = {(r["arm"], r["mode"], r["dirichlet"], r["seed"]): r["honest_accuracy"] for r in runs}
    alphas = sorted({r["dirichlet"] for r in runs})
    summary = []
    for attack, mode, alpha in itertools.product(attacks, modes, alphas):
        seeds = sorted(
            {s for (a, m, d, s) in acc if a == attack and m == mode and d == alpha}
            & {s for (a, m, d, s) in acc if a == "absent" and m == mode and d == alpha}
            & {s for (a, m, d, s) in acc if a == "honest" and m == mode and d == alpha}
        )
        if seeds:
            summary.append(_cell(acc, attack, mode, alpha, seeds))
    agreement = _agreement(runs, modes)
    return {
        "summary": summary,
        "agreement": agreement,
        "target_met": bool(summary)
        and all(s["target_met"] for s in summary)
        and all(a["agree"] for a in agreement if a["arm"] in attacks),
    }


def _cell(
    acc: dict[tuple[Any, ...], float], attack: str, mode: str, alpha: float, seeds: list[int]
) -> dict[str, Any]:
    def arm(name: str) -> list[float]:
        return [acc[(name, mode, alpha, s)] for s in seeds]

    attacked, absent, honest = arm(attack), arm("absent"), arm("honest")
    below = [100 * (a - b) for a, b in zip(absent, attacked, strict=True)]
    mean_below, worst = float(np.mean(below)), float(np.max(below))
    return {
        "attack": attack,
        "mode": mode,
        "dirichlet": alpha,
        "honest_accuracy": round(float(np.mean(attacked)), 4),
        "absent_accuracy": round(float(np.mean(absent)), 4),
        "all_honest_accuracy": round(float(np.mean(honest)), 4),
        "seeds": seeds,
        "per_seed": [round(a, 4) for a in attacked],
        "points_below_absent": round(mean_below, 2),
        "worst_seed_points_below_absent": round(worst, 2),
        "target_met": mean_below <= TARGET_MEAN_POINTS and worst <= TARGET_WORST_POINTS,
    }


def _agreement(runs: list[dict[str, Any]], modes: list[str]) -> list[dict[str, Any]]:
    """Per (arm, alpha, seed) run in every mode: do the decisions agree, round by round?"""
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in runs:
        by_key.setdefault((r["arm"], r["dirichlet"], r["seed"]), {})[r["mode"]] = r["decisions"]
    out = []
    for (arm, alpha, seed), per_mode in sorted(by_key.items(), key=str):
        if len(per_mode) < 2 or set(per_mode) != set(modes):
            continue
        first = per_mode[modes[0]]
        cells = same = 0
        for mode in modes[1:]:
            for r_first, r_other in zip(first, per_mode[mode], strict=True):
                for pid, decision in r_first.items():
                    cells += 1
                    same += r_other.get(pid) == decision
        out.append(
            {
                "arm": arm,
                "dirichlet": alpha,
                "seed": seed,
                "agree": same == cells,
                "agreeing_fraction": round(same / cells, 4) if cells else None,
                "differences": _differences(per_mode, modes),
            }
        )
    return out


def _differences(per_mode: dict[str, Any], modes: list[str]) -> list[dict[str, Any]]:
    """Each (round, participant) whose decisions differ, with every mode's decision."""
    diffs = []
    for index, first in enumerate(per_mode[modes[0]]):
        for pid in first:
            seen = {m: per_mode[m][index].get(pid) for m in modes}
            if len({json.dumps(v) for v in seen.values()}) > 1:
                diffs.append({"round": index + 1, "participant": pid, **seen})
    return diffs


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print JSON."""
    warnings.filterwarnings("ignore")
    print(json.dumps(run(parse(argv)), indent=1))


if __name__ == "__main__":
    main()

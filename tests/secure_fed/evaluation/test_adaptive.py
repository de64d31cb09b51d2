"""Each adaptive attack does what it claims, in one real round of the in-process federation.

One plaintext round of ten participants on digits (the last three a coalition),
every upload recorded as sent; the checks read the uploads and the round's own
table (scores, copies, merits). The benchmark's reduced configuration runs.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from secure_fed.errors import AttackSpecInvalid, UnknownAttack
from secure_fed.evaluation.adaptive import (
    ADAPTIVE_REGISTRY,
    JITTER_SIGMA,
    RoundView,
    copy_threshold,
    forge,
    stealth_rows,
)
from secure_fed.evaluation.adaptive_rounds import (
    ArmSettings,
    arm_federation,
    build_federation,
    recompute_slice,
    servers_slice,
)
from secure_fed.evaluation.attacks import Attack
from secure_fed.federation.federation import RoundResult
from secure_fed.learning.data import TaskData, load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND
from secure_fed.secure.scoring.evidence import (
    DUPLICATE_THETA,
    EvidenceSlice,
    pairwise_distances,
    plain_evidence,
)

pytestmark = pytest.mark.slow

_BENCH = Path(__file__).resolve().parents[3] / "bench" / "adaptive_attacks.py"
SETTINGS = ArmSettings(dirichlet=0.5, mode="plaintext", seed=0, rounds=1)


@dataclass(frozen=True)
class Recorded:
    """One round: what everybody sent, who attacked, the round's table and slice."""

    sent: dict[str, np.ndarray]
    attackers: list[str]
    result: RoundResult
    evidence: EvidenceSlice | None
    recomputed: EvidenceSlice | None

    @property
    def honest(self) -> dict[str, np.ndarray]:
        return {p: m for p, m in self.sent.items() if p not in self.attackers}

    def row(self, pid: str) -> object:
        return next(r for r in self.result.rows if r.participant_id == pid)


def _recorder(sent: dict[str, np.ndarray], pid: str, inner: Attack | None) -> Attack:
    def fn(preds: np.ndarray) -> np.ndarray:
        out = inner(preds) if inner is not None else preds
        sent[pid] = np.asarray(out, dtype=np.float64)
        return out

    return Attack.hook(fn, bound=PUBLIC_LOGIT_BOUND)


@pytest.fixture(scope="module")
def task() -> TaskData:
    return load_task("digits", seed=0)


@pytest.fixture(scope="module")
def play(task: TaskData) -> Callable[[str], Recorded]:
    cache: dict[str, Recorded] = {}

    def run(arm: str) -> Recorded:
        if arm not in cache:
            warnings.filterwarnings("ignore")
            fed = build_federation(task, SETTINGS)
            arm_federation(fed, arm, task=task, seed=SETTINGS.seed)
            sent: dict[str, np.ndarray] = {}
            for m in fed.members:
                p = m.participant
                p.attack = _recorder(sent, p.participant_id, p.attack)
            result = fed.run_round()
            assert result.stage == "published"
            cache[arm] = Recorded(
                sent=sent,
                attackers=[m.participant.participant_id for m in fed.members if m.attacker],
                result=result,
                evidence=servers_slice(fed, 1),
                recomputed=recompute_slice(task, rows=fed.config.evidence_rows, seed=0, round_id=1),
            )
        return cache[arm]

    return run


def test_slice_aware_is_right_on_the_slice_and_wrong_elsewhere(
    play: Callable[[str], Recorded],
) -> None:
    rec = play("slice_aware")
    assert rec.evidence is not None and rec.recomputed == rec.evidence  # drawn from the seed
    rows = np.asarray(rec.evidence.rows)
    labels = np.asarray(rec.evidence.labels)
    others = np.setdiff1d(np.arange(len(next(iter(rec.sent.values())))), rows)
    reference = np.mean([rec.sent[p] for p in rec.honest], axis=0)
    mask = rec.evidence.mask(reference.shape)
    honest_evidence = plain_evidence(rec.honest, mask)
    for pid in rec.attackers:
        up = rec.sent[pid]
        assert (up[rows].argmax(1) == labels).all()
        assert np.allclose(up[rows, labels], PUBLIC_LOGIT_BOUND)
        # negated elsewhere: it disagrees with the honest consensus on almost every row
        assert np.mean(up[others].argmax(1) == reference[others].argmax(1)) < 0.2
        assert plain_evidence({pid: up}, mask)[pid] > max(honest_evidence.values())
        assert rec.row(pid).merit == 1.0  # type: ignore[attr-defined]


def earlier_shares_threshold(matrices: dict[str, np.ndarray]) -> float:
    """The shares rule before the robust one: ``theta 2K/(K-1)`` x the median ranking score."""
    mats = np.stack([matrices[p] for p in sorted(matrices)])
    scores = np.mean(np.sum((mats - mats.mean(axis=0)) ** 2, axis=2), axis=1)
    k = len(matrices)
    return DUPLICATE_THETA * 2.0 * k / (k - 1) * float(np.median(scores))


def honest_pair_floor(rec: Recorded) -> float:
    return min(pairwise_distances(rec.honest).values())


def test_threshold_inflate_no_longer_raises_the_copy_threshold(
    play: Callable[[str], Recorded],
) -> None:
    """It raised the earlier shares rule past the honest pairs; the rule of every mode holds."""
    rec = play("threshold_inflate")
    honest, everyone = rec.honest, rec.sent
    assert earlier_shares_threshold(everyone) > 3 * earlier_shares_threshold(honest)
    assert earlier_shares_threshold(everyone) > honest_pair_floor(rec)  # the attack is real
    tau = copy_threshold(everyone, min_subset=5)  # the federation's quorum
    assert tau < honest_pair_floor(rec) / 4 < earlier_shares_threshold(everyone)
    assert all(rec.row(p).copies in (0, None) for p in everyone)  # type: ignore[attr-defined]


def test_threshold_inside_does_not_make_honest_uploads_copies(
    play: Callable[[str], Recorded],
) -> None:
    rec = play("threshold_inside")
    tau = copy_threshold(rec.sent, min_subset=5)
    assert tau < honest_pair_floor(rec) / 4
    assert all(rec.row(p).copies in (0, None) for p in rec.honest)  # type: ignore[attr-defined]


def test_jitter_pairs_sit_above_the_copy_threshold(play: Callable[[str], Recorded]) -> None:
    rec = play("jitter")
    tau = copy_threshold(rec.sent, min_subset=5)
    dist = pairwise_distances({p: rec.sent[p] for p in rec.attackers})
    assert all(tau < d for d in dist.values()), (tau, dist)
    for a, b in itertools.combinations(rec.attackers, 2):
        sigma = np.std(rec.sent[a] - rec.sent[b]) / np.sqrt(2)
        assert JITTER_SIGMA[0] - 0.05 <= sigma <= JITTER_SIGMA[1] + 0.05
    assert all(rec.row(p).copies in (0, None) for p in rec.attackers)  # type: ignore[attr-defined]


def test_stealthy_is_close_but_poisons_the_chosen_rows(play: Callable[[str], Recorded]) -> None:
    rec = play("stealthy")
    mean = np.mean([rec.sent[p] for p in rec.honest], axis=0)
    poisoned = stealth_rows(len(mean), seed=0)
    clean = np.setdiff1d(np.arange(len(mean)), poisoned)
    second = np.argsort(mean[poisoned], axis=1)[:, -2]
    for pid in rec.attackers:
        up = rec.sent[pid]
        assert np.mean(up[poisoned].argmax(1) == second) > 0.8
        # elsewhere nearer the honest mean than most honest uploads are
        spread = [_row_distance(rec.sent[h][clean], mean[clean]) for h in rec.honest]
        assert _row_distance(up[clean], mean[clean]) < float(np.median(spread))
    scores = {r.participant_id: r.score for r in rec.result.rows}
    honest_median = float(np.median([scores[p] for p in rec.honest]))
    assert all(scores[p] is not None and scores[p] < honest_median for p in rec.attackers)


def _row_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.sum((a - b) ** 2, axis=1)))


def test_forge_refuses_unknown_kinds_and_empty_views() -> None:
    view = RoundView(
        round_id=1,
        own=np.zeros((4, 3)),
        honest={},
        index=0,
        colluders=1,
        bound=8.0,
        evidence=None,
    )
    with pytest.raises(UnknownAttack, match="registered"):
        forge("nope", view)
    with pytest.raises(AttackSpecInvalid, match="honest uploads"):
        forge(next(iter(ADAPTIVE_REGISTRY)), view)


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_adaptive_attacks", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_benchmark_reduced_configuration_yields_its_keys() -> None:
    bench = _bench()
    out = bench.run(bench.parse(["--quick", "--attacks", "jitter"]))
    assert {"summary", "agreement", "target_met", "runs", "target", "seconds"} <= set(out)
    assert {r["arm"] for r in out["runs"]} == {"absent", "honest", "jitter"}
    (cell,) = out["summary"]
    assert {
        "honest_accuracy",
        "absent_accuracy",
        "all_honest_accuracy",
        "points_below_absent",
        "worst_seed_points_below_absent",
        "target_met",
    } <= set(cell)
    absent = next(r for r in out["runs"] if r["arm"] == "absent")
    assert all(not any(pid.endswith(("-8", "-9", "-10")) for pid in d) for d in absent["decisions"])


def test_agreement_names_the_decisions_that_differ_across_modes() -> None:
    bench = _bench()
    keep, down = ["keep", 0, True], ["downweight", 0, True]
    runs = [
        {"arm": "jitter", "dirichlet": 0.5, "seed": 0, "mode": m, "decisions": [d]}
        for m, d in (
            ("plaintext", {"a": keep, "b": keep}),
            ("shares", {"a": keep, "b": down}),
            ("ckks", {"a": keep, "b": keep}),
        )
    ]
    (row,) = bench._agreement(runs, ["plaintext", "shares", "ckks"])
    assert not row["agree"] and row["agreeing_fraction"] == 0.75
    assert row["differences"] == [
        {"round": 1, "participant": "b", "plaintext": keep, "shares": down, "ckks": keep}
    ]
    runs[1]["decisions"] = [{"a": keep, "b": keep}]
    assert bench._agreement(runs, ["plaintext", "shares", "ckks"])[0]["agree"]

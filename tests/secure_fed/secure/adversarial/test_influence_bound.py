"""One participant's influence on a published cell: the old bound broken, the budgeted one held.

The attack (two clusters of honest participants; the attacker sits at one
cluster's mean with one extreme cell): it ranks among the most typical uploads,
joins the robust subset in place of a member of the other cluster, the subset's
covariance shrinks to one cluster's, and the other cluster scores far above
the exclusion threshold. Its weight is then redistributed, so the attacker moves
a cell by more than its own capped weight: ``2 B w_max`` is no bound. What
holds is ``2 B min(1, w_max (1 + M))``, ``M`` the participants whose factor is
below 1 (:func:`~secure_fed.secure.scoring.outlier.influence_bound`); the
outlier policy's ``max_flagged`` budget makes ``M`` a number the consortium fixes.

Every round runs through the round engine, signed envelope gate and outlier
policy of a mode; each case compares the same honest uploads with and without
the attacker.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from secure_fed.federation.messages import decode_publication
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.secure.scoring.outlier import (
    OutlierConfig,
    OutlierPolicy,
    flagged_count,
    influence_bound,
)
from tests.secure_fed.secure.helpers import BOUND, Harness

N, C = 48, 4
CELL = (0, 0)  # the cell the attack moves
TOLERANCE = {"plaintext": 1e-5, "ckks": 5e-3, "shares": 1e-3}


def _clusters(na: int, nb: int, *, a_cell: float, b_cell: float) -> dict[str, np.ndarray]:
    """Two clusters of honest logits two units apart in classes 0 and 1; ``CELL`` fixed."""
    rng = np.random.default_rng(0)
    signal = rng.normal(0.0, 1.0, size=(N, C))
    signal[np.arange(N), rng.integers(0, C, size=N)] += 3.0
    gap = np.array([2.0, -2.0, 0.0, 0.0])
    out = {}
    for j in range(na):
        out[f"a{j}"] = np.clip(signal + rng.normal(0, 0.3, (N, C)), -BOUND, BOUND)
        out[f"a{j}"][CELL] = a_cell
    for j in range(nb):
        out[f"b{j}"] = np.clip(signal + gap + rng.normal(0, 0.3, (N, C)), -BOUND, BOUND)
        out[f"b{j}"][CELL] = b_cell
    return {p: m.astype(np.float32) for p, m in out.items()}


def _attacker(
    honest: dict[str, np.ndarray], *, pull: float = 0.0, cell: tuple[int, int] = CELL
) -> np.ndarray:
    """Cluster a's mean (pulled ``pull`` further from everybody's), one cell at ``+B``."""
    mean_a = np.mean([m for p, m in honest.items() if p.startswith("a")], axis=0)
    mean = np.mean(list(honest.values()), axis=0)
    x = np.clip(mean_a + pull * (mean_a - mean), -BOUND, BOUND)
    x[cell] = BOUND
    return np.asarray(x, dtype=np.float32)


@dataclasses.dataclass
class _Round:
    aggregate: np.ndarray
    weights: dict[str, float]
    excluded: tuple[str, ...]


def _round(
    mode: str,
    tmp: Path,
    uploads: dict[str, np.ndarray],
    *,
    quorum: int,
    config: OutlierConfig,
) -> _Round:
    ids = sorted(uploads)
    dep = SecureDeployment.create(
        mode=mode,
        shape=(N, C),
        participant_ids=ids,
        min_participants=quorum,
        audit=MemoryAuditSink(),
        scoring=ScoringConfig(min_subset=quorum),  # h as the secure modes' plans fix it
    )
    h = Harness(dep, tmp, ids=ids, min_participants=quorum, audit=None)
    h.engine.outlier_filter = OutlierPolicy(dof=C - 1, config=config, min_keep=quorum)
    h.engine.open(dataclasses.replace(h.config(1), max_weight=1.0 / quorum))
    h.engine.start_collecting(1)
    for pid in ids:
        h.verifier.accept(h.envelope(pid, uploads[pid], 1), round_id=1)
    h.engine.close(1)
    h.engine.filter(1)
    pub = decode_publication(h.engine.publish(1), max_bytes=1 << 24)
    assert max(pub.weights.values()) <= 1.0 / quorum * (1 + 1e-12)
    return _Round(pub.aggregate.astype(np.float64), dict(pub.weights), tuple(pub.excluded))


def _moved(
    mode: str, tmp: Path, honest: dict[str, np.ndarray], x: np.ndarray, **kw: object
) -> tuple[float, _Round, _Round]:
    without = _round(mode, tmp / f"{mode}-without", honest, **kw)  # type: ignore[arg-type]
    with_it = _round(mode, tmp / f"{mode}-with", {**honest, "x": x}, **kw)  # type: ignore[arg-type]
    return float(np.max(np.abs(with_it.aggregate - without.aggregate))), without, with_it


def _flagged(r: _Round, others: int) -> int:
    """Participants other than x whose weight is below an equal share (excluded: 0)."""
    present = [w for p, w in r.weights.items() if p != "x"]
    top = max(r.weights.values())
    return others - len(present) + sum(1 for w in present if w < top * (1 - 1e-9))


@pytest.mark.parametrize(("exclude", "expected"), [(True, 20 / 3), (False, 6.3226)])
def test_one_in_range_participant_breaks_the_old_bound_without_a_budget(
    tmp_path: Path, exclude: bool, expected: float
) -> None:
    """The measured attack: a cell moves by 6.667 (exclusion) / 6.32 (down-weighting) > 5.333.

    Two clusters of two, quorum 3, ``w_max = 1/3``, no outlier budget (the
    default). Cluster a has the cell at 0, cluster b at ``-B``, the attacker at
    ``+B``. Without it the four honest uploads are published with 1/4 each; with
    it cluster b scores far above the threshold and loses its weight to a and
    the attacker. The old statement ``2 B w_max`` fails; the derived bound with
    ``M`` = the two participants the attack flagged holds.
    """
    honest = _clusters(2, 2, a_cell=0.0, b_cell=-BOUND)
    config = OutlierConfig(exclude=exclude)
    moved, without, with_it = _moved(
        "plaintext", tmp_path, honest, _attacker(honest), quorum=3, config=config
    )
    assert without.excluded == () and set(without.weights.values()) == {0.25}
    assert moved == pytest.approx(expected, abs=1e-3)
    assert moved > 2 * BOUND / 3 + 0.9  # the old statement (5.333), broken by almost a unit
    flagged = _flagged(with_it, 4)
    assert flagged == 2
    assert moved <= influence_bound(bound=BOUND, max_weight=1 / 3, marked=flagged) + 1e-5


def _grid() -> list[tuple[int, int, int, bool, float, tuple[int, int]]]:
    """(cluster a, cluster b, quorum, exclude, pull, extreme cell) placements searched."""
    out = []
    for na, nb, quorum in ((2, 2, 3), (4, 3, 5)):
        for exclude in (True, False):
            for pull in (0.0, 0.5):
                for cell in (CELL, (1, 2), (7, 3)):
                    out.append((na, nb, quorum, exclude, pull, cell))
    return out


def test_with_a_budget_of_one_no_placement_leaves_the_stated_bound(tmp_path: Path) -> None:
    """``max_flagged = 1``: every placement of the grid stays within ``2 B min(1, 2 w_max)``.

    The grid: both cluster sizes (2+2, quorum 3; 4+3, quorum 5), exclusion and
    down-weighting, the attacker at cluster a's mean or pulled half as far again
    away from everybody's, its extreme cell on the moved cell or elsewhere.
    Without the budget the 4+3 case moves the cell by 6.857 > 6.4 (exclusion).
    """
    worst = {}
    baselines: dict[tuple[int, int, int, bool], _Round] = {}
    for i, (na, nb, quorum, exclude, pull, cell) in enumerate(_grid()):
        honest = _clusters(na, nb, a_cell=BOUND, b_cell=-BOUND)
        config = OutlierConfig(exclude=exclude, max_flagged=1)
        key = (na, nb, quorum, exclude)
        if key not in baselines:  # the round without the attacker
            baselines[key] = _round(
                "plaintext", tmp_path / f"{i}-without", honest, quorum=quorum, config=config
            )
        x = _attacker(honest, pull=pull, cell=cell)
        with_it = _round(
            "plaintext", tmp_path / f"{i}-with", {**honest, "x": x}, quorum=quorum, config=config
        )
        moved = float(np.max(np.abs(with_it.aggregate - baselines[key].aggregate)))
        bound = influence_bound(bound=BOUND, max_weight=1 / quorum, marked=1)
        worst[(na, nb, quorum, exclude, pull, cell)] = (moved, bound, _flagged(with_it, na + nb))
    over = {k: v for k, v in worst.items() if v[0] > v[1] + TOLERANCE["plaintext"]}
    assert not over, over
    assert max(v[2] for v in worst.values()) == 1  # the budget, used
    assert max(v[0] for v in worst.values()) > 2 * BOUND / 5  # above the old statement's 3.2


def test_the_gatekeepers_hold_the_plan_to_its_budget_and_the_plan_to_the_policy() -> None:
    """A plan's ``max_flagged`` bounds the exclusions a gatekeeper allows; the policy, the plan."""
    ids = ("a", "b", "c", "d", "e", "f", "g")
    plan = ReleasePlan.for_round(
        round_id=1, min_participants=3, shape=(N, C), scoring=ScoringConfig(), max_flagged=1
    )
    tracker = PlanTracker(plan=plan)
    tracker.roster, tracker.phase = ids, "publication"
    tracker.final_scores = {**dict.fromkeys(ids, 100.0), "g": -1e6}  # all above the floor

    def ask(kept: tuple[str, ...]) -> ReleaseRequest:
        weights = (1.0 / len(kept),) * len(kept)
        return ReleaseRequest(
            round_id=1,
            purpose="aggregate",
            contributors=kept,
            value_kind="aggregate",
            shape=(N, C),
            weights=weights,
        )

    assert "max_flagged" in str(tracker.reason(ask(("a", "b", "c", "d", "g"))))  # e and f out
    assert tracker.reason(ask(("a", "b", "c", "d", "e", "f"))) is None  # g: impossible score
    assert tracker.reason(ask(("b", "c", "d", "e", "f"))) is None  # a, and g outside the budget
    unbudgeted = PlanTracker(plan=replace(plan, max_flagged=None))
    unbudgeted.roster, unbudgeted.phase = ids, "publication"
    unbudgeted.final_scores = dict(tracker.final_scores)
    assert unbudgeted.reason(ask(("a", "b", "c", "d", "g"))) is None  # the minority rule only

    policy = ConsortiumPolicy(participant_ids=ids, shape=(N, C), quorum=3, max_flagged=1)
    assert policy.plan_reason(plan) is None
    assert "max_flagged" in str(policy.plan_reason(replace(plan, max_flagged=2)))
    assert "max_flagged" in str(policy.plan_reason(replace(plan, max_flagged=None)))
    assert ConsortiumPolicy.from_bytes(policy.to_bytes()).max_flagged == 1
    assert ReleasePlan.from_bytes(plan.to_bytes()).max_flagged == 1
    free = ConsortiumPolicy(participant_ids=ids, shape=(N, C), quorum=3)
    assert b"max_flagged" not in free.to_bytes()  # a policy signed before the field: same bytes
    assert free.plan_reason(replace(plan, max_flagged=None)) is None


def test_the_policy_keeps_the_lowest_factors_and_nothing_beyond_its_budget() -> None:
    """Two far uploads and one impossible score with a budget of one: one flagged, g excluded."""
    scores = {**{p: 3.0 for p in "abcde"}, "f": 400.0, "h": 90.0, "g": -5.0}
    decisions = OutlierPolicy(dof=3, config=OutlierConfig(max_flagged=1)).decide(scores, round_id=1)
    assert {p for p, d in decisions.items() if d.factor < 1} == {"f", "g"}
    assert decisions["f"].excluded and decisions["g"].excluded and decisions["h"].action == "keep"
    assert flagged_count(decisions) == 1
    free = OutlierPolicy(dof=3).decide(scores, round_id=1)
    assert flagged_count(free) == 2
    assert influence_bound(bound=8.0, max_weight=0.2, marked=1) == pytest.approx(6.4)
    assert influence_bound(bound=8.0, max_weight=0.5, marked=3) == 16.0  # min(1, ...)


@pytest.mark.parametrize("mode", [pytest.param("ckks", marks=pytest.mark.slow), "shares"])
def test_the_worst_placement_stays_within_the_bound_in_every_mode(
    mode: str, tmp_path: Path
) -> None:
    """The 4+3 worst case, ``max_flagged = 1``: plaintext's decisions, within the bound."""
    honest = _clusters(4, 3, a_cell=BOUND, b_cell=-BOUND)
    x = _attacker(honest)
    config = OutlierConfig(exclude=True, max_flagged=1)
    plain, _, plain_with = _moved("plaintext", tmp_path, honest, x, quorum=5, config=config)
    moved, _, with_it = _moved(mode, tmp_path, honest, x, quorum=5, config=config)
    assert moved <= influence_bound(bound=BOUND, max_weight=1 / 5, marked=1) + TOLERANCE[mode]
    assert with_it.excluded == plain_with.excluded and len(with_it.excluded) == 1
    assert moved == pytest.approx(plain, abs=TOLERANCE[mode])

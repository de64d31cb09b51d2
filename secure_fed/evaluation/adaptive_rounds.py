"""Adaptive attackers in end-to-end rounds of the in-process federation (evaluation only).

:func:`run_arm` builds a :class:`~secure_fed.federation.federation.Federation`
whose last :data:`ATTACKERS` participants are a coalition, runs its rounds
through the project's round engine and returns what the benchmark reports:
the honest participants' accuracy and every participant's decisions. The
coalition is plugged in the way every evaluation attack is: as the
``attack`` of its members' :class:`~secure_fed.federation.participant.Participant`
(applied to what they send, after honest training and prediction). Arms:

* ``"absent"``: the attackers' members are removed; they contribute nothing
  (the same data split, quorum and cap as the attacked runs);
* ``"honest"``: they take part honestly;
* a kind of :data:`~secure_fed.evaluation.adaptive.ADAPTIVE_REGISTRY`.

The coalition sees the honest predictions of the round (the honest members
upload first: attackers are planned last) and recomputes each round's slice
the way the code draws it from the run seed (:func:`recompute_slice`).
"""

from __future__ import annotations

import importlib
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from secure_fed.errors import AttackSpecInvalid
from secure_fed.evaluation.adaptive import ADAPTIVE_REGISTRY, RoundView, forge
from secure_fed.evaluation.attacks import Attack, AttackSpec
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.federation import Federation, RoundResult
from secure_fed.federation.participant import Participant
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import TaskData
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND, predict_public
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = [
    "ARMS",
    "ATTACKERS",
    "PARTICIPANTS",
    "ArmSettings",
    "arm_federation",
    "build_federation",
    "recompute_slice",
    "round_decisions",
    "run_arm",
    "servers_slice",
]

PARTICIPANTS, ATTACKERS = 10, 3
#: Baseline arms besides the adaptive kinds.
ARMS = ("absent", "honest")


@dataclass(frozen=True, kw_only=True)
class ArmSettings:
    """One federation of the benchmark (everything but the arm).

    ``secret_slice``: the servers draw each round's slice with a fresh secret key
    (a real run); otherwise the key follows from the seed (a reproducible run,
    where the slice-aware attacker's recomputation is right).
    """

    dirichlet: float
    mode: str
    seed: int
    rounds: int = 3
    private: bool = False
    epochs: int = 3
    architectures: tuple[str, ...] = ("mlp", "logreg")
    secret_slice: bool = False

    def config(self) -> FederationConfig:
        """Return the run's configuration; the last :data:`ATTACKERS` are marked attackers."""
        return FederationConfig(
            participants=PARTICIPANTS,
            rounds=self.rounds,
            alpha=self.dirichlet,
            mode=self.mode,
            seed=self.seed,
            private=self.private,
            epochs_per_round=self.epochs,
            architectures=self.architectures,
            baseline=False,
            attack=AttackSpec("sign_flip", ATTACKERS),  # marks them; the arm sets the attack
        )


def recompute_slice(task: TaskData, *, rows: int, seed: int, round_id: int) -> EvidenceSlice | None:
    """Draw round ``round_id``'s evidence slice the way the code does, from the seed alone.

    What an attacker who has read :mod:`secure_fed.federation.evidence` can do:
    with a per-round pool it derives the pool's key from the seed
    (``EvidencePool.insecure_from_seed``, right only when the run's key is the
    seeded one); with the older carved slice it repeats ``carve_evidence``.
    """
    module = importlib.import_module("secure_fed.federation.evidence")
    pool_cls: Any = getattr(module, "EvidencePool", None)
    if pool_cls is not None and hasattr(pool_cls, "insecure_from_seed"):
        pool = pool_cls.insecure_from_seed(task, rows=rows, seed=seed)
        return None if pool is None else _as_slice(pool.for_round(round_id))
    return _as_slice(module.carve_evidence(task, rows=rows, seed=seed)[1])


def servers_slice(federation: Federation, round_id: int) -> EvidenceSlice | None:
    """Return the slice the servers measure round ``round_id``'s evidence on (for checking only)."""
    held: Any = federation.evidence
    if held is None or isinstance(held, EvidenceSlice):
        return held
    return _as_slice(held.for_round(round_id))


def _as_slice(value: object) -> EvidenceSlice | None:
    return value if isinstance(value, EvidenceSlice) else None


def build_federation(task: TaskData, settings: ArmSettings) -> Federation:
    """Build the arm's federation (seeded noise and slice key unless ``secret_slice``)."""
    return Federation(
        config=settings.config(),
        task=task,
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tempfile.mkdtemp(prefix="adaptive-")),
        insecure_noise=not settings.secret_slice,
    )


def arm_federation(federation: Federation, arm: str, *, task: TaskData, seed: int) -> None:
    """Plug ``arm`` into the federation's attacker members (see the module docstring).

    Raises
    ------
    AttackSpecInvalid
        If ``arm`` is neither a baseline nor a registered kind.
    """
    if arm == "absent":
        federation.members = [m for m in federation.members if not m.attacker]
        return
    attackers = [m for m in federation.members if m.attacker]
    if arm == "honest":
        for member in attackers:
            member.participant.attack = None
        return
    if arm not in ADAPTIVE_REGISTRY:
        raise AttackSpecInvalid(f"unknown arm {arm!r}; arms: {[*ARMS, *ADAPTIVE_REGISTRY]}")
    coalition = _Coalition(federation, arm, task=task, seed=seed, size=len(attackers))
    for index, member in enumerate(attackers):
        member.participant.attack = Attack.hook(coalition.hook(index), bound=PUBLIC_LOGIT_BOUND)


class _Coalition:
    """The attackers' shared view: honest predictions of the round and the recomputed slice."""

    def __init__(self, fed: Federation, kind: str, *, task: TaskData, seed: int, size: int):
        self.fed, self.kind, self.task, self.seed, self.size = fed, kind, task, seed, size
        self._round = -1
        self._honest: dict[str, np.ndarray] = {}

    def honest(self) -> dict[str, np.ndarray]:
        if self.fed.round_id != self._round:
            self._round = self.fed.round_id
            self._honest = {
                m.participant.participant_id: predict_public(
                    m.participant.model, m.participant.public_x
                )
                for m in self.fed.members
                if not m.attacker
            }
        return self._honest

    def hook(self, index: int) -> Any:
        def fn(own: np.ndarray) -> np.ndarray:
            rid = self.fed.round_id
            rows = self.fed.config.evidence_rows
            view = RoundView(
                round_id=rid,
                own=own,
                honest=self.honest(),
                index=index,
                colluders=self.size,
                bound=PUBLIC_LOGIT_BOUND,
                evidence=recompute_slice(self.task, rows=rows, seed=self.seed, round_id=rid),
                seed=self.seed,
            )
            return forge(self.kind, view)

        return fn


def _predictions(participant: Participant) -> np.ndarray:
    return predict_public(participant.model, participant.public_x)


def round_decisions(result: RoundResult) -> dict[str, list[object]]:
    """Per participant: ``[decision, copies, weighted]`` of one round (None: no upload)."""
    return {
        r.participant_id: [r.decision, r.copies, r.weight is not None and r.weight > 0]
        for r in result.rows
    }


def run_arm(task: TaskData, settings: ArmSettings, arm: str) -> dict[str, object]:
    """Run one arm end to end; return accuracies, decisions and the slice check."""
    fed = build_federation(task, settings)
    arm_federation(fed, arm, task=task, seed=settings.seed)
    rounds = fed.run()
    last = rounds[-1]
    honest = [r for r in last.rows if not r.attacker]
    attackers = [r for r in last.rows if r.attacker]
    slice_match = [
        recompute_slice(
            task, rows=fed.config.evidence_rows, seed=settings.seed, round_id=r.round_id
        )
        == servers_slice(fed, r.round_id)
        for r in rounds
    ]
    return {
        "honest_accuracy": float(np.mean([r.accuracy_federated for r in honest])),
        "honest_accuracy_per_round": [
            round(float(np.mean([x.accuracy_federated for x in r.rows if not x.attacker])), 4)
            for r in rounds
        ],
        "stages": [r.stage for r in rounds],
        "decisions": [round_decisions(r) for r in rounds],
        "attacker_weight": _total(r.weight for r in attackers),
        "honest_copies": sum(r.copies or 0 for r in honest),
        "slice_recomputed": all(slice_match),
    }


def _total(weights: Any) -> float:
    return round(float(sum(w for w in weights if w is not None)), 4)

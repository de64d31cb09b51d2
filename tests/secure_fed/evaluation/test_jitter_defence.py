"""The jitter coalition under label skew, end to end: it holds no weight, honest accuracy holds.

Ten participants on digits, Dirichlet 0.5, the last three the ``jitter``
coalition of :mod:`secure_fed.evaluation.adaptive` (the negated honest mean plus
noise just above the copy threshold), two plaintext rounds of the real
:class:`~secure_fed.federation.federation.Federation`. The coalition captures
the robust subset and keeps the outlier factor 1 while honest participants drop
to 0.05; with the soft merit alone it held 0.55 to 0.60 of the weight and honest
accuracy fell about 57 points below attackers-absent. The weighting's chance
rule (:func:`~secure_fed.federation.weighting.below_chance`) caps the merit of a
participant whose evidence is at or below 0, and the audit log records it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from secure_fed.evaluation.adaptive_rounds import ArmSettings, arm_federation, build_federation
from secure_fed.federation.federation import Federation, RoundResult
from secure_fed.federation.weighting import CHANCE_MERIT
from secure_fed.learning.data import TaskData, load_task

SETTINGS = ArmSettings(dirichlet=0.5, mode="plaintext", seed=0, rounds=2)


@pytest.fixture(scope="module")
def task() -> TaskData:
    return load_task("digits", seed=0)


def _run(task: TaskData, arm: str) -> tuple[Federation, list[RoundResult]]:
    warnings.filterwarnings("ignore")
    fed = build_federation(task, SETTINGS)
    arm_federation(fed, arm, task=task, seed=SETTINGS.seed)
    return fed, fed.run()


def _honest_accuracy(result: RoundResult) -> float:
    return float(np.mean([r.accuracy_federated for r in result.rows if not r.attacker]))


def test_jitter_coalition_under_label_skew_is_held_to_no_weight(task: TaskData) -> None:
    fed, rounds = _run(task, "jitter")
    _, absent = _run(task, "absent")
    assert all(r.stage == "published" for r in rounds)
    for result in rounds:
        coalition = [r for r in result.rows if r.attacker]
        assert len(coalition) == 3
        held = math.fsum(r.weight or 0.0 for r in coalition)
        # each colluder gets about m_chance / min_factor = 1/50 of an honest participant's
        # weight below the cap (the coalition held 0.55 to 0.60 with the soft merit alone)
        assert held < 0.02, held
    # honest accuracy after the last round within the target's 2 points of attackers-absent
    # (measured: 67.9 against 65.5; 9.0 with the soft merit alone)
    assert _honest_accuracy(rounds[-1]) >= _honest_accuracy(absent[-1]) - 0.02
    # the audit log records the rule as applied: flag, capped merit, published weight
    for result in rounds:
        events = fed.decisions.of_round(result.round_id)
        for row in result.rows:
            event = events[row.participant_id]
            assert event["below_chance"] is row.attacker
            assert event["weight"] == row.weight
            if row.attacker:
                assert isinstance(event["merit"], float) and event["merit"] <= CHANCE_MERIT

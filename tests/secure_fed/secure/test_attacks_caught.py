"""Gross attacks by a colluding minority are excluded; no honest participant is (fixed seeds)."""

from __future__ import annotations

import pytest

from secure_fed.evaluation.attacks import ATTACK_REGISTRY
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.mahalanobis import PlainBackend, pooled_mahalanobis
from tests.secure_fed.secure.helpers import BOUND, excluded, population

K, N, C, ATTACKERS = 10, 400, 10, 3
ATTACKS = ["label_flip", "sign_flip", "scaling", "constant", "gaussian"]


def test_every_registered_attack_is_covered() -> None:
    # both ways: a newly registered attack must join ATTACKS (and so every test below)
    assert set(ATTACK_REGISTRY) == set(ATTACKS)


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("seed", [0, 1])
def test_reference_filter_excludes_exactly_the_attackers(attack: str, seed: int) -> None:
    preds = population(K, N, C, seed=seed, attackers=ATTACKERS, attack=attack)
    scores = pooled_mahalanobis(PlainBackend(preds), sorted(preds), num_samples=N).scores
    assert excluded(scores, dof=C - 1) == {f"p{j:02d}" for j in range(K - ATTACKERS, K)}


@pytest.mark.parametrize("attack", ATTACKS)
def test_shares_mode_excludes_exactly_the_attackers(attack: str) -> None:
    preds = population(K, N, C, seed=7, attackers=ATTACKERS, attack=attack)
    dep = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=sorted(preds), min_participants=5
    )
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    scores = agg.score(handles, round_id=1).scores
    assert excluded(scores, dof=C - 1) == {f"p{j:02d}" for j in range(K - ATTACKERS, K)}

"""Per-round rows carry every metric; means over honest rows; user-chosen participant ids."""

from __future__ import annotations

import pytest

from secure_fed.errors import FederationConfigInvalid
from secure_fed.federation.config import FederationConfig, plan_participants
from secure_fed.federation.federation import ParticipantRound, RoundResult


def _row(pid: str, *, attacker: bool = False, auc: float | None = None) -> ParticipantRound:
    return ParticipantRound(
        participant_id=pid,
        architecture="mlp",
        attacker=attacker,
        accuracy_federated=0.9 if not attacker else 0.1,
        accuracy_local=0.8,
        epsilon_spent=1.0,
        weight=0.5,
        score=1.0,
        private_training="trained",
        balanced_accuracy_federated=0.6 if not attacker else 0.0,
        balanced_accuracy_local=0.5,
        macro_f1_federated=0.7,
        macro_f1_local=None,
        roc_auc_federated=auc,
        roc_auc_local=auc,
    )


def test_mean_metrics_over_honest_rows_and_missing_values() -> None:
    rows = (_row("a", auc=0.8), _row("b", auc=0.6), _row("x", attacker=True, auc=0.0))
    result = RoundResult(round_id=1, stage="published", reason=None, rows=rows, seconds=0.1)
    means = result.mean_metrics()
    assert means["accuracy"] == {"federated": pytest.approx(0.9), "local_only": pytest.approx(0.8)}
    assert means["balanced_accuracy"]["federated"] == pytest.approx(0.6)  # attacker left out
    assert means["macro_f1"]["local_only"] is None  # no twin figure anywhere
    assert means["roc_auc"]["federated"] == pytest.approx(0.7)
    everyone = result.mean_metrics(honest_only=False)
    assert everyone["balanced_accuracy"]["federated"] == pytest.approx(0.4)
    assert result.mean_accuracy() == (pytest.approx(0.9), pytest.approx(0.8))
    assert _row("c").metric("roc_auc", local=False) is None


def test_participant_ids_chosen_by_the_user() -> None:
    config = FederationConfig(participants=3, participant_ids=("north", "south", "east"))
    assert [p.participant_id for p in plan_participants(config)] == ["north", "south", "east"]
    assert plan_participants(config)[0].institution == "north"
    for ids in (("a", "b"), ("a", "a", "b")):
        with pytest.raises(FederationConfigInvalid, match="participant_ids"):
            FederationConfig(participants=3, participant_ids=ids)

"""Balanced accuracy, macro F1 and ROC AUC next to accuracy, on cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from torch import nn

from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.metrics import METRIC_NAMES, evaluate_scores, scores_from_logits


def _onehot(predicted: list[int], classes: int) -> np.ndarray:
    logits = np.zeros((len(predicted), classes))
    logits[np.arange(len(predicted)), predicted] = 1.0
    return logits


def test_majority_predictor_scores_high_accuracy_but_chance_balanced_accuracy() -> None:
    y = np.array([0] * 97 + [1] * 3)
    scores = scores_from_logits(_onehot([0] * 100, 2), y)
    assert scores.accuracy == pytest.approx(0.97)
    assert scores.balanced_accuracy == pytest.approx(0.5)
    assert scores.macro_f1 == pytest.approx((2 * 0.97 / 1.97 + 0.0) / 2)
    assert scores.roc_auc == pytest.approx(0.5)  # constant scores rank nobody


def test_values_by_hand_on_a_three_class_case() -> None:
    y = np.array([0, 0, 1, 1, 2, 2])
    predicted = [0, 1, 1, 1, 2, 0]
    scores = scores_from_logits(_onehot(predicted, 3), y)
    assert scores.accuracy == pytest.approx(4 / 6)
    assert scores.balanced_accuracy == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    f1 = [2 * 0.5 * 0.5 / 1.0, 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0), 2 * 1.0 * 0.5 / 1.5]
    assert scores.macro_f1 == pytest.approx(np.mean(f1))
    assert scores.roc_auc is None  # multi-class: no AUC


def test_binary_auc_ranks_by_the_positive_class_probability() -> None:
    y = np.array([0, 0, 1, 1])
    logits = np.array([[0.0, -2.0], [0.0, 0.5], [0.0, 0.1], [0.0, 3.0]])
    # positives 0.1 and 3.0 against negatives -2.0 and 0.5: 3 of 4 pairs ordered
    assert scores_from_logits(logits, y).roc_auc == pytest.approx(0.75)
    assert scores_from_logits(logits, np.array([1, 1, 1, 1])).roc_auc is None  # one class


@pytest.mark.parametrize(
    ("logits", "y"),
    [
        (np.zeros((3, 2)), np.array([0, 1])),
        (np.zeros((0, 2)), np.array([], dtype=np.int64)),
        (np.full((2, 2), np.nan), np.array([0, 1])),
        (np.zeros((2, 2)), np.array([0, 2])),
        (np.zeros((2, 2)), np.array([0.0, 1.0])),
    ],
)
def test_bad_input_is_refused(logits: np.ndarray, y: np.ndarray) -> None:
    with pytest.raises(LearningParameterInvalid):
        scores_from_logits(logits, y)


def test_evaluate_scores_matches_the_logits_of_the_model() -> None:
    model = nn.Linear(2, 2)
    x = np.random.default_rng(0).normal(size=(50, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    scores = evaluate_scores(model, x, y)
    logits = model(__import__("torch").as_tensor(x)).detach().numpy()
    assert scores == scores_from_logits(logits, y)
    assert tuple(scores.as_dict()) == METRIC_NAMES

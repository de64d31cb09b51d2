"""Classification metrics that stay honest on imbalanced and label-skewed data.

Accuracy alone rewards a model that always predicts the majority class: on a
table with 3% positives, "never positive" scores 97%. Every evaluation of the
project therefore reports, next to accuracy,

* **balanced accuracy**: the mean per-class recall over the classes present
  in the true labels (Brodersen et al. 2010, "The balanced accuracy and its
  posterior distribution"); a constant predictor scores ``1 / C``;
* **macro F1**: the unweighted mean of the per-class F1 scores (Sokolova and
  Lapalme 2009), classes absent from both truth and prediction left out and
  an undefined F1 counted as 0;
* **ROC AUC** for binary tasks: the probability that a random positive row
  gets a higher positive-class score than a random negative one (Hanley and
  McNeil 1982), from the softmax of the logits; ``None`` for more than two
  classes or when the evaluation rows hold one class only.

The computations are scikit-learn's (``sklearn.metrics``).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
from torch import nn

from secure_fed.errors import LearningParameterInvalid

__all__ = ["METRIC_NAMES", "Scores", "evaluate_scores", "scores_from_logits"]

#: Metric names in display order (the fields of :class:`Scores`).
METRIC_NAMES = ("accuracy", "balanced_accuracy", "macro_f1", "roc_auc")


@dataclass(frozen=True, kw_only=True)
class Scores:
    """One model's metrics on one evaluation set (all in [0, 1]).

    Attributes
    ----------
    accuracy
        Fraction of rows whose arg-max logit equals the label.
    balanced_accuracy
        Mean recall over the classes present in the labels.
    macro_f1
        Unweighted mean F1 over the classes seen in labels or predictions.
    roc_auc
        Binary ROC AUC of the positive-class probability; ``None`` when the
        task has more than two classes or the labels hold one class only.
    """

    accuracy: float
    balanced_accuracy: float
    macro_f1: float
    roc_auc: float | None

    def as_dict(self) -> dict[str, float | None]:
        """Return the metrics by name (:data:`METRIC_NAMES`)."""
        return asdict(self)


def scores_from_logits(logits: np.ndarray, y: np.ndarray) -> Scores:
    """Compute :class:`Scores` from a model's logits and the true labels.

    Parameters
    ----------
    logits
        ``[N, C]`` raw scores (any monotone transform of probabilities works
        for the arg-max; AUC uses the softmax).
    y
        ``[N]`` integer labels in ``0..C-1``.

    Returns
    -------
    Scores
        Accuracy, balanced accuracy, macro F1 and (binary) ROC AUC.

    Raises
    ------
    LearningParameterInvalid
        Shapes disagree, no rows, non-finite logits or labels outside ``0..C-1``.
    """
    from sklearn.metrics import balanced_accuracy_score, f1_score, roc_auc_score

    logits, y = np.asarray(logits, dtype=np.float64), np.asarray(y)
    if logits.ndim != 2 or len(logits) == 0 or len(logits) != len(y):
        raise LearningParameterInvalid(
            f"logits must be [N, C] with N = len(y) > 0, got {logits.shape} and {y.shape}"
        )
    if not np.isfinite(logits).all():
        raise LearningParameterInvalid("logits have NaN or infinite values")
    classes = logits.shape[1]
    if y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= classes:
        raise LearningParameterInvalid(f"labels must be integers in 0..{classes - 1}")
    predicted = logits.argmax(axis=1)
    auc = None
    if classes == 2 and len(np.unique(y)) == 2:
        shifted = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        auc = float(roc_auc_score(y, probs[:, 1]))
    with warnings.catch_warnings():  # predicted classes absent from y: expected, not news
        warnings.simplefilter("ignore", UserWarning)
        balanced = float(balanced_accuracy_score(y, predicted))
    return Scores(
        accuracy=float((predicted == y).mean()),
        balanced_accuracy=balanced,
        macro_f1=float(f1_score(y, predicted, average="macro", zero_division=0.0)),
        roc_auc=auc,
    )


def evaluate_scores(model: nn.Module, x: np.ndarray, y: np.ndarray) -> Scores:
    """Evaluate ``model`` on ``(x, y)``: :func:`scores_from_logits` of its eval-mode logits.

    Parameters
    ----------
    model
        Any classifier returning logits.
    x, y
        Features and integer labels (non-empty, same length).

    Returns
    -------
    Scores
        The model's metrics.
    """
    from secure_fed.learning.private_training import check_xy, predict_logits

    check_xy(x, y)
    return scores_from_logits(predict_logits(model, x), y)

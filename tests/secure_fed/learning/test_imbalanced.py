"""The bundled imbalanced tabular tasks: fixed, rare positives, loadable by name, learnable."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.learning.architectures import ARCHITECTURES
from secure_fed.learning.data import DATASET_REGISTRY, dirichlet_split, load_task
from secure_fed.learning.imbalanced import bank_imbalanced, cohort_imbalanced
from secure_fed.learning.models import MODEL_REGISTRY


@pytest.mark.parametrize(
    ("make", "rows", "features", "rate"),
    [(bank_imbalanced, 5000, 16, 0.03), (cohort_imbalanced, 4000, 12, 0.05)],
)
def test_generated_tables_are_fixed_and_imbalanced(
    make: object, rows: int, features: int, rate: float
) -> None:
    x, y = make()  # type: ignore[operator]
    again_x, again_y = make()  # type: ignore[operator]
    assert x.shape == (rows, features) and np.isfinite(x).all()
    assert set(np.unique(y)) == {0, 1} and y.mean() == pytest.approx(rate)
    np.testing.assert_array_equal(x, again_x)  # deterministic: same table every call
    np.testing.assert_array_equal(y, again_y)


@pytest.mark.parametrize("name", ["bank_imbalanced", "cohort_imbalanced"])
def test_loadable_by_name_standardised_with_public_statistics(name: str) -> None:
    assert name in DATASET_REGISTRY
    task = load_task(name, seed=0)
    assert task.num_classes == 2 and task.input_shape[0] in (12, 16)
    np.testing.assert_allclose(task.public_x.mean(axis=0), 0.0, atol=1e-4)
    assert 0.01 < task.test_y.mean() < 0.08  # the test set keeps positives
    parts = dirichlet_split(task.private_y, parts=10, alpha=0.5, seed=0, min_size=16)
    positives = [int(task.private_y[p].sum()) for p in parts]
    assert min(positives) < max(positives)  # Dirichlet label skew spreads positives unevenly


def test_a_linear_model_learns_the_signal() -> None:
    """ROC AUC well above chance: the rare class is predictable, not noise."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    for name in ("bank_imbalanced", "cohort_imbalanced"):
        task = load_task(name, seed=0)
        model = LogisticRegression(max_iter=2000, class_weight="balanced")
        model.fit(task.private_x, task.private_y)
        auc = roc_auc_score(task.test_y, model.predict_proba(task.test_x)[:, 1])
        assert auc > 0.7, (name, auc)


def test_light_architecture_names_match_the_registry() -> None:
    assert ARCHITECTURES == tuple(MODEL_REGISTRY)

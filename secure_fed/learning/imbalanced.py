"""Two bundled tabular tasks with a rare positive class (3% and 5%), generated deterministically.

Real institutions' tables are often imbalanced: defaults in a bank's loan book,
an adverse outcome in a hospital cohort. Both tasks here are synthetic and
generated from a fixed seed, so they are identical on every machine, need no
download and carry no licence of a third party (the generated rows are part of
this project; ``docs/learning.md``, section 2):

* ``bank_imbalanced``: 5,000 rows, 16 numeric features, **3.0%** positive
  ("default"), from scikit-learn's :func:`~sklearn.datasets.make_classification`
  (Guyon 2003, the NIPS 2003 feature-selection benchmark design: informative
  features on the vertices of a hypercube, redundant linear combinations,
  two Gaussian clusters per class);
* ``cohort_imbalanced``: 4,000 rows, 12 features of a simulated patient cohort
  (age, BMI, blood pressure, laboratory values, smoking and diabetes flags),
  **5.0%** positive: the rows whose latent risk (a logistic-linear score with
  two interactions plus logistic noise, as in a latent-variable logit model)
  is in the top 5%. Exactly 200 positives.

Each loader returns ``float64`` features and ``int64`` labels (``1`` = positive);
:func:`secure_fed.learning.data.load_task` splits and standardises them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BANK_SEED", "COHORT_SEED", "bank_imbalanced", "cohort_imbalanced"]

#: Fixed generation seeds (the tables never change).
BANK_SEED = 20261130
COHORT_SEED = 20261131


def bank_imbalanced() -> tuple[np.ndarray, np.ndarray]:
    """Generate the bank table: 5,000 rows, 16 features, 150 positives (3.0%).

    Returns
    -------
    tuple of numpy.ndarray
        ``float64 [5000, 16]`` features and ``int64 [5000]`` labels.
    """
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=5000,
        n_features=16,
        n_informative=6,
        n_redundant=4,
        n_clusters_per_class=2,
        weights=[0.97],
        flip_y=0.0,
        class_sep=1.0,
        random_state=BANK_SEED,
    )
    return x.astype(np.float64), y.astype(np.int64)


def cohort_imbalanced() -> tuple[np.ndarray, np.ndarray]:
    """Generate the hospital cohort: 4,000 rows, 12 features, 200 positives (5.0%).

    Returns
    -------
    tuple of numpy.ndarray
        ``float64 [4000, 12]`` features and ``int64 [4000]`` labels.
    """
    rng = np.random.default_rng(COHORT_SEED)
    n = 4000
    age = rng.normal(62, 12, n).clip(18, 95)
    bmi = rng.normal(27, 5, n).clip(15, 55)
    systolic = 100 + 0.6 * age + rng.normal(0, 14, n)
    creatinine = np.exp(rng.normal(0.0, 0.3, n)) * (1 + 0.004 * (age - 60))
    glucose = 90 + 1.2 * (bmi - 27) + rng.gamma(2.0, 8.0, n)
    crp = np.exp(rng.normal(1.0, 1.0, n))
    hemoglobin = rng.normal(13.5, 1.6, n)
    cholesterol = rng.normal(200, 38, n)
    heart_rate = rng.normal(76, 12, n)
    smoker = (rng.random(n) < 0.22).astype(np.float64)
    diabetic = (glucose + rng.normal(0, 15, n) > 140).astype(np.float64)
    noise_feature = rng.normal(0, 1, n)  # carries no signal, as real tables do
    risk = (
        0.05 * (age - 62)
        + 0.9 * np.log(crp)
        + 1.8 * (creatinine - 1.0)
        - 0.35 * (hemoglobin - 13.5)
        + 0.7 * smoker
        + 0.6 * diabetic
        + 0.02 * (systolic - 137)
        + 0.03 * (age - 62) * smoker
        + 0.4 * diabetic * (bmi > 32)
    )
    latent = risk + rng.logistic(0.0, 1.0, n)
    y = np.zeros(n, dtype=np.int64)
    y[np.argsort(latent)[-n // 20 :]] = 1
    x = np.column_stack(
        [
            age,
            bmi,
            systolic,
            creatinine,
            glucose,
            crp,
            hemoglobin,
            cholesterol,
            heart_rate,
            smoker,
            diabetic,
            noise_feature,
        ]
    )
    return x, y

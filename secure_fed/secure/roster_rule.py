"""The multi-round isolation rule: no combination of publications singles out a few participants.

Each round publishes one weighted sum ``pub_t = sum_k w_{t,k} p_k`` (weight 0 for a
participant left out). An aggregator that keeps every publication can form any linear
combination ``sum_t c_t pub_t = sum_k (sum_t c_t w_{t,k}) p_k``. If predictions did not
change between rounds (the worst case), a combination whose coefficient vector
``u = c^T W`` is nonzero on fewer than ``T`` participants reveals a weighted sum of fewer
than ``T`` uploads; on one participant, its whole matrix. Two rounds whose rosters differ
by one participant are the simplest case: with equal weights,
``|R| pub_1 - (|R| - 1) pub_2`` is the dropped participant's upload.

:func:`isolated_set` finds the smallest such support: the row space of the history ``W``
(rounds x participants) contains a nonzero vector supported on ``S`` exactly when
``rank([W; I_S]) < rank(W) + |S|``. It checks every ``S`` with ``|S| < T`` (``T`` is small:
2 or 3; ``K + K(K-1)/2`` rank computations of a matrix with at most ``rounds + 2`` rows).
:func:`isolation_reason` says why one more publication would break the rule, so a
gatekeeper refuses it before anything is released. The rule is exact for the worst case
it states (unchanged predictions); with predictions that drift between rounds an
isolating combination is off by the others' drift (measured in the threat model).

Numerical rank uses a relative tolerance (:data:`RANK_RTOL`): a combination that needs
coefficients beyond ``1 / RANK_RTOL`` to isolate a participant would amplify the
publications' noise (CKKS flooding, the shares codec's 2^-16 resolution) by as much, so it
is not counted as isolating.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np

__all__ = ["RANK_RTOL", "isolated_set", "isolation_reason", "weight_row"]

#: Relative singular-value tolerance of the rank computations.
RANK_RTOL = 1e-9


def weight_row(weights: Mapping[str, float], participants: Sequence[str]) -> np.ndarray:
    """Return one publication's weights over ``participants`` (0 for one left out)."""
    return np.array([float(weights.get(p, 0.0)) for p in participants], dtype=np.float64)


def _rank(matrix: np.ndarray) -> int:
    if matrix.size == 0:
        return 0
    values = np.linalg.svd(matrix, compute_uv=False)
    if values.size == 0 or values[0] == 0.0:
        return 0
    return int(np.sum(values > values[0] * RANK_RTOL))


def isolated_set(history: np.ndarray, below: int) -> tuple[int, ...] | None:
    """Return the smallest column set ``S`` (``|S| < below``) the row space isolates, or None.

    Parameters
    ----------
    history
        Publications x participants weight matrix.
    below
        ``T``: sets of fewer participants must not be isolated.
    """
    rows = np.asarray(history, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] == 0 or below <= 1:
        return None
    # scale each publication to unit norm: the span is unchanged, the ranks better conditioned
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = rows[norms[:, 0] > 0] / norms[norms[:, 0] > 0]
    base = _rank(rows)
    count = rows.shape[1]
    for size in range(1, min(below, count + 1)):
        for subset in combinations(range(count), size):
            unit = np.zeros((size, count))
            unit[np.arange(size), list(subset)] = 1.0
            if _rank(np.vstack([rows, unit])) < base + size:
                return subset
    return None


def isolation_reason(
    history: Sequence[Mapping[str, float]],
    publication: Mapping[str, float],
    participants: Sequence[str],
    *,
    below: int,
) -> str | None:
    """Say why one more ``publication`` would isolate fewer than ``below`` participants.

    Parameters
    ----------
    history
        Every earlier publication's weights, by participant id.
    publication
        The publication asked for now.
    participants
        Every enrolled participant (columns).
    below
        ``T`` of the consortium's policy (1: no rule).

    Returns
    -------
    str or None
        The reason (naming the participants a combination would isolate), or ``None``.
    """
    if below <= 1:
        return None
    ids = list(participants)
    matrix = np.vstack([weight_row(w, ids) for w in (*history, publication)])
    found = isolated_set(matrix, below)
    if found is None:
        return None
    names = [ids[i] for i in found]
    return (
        f"with the {len(history)} earlier publications, a combination would single out "
        f"{names} (fewer than the policy's {below} participants, predictions unchanged)"
    )

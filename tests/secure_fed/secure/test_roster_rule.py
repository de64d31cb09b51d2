"""The multi-round isolation rule, checked against an independent computation and by attack.

The property: every history the rule accepts has no combination of publications whose
coefficients over the participants are nonzero on fewer than ``T`` of them. It is checked
here with the null space of the history instead of the rule's rank test: a vector supported
on ``S`` lies in the row space of ``W`` exactly when it is orthogonal to ``null(W)``, i.e.
when the null-space basis restricted to ``S`` has rank below ``|S|``.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_fed.secure.roster_rule import isolated_set, isolation_reason, weight_row

IDS = ["a", "b", "c", "d", "e"]


def _isolates(history: np.ndarray, below: int) -> bool:
    """Independent check: some nonzero row-space vector has fewer than ``below`` nonzeros."""
    rows = history / np.linalg.norm(history, axis=1, keepdims=True)
    _, values, vt = np.linalg.svd(rows)
    rank = int(np.sum(values > values[0] * 1e-9))
    null = vt[rank:].T  # columns span null(W)
    for size in range(1, below):
        for subset in combinations(range(history.shape[1]), size):
            restricted = null[list(subset), :] if null.size else np.zeros((size, 0))
            sv = np.linalg.svd(restricted, compute_uv=False) if restricted.size else np.zeros(0)
            top = max(1.0, float(sv[0])) if sv.size else 1.0
            if int(np.sum(sv > top * 1e-9)) < size:
                return True
    return False


def test_rosters_that_differ_by_one_participant_isolate_it() -> None:
    first = dict.fromkeys("abc", 1 / 3)
    second = dict.fromkeys("ab", 1 / 2)  # c dropped out (or was withheld)
    reason = isolation_reason([first], second, list("abc"), below=2)
    assert reason is not None and "['c']" in reason
    # the leak is real: with unchanged predictions the difference is c's whole matrix
    rng = np.random.default_rng(0)
    preds = {p: rng.normal(0, 2, (50, 4)) for p in "abc"}
    pub1 = sum(w * preds[p] for p, w in first.items())
    pub2 = sum(w * preds[p] for p, w in second.items())
    assert np.allclose(3 * pub1 - 2 * pub2, preds["c"])
    assert isolation_reason([first], second, list("abc"), below=1) is None  # T = 1: no rule


def test_withholding_a_different_upload_each_round_is_refused_at_the_third() -> None:
    rounds = [dict.fromkeys(r, 1 / 2) for r in ("ab", "bc", "ac")]
    assert isolation_reason([], rounds[0], list("abc"), below=2) is None
    # {a,b} then {b,c}: a - c is in the span (two participants), nobody alone
    assert isolation_reason(rounds[:1], rounds[1], list("abc"), below=2) is None
    reason = isolation_reason(rounds[:2], rounds[2], list("abc"), below=2)
    assert reason is not None and "single out ['a']" in reason


def test_equal_weights_over_one_roster_never_isolate() -> None:
    same = dict.fromkeys(IDS, 1 / 5)
    assert isolation_reason([same] * 20, same, IDS, below=3) is None


def test_changing_weights_over_one_roster_isolate_after_k_minus_t_plus_one() -> None:
    rng = np.random.default_rng(1)
    history: list[dict[str, float]] = []
    for count in range(1, 6):
        raw = rng.uniform(0.5, 1.5, len(IDS))
        weights = dict(zip(IDS, raw / raw.sum(), strict=True))
        refused = isolation_reason(history, weights, IDS, below=2) is not None
        # K = 5, T = 2: four generic publications leave a support of 2; the fifth isolates one
        assert refused == (count == 5), count
        history.append(weights)


def test_a_combination_needing_huge_coefficients_is_not_counted() -> None:
    base = np.array([0.2, 0.2, 0.2, 0.2, 0.2])
    # the difference is supported on {a, b} only, but needs a coefficient of 1e12
    nudged = base + np.array([1e-12, -1e-12, 0, 0, 0])
    assert isolated_set(np.vstack([base, nudged]), 3) is None
    moved = base + np.array([1e-3, -1e-3, 0, 0, 0])  # a real weight change: counted
    assert isolated_set(np.vstack([base, moved]), 3) == (0, 1)


ROSTER = st.lists(st.sampled_from(IDS), min_size=2, max_size=5, unique=True)
WEIGHTS = st.lists(st.floats(0.05, 1.0), min_size=5, max_size=5)
EQUAL = st.booleans()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(ROSTER, WEIGHTS, EQUAL), min_size=1, max_size=8),
    st.integers(2, 3),
)
def test_every_history_the_rule_accepts_isolates_no_small_set(rounds, below) -> None:  # type: ignore[no-untyped-def]
    accepted: list[dict[str, float]] = []
    for roster, raw, equal in rounds:
        picked = [1.0] * len(roster) if equal else raw[: len(roster)]
        weights = {p: w / sum(picked) for p, w in zip(roster, picked, strict=True)}
        if isolation_reason(accepted, weights, IDS, below=below) is None:
            accepted.append(weights)
            matrix = np.vstack([weight_row(w, IDS) for w in accepted])
            assert not _isolates(matrix, below), accepted
        else:  # refused: the independent check agrees that it would isolate
            matrix = np.vstack([weight_row(w, IDS) for w in (*accepted, weights)])
            assert _isolates(matrix, below)

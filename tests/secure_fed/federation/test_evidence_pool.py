"""Each round's labeled slice: fresh, uniform, keyed, never predictable without the key."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

from secure_fed.errors import FederationConfigInvalid
from secure_fed.federation.evidence import EvidencePool
from secure_fed.learning.data import load_task

TASK = load_task("digits", seed=0)
KEY = bytes(range(32))


def test_a_round_slice_is_public_rows_with_the_servers_labels() -> None:
    pool = EvidencePool.from_task(TASK, rows=64, key=KEY)
    assert pool is not None and pool.size == 64
    piece = pool.for_round(3)
    assert len(piece.rows) == 64 and list(piece.rows) == sorted(set(piece.rows))
    assert TASK.public_y is not None
    assert list(piece.labels) == [int(TASK.public_y[r]) for r in piece.rows]
    assert pool.for_round(3) == EvidencePool.from_task(TASK, rows=64, key=KEY).for_round(3)


def test_every_round_draws_afresh_and_every_row_is_equally_likely() -> None:
    pool = EvidencePool.from_task(TASK, rows=50, key=KEY)
    assert pool is not None
    rounds = [set(pool.for_round(r).rows) for r in range(1, 201)]
    assert all(a != b for a, b in zip(rounds, rounds[1:], strict=False))
    n = len(TASK.public_x)
    counts = Counter(row for drawn in rounds for row in drawn)
    observed = np.array([counts.get(row, 0) for row in range(n)], dtype=float)
    expected = 200 * 50 / n
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    # chi-square with n-1 dof: mean n-1, sd sqrt(2(n-1)); 6 sd is far beyond noise
    assert chi2 < (n - 1) + 6 * np.sqrt(2 * (n - 1))


def test_without_the_key_the_slice_cannot_be_told() -> None:
    """Two federations with the same data and seeds draw unrelated slices."""
    a, b = EvidencePool.from_task(TASK, rows=50), EvidencePool.from_task(TASK, rows=50)
    assert a is not None and b is not None
    overlap = len(set(a.for_round(1).rows) & set(b.for_round(1).rows))
    expected = 50 * 50 / len(TASK.public_x)
    assert overlap < expected + 6 * np.sqrt(expected)


def test_a_seeded_pool_is_predictable_and_says_so() -> None:
    a = EvidencePool.insecure_from_seed(TASK, rows=50, seed=7)
    b = EvidencePool.insecure_from_seed(TASK, rows=50, seed=7)
    assert a is not None and b is not None and a.predictable
    assert a.for_round(2) == b.for_round(2)
    assert "predictable" in repr(a)


def test_the_key_is_never_printed_or_pickled() -> None:
    pool = EvidencePool.from_task(TASK, rows=50, key=KEY)
    assert pool is not None
    assert KEY.hex() not in repr(pool) and "secret-keyed" in repr(pool)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(pool)


def test_no_slice_without_rows_or_public_labels() -> None:
    from dataclasses import replace

    assert EvidencePool.from_task(TASK, rows=0) is None
    assert EvidencePool.from_task(replace(TASK, public_y=None), rows=50) is None
    small = EvidencePool.from_task(TASK, rows=10**6, key=KEY)
    assert small is not None and small.size == len(TASK.public_x)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"rows": (0, 1), "labels": (0,), "size": 1, "key": KEY}, "one label per"),
        ({"rows": (0, 0), "labels": (0, 1), "size": 1, "key": KEY}, "distinct"),
        ({"rows": (0, 1), "labels": (0, 1), "size": 3, "key": KEY}, "size must be"),
        ({"rows": (0, 1), "labels": (0, 1), "size": 0, "key": KEY}, "size must be"),
        ({"rows": (0, 1), "labels": (0, 1), "size": 1, "key": b"short"}, "32 bytes"),
    ],
)
def test_an_inconsistent_pool_is_refused(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(FederationConfigInvalid, match=fragment):
        EvidencePool(**kwargs)  # type: ignore[arg-type]


def test_a_negative_row_count_is_refused() -> None:
    with pytest.raises(FederationConfigInvalid, match="evidence_rows"):
        EvidencePool.from_task(TASK, rows=-1)

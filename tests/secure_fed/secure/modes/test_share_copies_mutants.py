"""The shares-mode copies step's arithmetic and guards, value by value.

Each case pins a line of :mod:`secure_fed.secure.modes.share_copies` that the
end-to-end copies tests pass through without looking at: the exact room of the
64-bit ring for pair distances, the typical distance for two participants or
small scores, ring arithmetic (mod ``2^64``) whatever integer container the
shares arrive in, and the refusals of opened counts that are not counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import ScoringInvalid
from secure_fed.secure.modes.share_copies import (
    arithmetic_bits,
    check_distance_room,
    count_copies,
    count_shares,
    distance_factors,
    distance_sums,
    open_counts,
    typical_distance,
)
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan

RING = 1 << 64


def ints(values: list[int]) -> np.ndarray:
    """Shares as signed 64-bit integers (not the ring's ``uint64``)."""
    return np.array(values, dtype=np.int64)


def ring(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def tracker_with(scores: dict[str, float]) -> PlanTracker:
    plan = ReleasePlan(
        round_id=1, min_participants=2, num_samples=8, num_classes=2, moment_samples=8, copies=True
    )
    tracker = PlanTracker(plan=plan)
    tracker.ranking_scores = dict(scores)
    return tracker


def test_the_ring_room_for_pair_distances_is_exactly_two_to_the_thirty_values() -> None:
    """``D <= values (2 x 8 x 2^12)^2 < 2^62`` holds up to ``2^30 - 1`` values, not beyond."""
    check_distance_room((1 << 30) - 1)
    with pytest.raises(ScoringInvalid, match=f"over {1 << 30} values could wrap the ring"):
        check_distance_room(1 << 30)


def test_two_participants_have_a_typical_distance() -> None:
    """Two ranking scores ``r``: ``2K/(K-1) = 4`` times their median; one score gives none."""
    assert typical_distance(tracker_with({"a": 1.0, "b": 3.0})) == 8.0
    assert typical_distance(tracker_with({"a": 5.0})) == 0.0


def test_a_small_median_score_is_not_raised_to_one() -> None:
    """Only a negative median is clamped (to 0); a median of 0.5 stays 0.5."""
    assert typical_distance(tracker_with({"a": 0.4, "b": 0.6})) == pytest.approx(2.0)
    assert typical_distance(tracker_with({"a": -3.0, "b": -1.0})) == 0.0


def test_pair_differences_are_flat_and_wrap_like_ring_elements() -> None:
    """Signed ``[2, 2]`` shares: ``x_0 - x_1`` mod ``2^64``, one flat vector."""
    out = distance_factors([ints([1, 2, 3, 4]).reshape(2, 2), ints([3, 0, 3, 9]).reshape(2, 2)])
    assert out.dtype == np.uint64 and out.shape == (4,)
    assert out.tolist() == [RING - 2, 2, 0, RING - 5]


def test_signed_squared_differences_sum_per_pair_in_the_ring() -> None:
    sums = distance_sums(ints([1, 2, 3, 4]), pairs=2)
    assert sums.dtype == np.uint64 and sums.tolist() == [3, 7]
    wrapped = distance_sums(ring([RING - 1, 2]), pairs=1)
    assert wrapped.tolist() == [1]


def test_a_signed_product_share_converts_bits_in_the_ring() -> None:
    """``b - 2 [b0 b1]`` stays a ring element: 0 - 2 x 3 wraps to ``2^64 - 6``."""
    out = arithmetic_bits(np.array([False, True]), ints([3, 0]))
    assert out.dtype == np.uint64 and out.tolist() == [RING - 6, 1]


def test_signed_bit_shares_are_counted_per_member() -> None:
    """Pairs (0, 1), (0, 2), (1, 2): member 0 in two pairs counts 2; a share of -1 wraps."""
    assert count_shares(ints([1, 1, 0]), members=3).tolist() == [2, 1, 1]
    assert count_shares(ints([-1, 0, 0]), members=3).tolist() == [RING - 1, RING - 1, 0]


def test_count_shares_that_wrap_open_to_counts_whatever_side_is_signed() -> None:
    big = ring([RING - 3, RING - 1])
    assert open_counts(ints([3, 1]), big, members=2) == [0, 0]
    assert open_counts(big, ints([3, 2]), members=2) == [0, 1]


def test_count_shares_of_the_wrong_shape_on_one_side_are_refused_by_name() -> None:
    ours, short = np.zeros(3, dtype=np.uint64), np.zeros(2, dtype=np.uint64)
    for mine, theirs in ((ours, short), (short, ours)):
        with pytest.raises(ScoringInvalid, match=r"count shares of shapes .* for 3 members"):
            open_counts(mine, theirs, members=3)


def test_a_count_equal_to_the_member_count_is_refused() -> None:
    """A member has ``members - 1`` pairs at most: a count of ``members`` is forged."""
    assert open_counts(ring([2, 0, 0]), ring([0, 0, 0]), members=3) == [2, 0, 0]
    with pytest.raises(ScoringInvalid, match=r"leave \[0, 3\)"):
        open_counts(ring([3, 0, 0]), ring([0, 0, 0]), members=3)


def test_a_member_in_several_near_pairs_counts_each_of_them() -> None:
    assert count_copies(["a", "b", "c"], [True, True, True]) == dict.fromkeys("abc", 2)
    assert count_copies(["a", "b", "c"], [False, True, True]) == {"a": 1, "b": 1, "c": 2}

"""The shares-mode copies step's arithmetic and guards, value by value.

Each case pins a line of :mod:`secure_fed.secure.computation.share_copies` that the
end-to-end copies tests pass through without looking at: the exact room of the
64-bit ring for pair distances, the typical distance for two participants or
small scores, ring arithmetic (mod ``2^64``) whatever integer container the
shares arrive in, and the refusals of opened counts that are not counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from crypto.errors import ShareTampered
from secure_fed.errors import (
    AuthorityRequestMalformed,
    OpeningRefused,
    ScoringInvalid,
)
from secure_fed.secure.computation.share_copies import (
    _beaver,
    _request,
    arithmetic_bits,
    check_distance_room,
    count_copies,
    count_shares,
    distance_factors,
    distance_sums,
    open_counts,
    run_copies,
    typical_distance,
)
from secure_fed.secure.mode import UploadHandle
from secure_fed.secure.modes.shares import SharesAggregator, SharesKeys
from secure_fed.secure.parties.key_authority import deal_request
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.wire import HELPER_REPLY, decode_frame, encode_frame
from tests.refusals import exactly
from tests.secure_fed.secure.modes.shares_round import BOUND, IDS, C, N, deployment

RING = 1 << 64


def ints(values: list[int]) -> np.ndarray:
    """Shares as signed 64-bit integers (not the ring's ``uint64``)."""
    return np.array(values, dtype=np.int64)


def ring(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def server_keys() -> SharesKeys:
    return deployment().server_keys()


def scored_round() -> tuple[SharesAggregator, dict[str, UploadHandle]]:
    """A shares round with a copies step, scored (four distinct uploads)."""
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(
        ReleasePlan.for_round(
            round_id=1, min_participants=3, shape=(N, C), scoring=agg.scoring, copies=True
        )
    )
    rng = np.random.default_rng(3)
    handles = {
        p: agg.load(dep.encoder(p, bound=BOUND).encode(rng.normal(0, 2, (N, C)))) for p in IDS
    }
    agg.score(handles, round_id=1)
    return agg, handles


def helper_answering(head: dict[str, object], payload: bytes) -> SharesKeys:
    """The aggregator's keys with a helper that answers every request with one frame."""
    return replace(server_keys(), helper=lambda request: encode_frame(HELPER_REPLY, head, payload))


def tracker_with(typical: float | None) -> PlanTracker:
    plan = ReleasePlan(
        round_id=1, min_participants=2, num_samples=8, num_classes=2, moment_samples=8, copies=True
    )
    tracker = PlanTracker(plan=plan)
    tracker.copies_typical = typical
    return tracker


def test_the_ring_room_for_pair_distances_is_exactly_two_to_the_thirty_values() -> None:
    """``D <= values (2 x 8 x 2^12)^2 < 2^62`` holds up to ``2^30 - 1`` values, not beyond."""
    check_distance_room((1 << 30) - 1)
    with pytest.raises(ScoringInvalid, match=f"over {1 << 30} values could wrap the ring"):
        check_distance_room(1 << 30)


def test_the_typical_distance_is_the_one_the_moments_recorded() -> None:
    """The tracker's value of the opened moments; none recorded (no ranking pass) gives 0."""
    assert typical_distance(tracker_with(8.0)) == 8.0
    assert typical_distance(tracker_with(None)) == 0.0


def test_a_small_typical_distance_is_not_raised_to_one() -> None:
    """A typical distance of 0.5 stays 0.5 (only the threshold has a floor)."""
    assert typical_distance(tracker_with(0.5)) == pytest.approx(0.5)


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


# -- the aggregator's side of the exchange with the helper ----------------------------


def test_a_helper_reply_for_another_round_or_step_is_refused() -> None:
    for head in ({"step": "copies", "round_id": 2}, {"step": "range", "round_id": 1}):
        keys = helper_answering(head, b"")
        with exactly(OpeningRefused, "helper reply does not answer the copies step of round 1"):
            _request(keys, {}, round_id=1)


def test_a_helper_reply_whose_parts_do_not_add_up_is_refused() -> None:
    for parts in ([1, 2], "4"):
        keys = helper_answering({"step": "copies", "round_id": 1, "parts": parts}, b"abcd")
        with exactly(OpeningRefused, "helper reply parts do not add up"):
            _request(keys, {}, round_id=1)


def test_a_helper_reply_is_cut_into_its_parts_in_order() -> None:
    """Three parts are three consecutive slices; a reply naming no parts is one part."""
    keys = helper_answering({"step": "copies", "round_id": 1, "parts": [1, 2, 3]}, b"abcdef")
    assert _request(keys, {}, round_id=1)[1] == [b"a", b"bc", b"def"]
    keys = helper_answering({"step": "copies", "round_id": 1}, b"abcdef")
    assert _request(keys, {}, round_id=1)[1] == [b"abcdef"]


def test_uploads_too_large_for_the_ring_are_refused_before_any_triple_is_dealt() -> None:
    """``2^30`` values (a zero-memory broadcast; the second upload short, so no pair forms)."""
    keys = server_keys()
    huge = np.broadcast_to(np.zeros(1, dtype=np.uint64), (1 << 30,))
    asked: list[bytes] = []

    def dealer(request: bytes) -> tuple[bytes, bytes]:
        asked.append(request)
        return b"", b""

    keys = replace(keys, dealer=dealer)
    with exactly(ScoringInvalid, f"pair distances over {1 << 30} values could wrap the ring"):
        run_copies(
            keys,
            uids=["u0", "u1"],
            shares=[huge, np.zeros(2, dtype=np.uint64)],
            tracker=tracker_with(None),
            round_id=1,
        )
    assert asked == []


def test_triples_dealt_for_another_count_are_refused() -> None:
    """A dealer answering a request for 4 triples with 5 (validly tagged for the label)."""
    keys = server_keys()
    assert keys.signing_key is not None
    five = keys.dealer(deal_request(round_id=1, tensor="t", count=5, signer=keys.signing_key))
    keys = replace(keys, dealer=lambda request: five)
    with pytest.raises(ShareTampered, match="share blob count 5 is not the expected count 4"):
        _beaver(keys, 1, "t", 4)


def flip_beaver_opening(channel: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """A helper whose first copies reply carries one flipped bit in its Beaver opening."""

    def helper(request: bytes) -> bytes:
        head, payload = decode_frame(channel(request), HELPER_REPLY)
        parts = head.get("parts")
        if head.get("step") == "copies" and isinstance(parts, list) and len(parts) == 2:
            middle = int(parts[0]) // 2
            payload = payload[:middle] + bytes([payload[middle] ^ 1]) + payload[middle + 1 :]
        return encode_frame(HELPER_REPLY, head, payload)

    return helper


def test_a_tampered_helper_opening_refuses_the_copies_step_by_name() -> None:
    agg, handles = scored_round()
    agg.keys = replace(agg.keys, helper=flip_beaver_opening(agg.keys.helper))
    tag = "share blob authentication tag does not verify (tampered or wrong key)"
    with exactly(AuthorityRequestMalformed, f"copies step refused: [CRYPTO_SHARE_TAMPERED] {tag}"):
        agg.copies(handles, round_id=1)

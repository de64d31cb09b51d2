"""Near-duplicates under shares: the same distance as plaintext, only the counts opened.

Small uploads (48 x 4, K = 6) through a real shares deployment (aggregator, helper, key
authority as dealer): the pair distances are computed as shares on the same
normalisation as the plaintext and ckks modes, compared with the threshold and counted
on shares (only the counts are opened), and the counts equal the plaintext reference
on copies, jittered copies and distinct uploads.
"""

from __future__ import annotations

import numpy as np
import pytest

from crypto.shares import RING_PREDICTIONS, deal_triples, secure_multiply, split
from crypto.shares.prg import ShareLabel
from crypto.shares.wire import ShareMacKey
from secure_fed.errors import AuthorityRequestMalformed, ModeSetupInvalid, ScoringInvalid
from secure_fed.secure.computation.share_copies import (
    arithmetic_bits,
    bit_factors,
    check_distance_room,
    copies_threshold,
    copies_upper,
    count_copies,
    count_shares,
    distance_factors,
    distance_sums,
    open_counts,
    pair_indices,
)
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import compare_request
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.scoring.evidence import (
    DUPLICATE_FLOOR,
    near_duplicates,
    pairwise_distances,
)

N, C, K = 48, 4, 6
IDS = [f"p{j}" for j in range(K)]
BOUND = 8.0


def uploads(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {p: np.clip(rng.normal(0, 2, (N, C)), -BOUND, BOUND) for p in IDS}


def shares_round(mats: dict[str, np.ndarray], **plan: object):  # type: ignore[no-untyped-def]
    dep = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=IDS, min_participants=3
    )
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(
        ReleasePlan.for_round(
            round_id=1,
            min_participants=3,
            shape=(N, C),
            scoring=agg.scoring,
            copies=True,
            **plan,  # type: ignore[arg-type]
        )
    )
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in mats.items()}
    agg.score(handles, round_id=1)
    return dep, agg, handles


def test_shared_distances_are_the_plaintext_distances_on_the_same_normalisation() -> None:
    mats = uploads(1)
    enc = [RING_PREDICTIONS.encode(mats[p]) for p in IDS]
    s0, s1 = zip(*(split(e) for e in enc), strict=True)
    x0, x1 = distance_factors(list(s0)), distance_factors(list(s1))
    key = ShareMacKey.derive(bytes(range(40)), recipient="channel")
    label = ShareLabel(round_id=1, participant_id="beaver", tensor="t")
    triples = deal_triples(x0.size, label=label)
    p0, p1 = secure_multiply((x0, x1), (x0, x1), triples, channel_key=key)
    pairs = len(pair_indices(K))
    total = distance_sums(p0, pairs=pairs) + distance_sums(p1, pairs=pairs)
    found = total.astype(np.float64) / (N * 2.0 ** (2 * RING_PREDICTIONS.frac_bits))
    plain = pairwise_distances(mats)
    expected = [plain[(IDS[a], IDS[b])] for a, b in pair_indices(K)]
    assert found == pytest.approx(expected, abs=1e-3)  # the codec's rounding, 2^-12 per value


def test_copies_and_jittered_copies_are_counted_as_in_plaintext() -> None:
    """Three uploads of one matrix and a jittered copy: the plaintext's counts, no distance."""
    mats = uploads(2)
    mats["p4"] = mats["p5"] = mats["p3"].copy()
    mats["p1"] = np.clip(mats["p0"] + np.random.default_rng(9).normal(0, 0.05, (N, C)), -8, 8)
    dep, agg, handles = shares_round(mats)
    counts = agg.copies(handles, round_id=1)
    expected = near_duplicates(pairwise_distances(mats), IDS)
    assert counts == expected == {"p0": 1, "p1": 1, "p2": 0, "p3": 2, "p4": 2, "p5": 2}
    # both servers advanced their plans to the publication and hold the same counts
    helper = dep.helper.plans.tracker(1)
    assert helper.phase == agg._plans[1].phase == "publication"
    assert helper.copies == counts and not any(helper.distances.values())  # no distance kept
    pairs = [r for r in dep.helper.log if r.purpose == "distance" and r.released]
    assert len(pairs) == K * (K - 1) // 2


def test_distinct_uploads_get_count_zero() -> None:
    mats = uploads(3)
    _, agg, handles = shares_round(mats)
    assert agg.copies(handles, round_id=1) == dict.fromkeys(IDS, 0)
    assert near_duplicates(pairwise_distances(mats), IDS) == dict.fromkeys(IDS, 0)


def test_the_threshold_comes_from_the_plan_and_the_opened_moments() -> None:
    plan = ReleasePlan(
        round_id=1, min_participants=3, num_samples=N, num_classes=C, moment_samples=N, copies=True
    )
    tracker = PlanTracker(plan=plan)
    assert copies_threshold(tracker) == DUPLICATE_FLOOR  # no moments opened: the floor
    assert copies_upper(tracker) == int(DUPLICATE_FLOOR * N * 2.0**24)
    tracker.ranking_scores = {"a": 10.0, "b": 12.0, "c": 14.0, "d": 100.0}
    assert copies_threshold(tracker) == DUPLICATE_FLOOR  # ranking scores do not set it
    tracker.copies_typical = 13.0  # what opening the moments of H records
    assert copies_threshold(tracker) == pytest.approx(0.25 * 13.0)


def test_counts_come_from_one_bit_per_pair() -> None:
    assert count_copies(["a", "b", "c"], [True, False, False]) == {"a": 1, "b": 1, "c": 0}
    with pytest.raises(ScoringInvalid, match="2 bits for 3 pairs"):
        count_copies(["a", "b", "c"], [True, False])
    check_distance_room(10_000 * 10)
    with pytest.raises(ScoringInvalid, match="could wrap"):
        check_distance_room(1 << 30)


def test_the_key_authority_deals_comparisons_only_for_signed_sane_requests() -> None:
    dep = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=IDS, min_participants=3
    )
    keys = dep.server_keys()
    blob0, blob1 = keys.deal_compare(round_id=1, tensor="c", count=15, upper=1000)
    assert blob0 and blob1 and dep.authority.log[-1].purpose == "compare:c"
    for upper in (-1, 1 << 62, True):
        request = compare_request(
            round_id=1, tensor="c2", count=3, upper=upper, signer=keys.signing_key
        )  # type: ignore[arg-type]
        with pytest.raises(AuthorityRequestMalformed, match="upper"):
            keys.compare_dealer(request)  # type: ignore[misc]
    with pytest.raises(ModeSetupInvalid, match="comparison dealer"):
        type(keys)(
            secrets=keys.secrets,
            helper=keys.helper,
            dealer=keys.dealer,
            dealer_key=keys.dealer_key,
            channel_key=keys.channel_key,
            signing_key=keys.signing_key,
        ).deal_compare(round_id=1, tensor="c3", count=1, upper=1)


def test_shared_bits_become_counts_without_opening_a_bit() -> None:
    """XOR-shared bits -> additive shares (one Beaver product b0 b1 each) -> counts."""
    bits = np.array([True, False, True])  # pairs (0, 1), (0, 2), (1, 2)
    b0 = np.array([True, True, False])
    b1 = b0 ^ bits
    key = ShareMacKey.derive(bytes(range(40)), recipient="channel")
    triples = deal_triples(3, label=ShareLabel(round_id=1, participant_id="beaver", tensor="b"))
    (x0, y0), (x1, y1) = bit_factors(b0, party=0), bit_factors(b1, party=1)
    z0, z1 = secure_multiply((x0, x1), (y0, y1), triples, channel_key=key)
    c0 = count_shares(arithmetic_bits(b0, z0), members=3)
    c1 = count_shares(arithmetic_bits(b1, z1), members=3)
    assert open_counts(c0, c1, members=3) == [1, 2, 1]
    assert not np.array_equal(c0, [1, 2, 1])  # one side's shares are not the counts
    with pytest.raises(ScoringInvalid, match="leave"):
        open_counts(c0, c1 + np.uint64(5), members=3)
    with pytest.raises(ScoringInvalid, match="bit shares for 3 pairs"):
        count_shares(np.zeros(2, dtype=np.uint64), members=3)

"""Shares mode: the release plan's ``copies`` step, counts opened, no distance or pair bit.

Near-duplicate detection (FoolsGold, Fung et al., RAID 2020) on additive shares.
For every pair ``j < k`` of the copy set both servers hold, after one batch of
Beaver products (Beaver, CRYPTO 1991) on their local shares of ``x_j - x_k``,
additive shares of ``D_jk = sum_{i,c} (x_j - x_k)^2`` with ``2f`` fractional
bits, exactly ``N 2^{2f} d_jk`` with ``d_jk = mean_i ||p_j,i - p_k,i||^2`` (the
distance the ckks and plaintext modes compute, on the same normalisation). The
distance is never opened, and neither is a pair's bit: the range check of
:mod:`crypto.shares.range_check` with one verdict per value
(``RangeSpec(lower=0, upper=tau N 2^{2f}, each=True)``, ``keep_shared``) leaves
each server with its XOR share of every bit ``d_jk <= tau``; one Beaver product
per pair converts it to an additive share (``b = b0 + b1 - 2 b0 b1``, the
product of the two servers' private bits), each server sums its shares per
participant, and only the counts are opened, to both servers: the same release
as the ckks mode's.

The threshold ``tau = max(theta x typical, floor)`` (``theta = 0.25``, floor
``10^-2``) is the one the plaintext and ckks modes use, from values both servers
already opened: the typical distance is the smaller of the mean pair distance
within the round's robust subset ``H`` (``2 h/(h-1) tr(Sigma_H)`` of the opened
moments, exact) and ``2 (C-1)`` times the median final score over ``||W||_F^2``
(:func:`~secure_fed.secure.scoring.evidence.round_typical`). Far uploads, outside
``H``, move neither; a colluder inside ``H`` widens ``Sigma_H`` but not the second.
The earlier estimate, ``2K/(K-1)`` times the median ranking score, did not keep a
far minority out (three far colluders of ten raised it about fivefold and honest
uploads were counted as copies; now tests/secure_fed/secure/modes/
test_copies_rule_modes.py). Without a ranking pass the threshold is the floor.
Each server derives ``tau`` from its own plan tracker, so the aggregator cannot
choose it for the helper.

Messages are ``helper_request`` frames with ``op: "copies"``: the first names
the uploads (the helper derives the pairs, their order, the threshold and the
row count) and carries the helper's dealt Beaver triples and comparison
material and the aggregator's Beaver opening; the helper answers with its
Beaver opening and its comparison message 0; then one request per comparison
message; then ``stage: "convert"`` (the helper's triples for the bit conversion and
the aggregator's opening; the helper answers with its opening) and ``stage:
"count"`` (the aggregator's count shares; the helper opens the counts, records
the release, and answers with its count shares and the counts).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from typing import Protocol

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    BeaverParty,
    RangeCheckParty,
    RangeMaterial,
    ShareLabel,
    ShareMacKey,
    TripleShare,
)
from crypto.shares.linear import sum_axis
from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, ScoringInvalid
from secure_fed.secure.computation.share_ops import CODEC
from secure_fed.secure.computation.share_range import COMPARE_PARTICIPANT, compare_spec
from secure_fed.secure.protocol.vocabulary import HelperOp, Key, Step
from secure_fed.secure.release_plan import PlanTracker
from secure_fed.wire import HELPER_REPLY, decode_frame

__all__ = [
    "check_distance_room",
    "copies_threshold",
    "arithmetic_bits",
    "bit_factors",
    "copies_upper",
    "count_copies",
    "count_shares",
    "distance_factors",
    "distance_sums",
    "open_counts",
    "pair_indices",
    "run_copies",
    "typical_distance",
]

_SIGNED_BITS = 62
_MAX_UPPER = (1 << 62) - 1


def pair_indices(count: int) -> list[tuple[int, int]]:
    """Every pair ``a < b`` of ``count`` positions, in the order both servers use."""
    return list(combinations(range(count), 2))


def check_distance_room(values: int) -> None:
    """Refuse uploads whose worst-case ``D_jk`` could wrap the ring.

    ``|x_j - x_k| <= 2 B 2^f`` per value, so ``D_jk <= values (2 B 2^f)^2`` must
    stay below ``2^62`` (it is then exact and non-negative).

    Raises
    ------
    ScoringInvalid
        If ``values`` (``N C``) is too large for the 64-bit ring.
    """
    worst = 2.0 * CODEC.clip_bound * 2.0**CODEC.frac_bits
    if math.log2(values) + 2 * math.log2(worst) >= _SIGNED_BITS:
        raise ScoringInvalid(f"pair distances over {values} values could wrap the ring")


def distance_factors(shares: Sequence[np.ndarray]) -> np.ndarray:
    """Return this party's shares of ``x_j - x_k`` per pair (flat, :func:`pair_indices` order)."""
    flat = [np.asarray(s, dtype=np.uint64).reshape(-1) for s in shares]
    return np.concatenate([flat[a] - flat[b] for a, b in pair_indices(len(flat))])


def distance_sums(squares: np.ndarray, *, pairs: int) -> np.ndarray:
    """Sum the squared differences per pair: this party's share of each ``D_jk``."""
    return sum_axis(np.asarray(squares, dtype=np.uint64).reshape(pairs, -1), axis=1)


def typical_distance(tracker: PlanTracker) -> float:
    """Return the round's typical pair distance as the tracker recorded it (0 before, unranked).

    :func:`~secure_fed.secure.scoring.evidence.round_typical` of the opened
    moments, final scores and whitening.
    """
    return tracker.copies_typical or 0.0


def copies_threshold(tracker: PlanTracker) -> float:
    """``tau = max(theta x typical, floor)``: a pair within it is a near-duplicate (every mode)."""
    return tracker.copies_threshold()


def copies_upper(tracker: PlanTracker) -> int:
    """``floor(tau N 2^{2f})``: the comparison's public upper bound on ``D_jk``."""
    scale = tracker.plan.num_samples * 2.0 ** (2 * CODEC.frac_bits)
    return min(_MAX_UPPER, math.floor(copies_threshold(tracker) * scale))


def bit_factors(bits: np.ndarray, *, party: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the Beaver inputs of ``b0 b1``: party 0 shares ``(b0, 0)``, party 1 ``(0, b1)``."""
    own = np.asarray(bits, dtype=bool).astype(np.uint64)
    zero = np.zeros_like(own)
    return (own, zero) if party == 0 else (zero, own)


def arithmetic_bits(bits: np.ndarray, product: np.ndarray) -> np.ndarray:
    """Return this party's additive share of ``b0 xor b1``: ``b_i - 2 [b0 b1]_i``."""
    own = np.asarray(bits, dtype=bool).astype(np.uint64)
    return own - np.uint64(2) * np.asarray(product, dtype=np.uint64)


def count_shares(bit_shares: np.ndarray, *, members: int) -> np.ndarray:
    """Sum each member's pair bits (additive shares, :func:`pair_indices` order): local."""
    shares = np.asarray(bit_shares, dtype=np.uint64)
    pairs = pair_indices(members)
    if shares.shape != (len(pairs),):
        raise ScoringInvalid(f"{shares.size} bit shares for {len(pairs)} pairs")
    out = np.zeros(members, dtype=np.uint64)
    for column in (0, 1):  # wraps mod 2^64 like every share (np.add.at does not warn)
        np.add.at(out, np.array([p[column] for p in pairs], dtype=np.int64), shares)
    return out


def open_counts(mine: np.ndarray, theirs: np.ndarray, *, members: int) -> list[int]:
    """Open both servers' count shares: one integer in ``[0, members)`` each.

    Raises
    ------
    ScoringInvalid
        If the shares have the wrong shape or a count leaves ``[0, members)``.
    """
    a, b = np.asarray(mine, dtype=np.uint64), np.asarray(theirs, dtype=np.uint64)
    if a.shape != (members,) or b.shape != (members,):
        raise ScoringInvalid(f"count shares of shapes {a.shape}, {b.shape} for {members} members")
    counts = [int(v) for v in (a + b)]
    if not all(0 <= c < members for c in counts):
        raise ScoringInvalid(f"opened near-duplicate counts leave [0, {members})")
    return counts


def count_copies(ids: Sequence[str], bits: Sequence[bool]) -> dict[str, int]:
    """Near-duplicates per id from one bit per pair (:func:`pair_indices` order).

    Raises
    ------
    ScoringInvalid
        If there is not one bit per pair.
    """
    pairs = pair_indices(len(ids))
    if len(bits) != len(pairs):
        raise ScoringInvalid(f"{len(bits)} bits for {len(pairs)} pairs")
    counts = dict.fromkeys(ids, 0)
    for (a, b), near in zip(pairs, bits, strict=True):
        if near:
            counts[ids[a]] += 1
            counts[ids[b]] += 1
    return counts


class _Keys(Protocol):
    """What the aggregator's side needs of ``SharesKeys``."""

    @property
    def helper(self) -> Callable[[bytes], bytes]: ...

    @property
    def dealer_key(self) -> ShareMacKey: ...

    @property
    def channel_key(self) -> ShareMacKey: ...

    def tagged(self, header: Mapping[str, object], payload: bytes, *, round_id: int) -> bytes: ...

    def deal(self, *, round_id: int, tensor: str, count: int) -> tuple[bytes, bytes]: ...

    def deal_compare(
        self, *, round_id: int, tensor: str, count: int, upper: int
    ) -> tuple[bytes, bytes]: ...


def _request(
    keys: _Keys, header: dict[str, object], *parts: bytes, round_id: int
) -> tuple[dict[str, object], list[bytes]]:
    header = {
        **header,
        Key.OP: HelperOp.COPIES,
        Key.ROUND_ID: round_id,
        "parts": [len(p) for p in parts],
    }
    reply_head, payload = decode_frame(
        keys.helper(keys.tagged(header, b"".join(parts), round_id=round_id)), HELPER_REPLY
    )
    if reply_head.get(Key.STEP) != Step.COPIES or reply_head.get("round_id") != round_id:
        raise OpeningRefused(f"helper reply does not answer the copies step of round {round_id}")
    sizes = reply_head.get("parts", [len(payload)])
    if not isinstance(sizes, list) or sum(int(s) for s in sizes) != len(payload):
        raise OpeningRefused("helper reply parts do not add up")
    out, pos = [], 0
    for size in sizes:
        out.append(payload[pos : pos + int(size)])
        pos += int(size)
    return reply_head, out


def run_copies(
    keys: _Keys,
    *,
    uids: Sequence[str],
    shares: Sequence[np.ndarray],
    tracker: PlanTracker,
    round_id: int,
) -> tuple[list[int], dict[str, object]]:
    """Run the copies step with the helper (the aggregator's side); return the counts.

    ``uids`` and ``shares`` are the copy set's uploads in sorted participant order.
    Returns the opened counts (one per upload, in that order) and the helper's
    last reply header (its counts).

    Raises
    ------
    OpeningRefused, AuthorityRequestMalformed, ScoringInvalid
        If the helper refuses, its messages or the dealt material are refused, or
        the opened counts are not counts.
    """
    members = len(shares)
    pairs = len(pair_indices(members))
    check_distance_room(int(np.asarray(shares[0]).size))
    x = distance_factors(shares)
    tag = secrets.token_hex(6)
    tensor, check, convert = f"copies-{tag}", f"copies-{tag}-cmp", f"copies-{tag}-b2a"
    upper = copies_upper(tracker)
    try:
        beaver, triples_h = _beaver(keys, round_id, tensor, x.size)
        opening = beaver.open(x, x)
        cmp_a, cmp_h = keys.deal_compare(round_id=round_id, tensor=check, count=pairs, upper=upper)
        material = RangeMaterial.parse(
            cmp_a,
            key=keys.dealer_key,
            label=ShareLabel(round_id=round_id, participant_id=COMPARE_PARTICIPANT, tensor=check),
            party=0,
            count=pairs,
            spec=compare_spec(upper),
        )
        head: dict[str, object] = {"uids": list(uids), "tensor": tensor, "check": check}
        _, (theirs_beaver, theirs) = _request(
            keys, head, triples_h, cmp_h, opening, round_id=round_id
        )
        sums = distance_sums(beaver.finish(theirs_beaver), pairs=pairs)
        party = RangeCheckParty(material=material, channel_key=keys.channel_key, keep_shared=True)
        mine: bytes | None = party.start(sums)
        while mine is not None:
            _, replies = _request(keys, {"check": check}, mine, round_id=round_id)
            mine = party.advance(theirs)
            theirs = replies[0] if replies else b""
        bits = party.verdict_shares
        convert_party, triples_b = _beaver(keys, round_id, convert, pairs)
        head = {"check": check, "stage": "convert", "tensor": convert}
        _, (theirs_b2a,) = _request(
            keys,
            head,
            triples_b,
            convert_party.open(*bit_factors(bits, party=0)),
            round_id=round_id,
        )
        product = convert_party.finish(theirs_b2a)
    except CryptoError as exc:
        raise AuthorityRequestMalformed(f"copies step refused: {exc}") from exc
    counts_a = count_shares(arithmetic_bits(bits, product), members=members)
    raw = counts_a.astype("<u8").tobytes()
    last, (theirs_counts,) = _request(
        keys, {"check": check, "stage": "count"}, raw, round_id=round_id
    )
    helper_counts = np.frombuffer(theirs_counts, dtype="<u8").astype(np.uint64)
    return open_counts(counts_a, helper_counts, members=members), last


def _beaver(keys: _Keys, round_id: int, tensor: str, count: int) -> tuple[BeaverParty, bytes]:
    """Deal ``count`` triples under ``tensor``; return this side's party and the helper's blob."""
    mine, helper = keys.deal(round_id=round_id, tensor=tensor, count=count)
    label = ShareLabel(round_id=round_id, participant_id="beaver", tensor=tensor)
    triples = TripleShare.parse(
        mine, key=keys.dealer_key, label=label, party=0, seeded=True, count=count
    )
    return BeaverParty(triples=triples, channel_key=keys.channel_key), helper

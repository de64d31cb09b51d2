"""Shares mode: the release plan's ``copies`` step, one opened bit per pair, no distance.

Near-duplicate detection (FoolsGold, Fung et al., RAID 2020) on additive shares.
For every pair ``j < k`` of the copy set both servers hold, after one batch of
Beaver products (Beaver, CRYPTO 1991) on their local shares of ``x_j - x_k``,
additive shares of ``D_jk = sum_{i,c} (x_j - x_k)^2`` with ``2f`` fractional
bits, exactly ``N 2^{2f} d_jk`` with ``d_jk = mean_i ||p_j,i - p_k,i||^2`` (the
distance the ckks and plaintext modes compute, on the same normalisation). The
distance is never opened: the range check of :mod:`crypto.shares.range_check`
with one verdict per value (``RangeSpec(lower=0, upper=tau N 2^{2f}, each=True)``)
opens only the bit ``d_jk <= tau`` per pair, to both servers, which count the
near-duplicates of each participant from the bits.

The threshold ``tau = max(theta x typical, floor)`` (``theta = 0.25``, floor
``10^-2``) takes its typical distance from values both servers already opened:
``2K/(K-1)`` times the median of the round's ranking scores (for the mean over
pairs, ``mean d_jk = 2K/(K-1) mean_k r_k`` exactly; the median keeps a far
minority from inflating it). The plaintext and ckks modes take the median over
participants of each one's median pair distance, which needs the hidden
distances sorted; the two estimates agree on copies and on distinct uploads and
may differ near the threshold. Without a ranking pass the threshold is the floor.
Each server derives ``tau`` from its own plan tracker, so the aggregator cannot
choose it for the helper.

Messages are ``helper_request`` frames with ``op: "copies"``: the first names
the uploads (the helper derives the pairs, their order, the threshold and the
row count) and carries the helper's dealt Beaver triples and comparison
material and the aggregator's Beaver opening; the helper answers with its
Beaver opening and its comparison message 0; then one request per comparison
message, the last reply carrying the helper's counts.
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
from secure_fed.secure.modes.share_ops import CODEC
from secure_fed.secure.modes.share_range import COMPARE_PARTICIPANT, compare_spec
from secure_fed.secure.release_plan import PlanTracker
from secure_fed.secure.scoring.evidence import DUPLICATE_FLOOR, DUPLICATE_THETA
from secure_fed.wire import HELPER_REPLY, decode_frame

__all__ = [
    "check_distance_room",
    "copies_threshold",
    "copies_upper",
    "count_copies",
    "distance_factors",
    "distance_sums",
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
    """``2K/(K-1)`` times the median ranking score of the roster (0 without a ranking pass)."""
    scores = list(tracker.ranking_scores.values())
    if len(scores) < 2:
        return 0.0
    k = len(scores)
    return 2.0 * k / (k - 1) * max(0.0, float(np.median(scores)))


def copies_threshold(tracker: PlanTracker) -> float:
    """``tau = max(theta x typical, floor)``: a pair within it is a near-duplicate."""
    return max(DUPLICATE_THETA * typical_distance(tracker), DUPLICATE_FLOOR)


def copies_upper(tracker: PlanTracker) -> int:
    """``floor(tau N 2^{2f})``: the comparison's public upper bound on ``D_jk``."""
    scale = tracker.plan.num_samples * 2.0 ** (2 * CODEC.frac_bits)
    return min(_MAX_UPPER, math.floor(copies_threshold(tracker) * scale))


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
    header = {**header, "op": "copies", "round_id": round_id, "parts": [len(p) for p in parts]}
    reply_head, payload = decode_frame(
        keys.helper(keys.tagged(header, b"".join(parts), round_id=round_id)), HELPER_REPLY
    )
    if reply_head.get("step") != "copies" or reply_head.get("round_id") != round_id:
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
) -> tuple[list[bool], dict[str, object]]:
    """Run the copies step with the helper (the aggregator's side); return the pair bits.

    ``uids`` and ``shares`` are the copy set's uploads in sorted participant order.
    Returns the opened bits (one per pair) and the helper's last reply header (its
    counts).

    Raises
    ------
    OpeningRefused, AuthorityRequestMalformed
        If the helper refuses, or its messages or the dealt material are refused.
    """
    pairs = len(pair_indices(len(shares)))
    check_distance_room(int(np.asarray(shares[0]).size))
    x = distance_factors(shares)
    tag = secrets.token_hex(6)
    tensor, check = f"copies-{tag}", f"copies-{tag}-cmp"
    upper = copies_upper(tracker)
    try:
        triples_a, triples_h = keys.deal(round_id=round_id, tensor=tensor, count=x.size)
        label = ShareLabel(round_id=round_id, participant_id="beaver", tensor=tensor)
        triples = TripleShare.parse(
            triples_a, key=keys.dealer_key, label=label, party=0, seeded=True, count=x.size
        )
        beaver = BeaverParty(triples=triples, channel_key=keys.channel_key)
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
        party = RangeCheckParty(material=material, channel_key=keys.channel_key)
        mine: bytes | None = party.start(sums)
        last: dict[str, object] = {}
        while mine is not None:
            last, replies = _request(keys, {"check": check}, mine, round_id=round_id)
            mine = party.advance(theirs)
            theirs = replies[0] if replies else b""
    except CryptoError as exc:
        raise AuthorityRequestMalformed(f"copies step refused: {exc}") from exc
    return [bool(b) for b in party.verdicts], last

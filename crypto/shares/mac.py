"""Authenticated additive shares over Z_2^64: SPDZ-style MACs, input masks, checked openings.

Every authenticated value ``x`` is held as ``[x]`` (``x_0 + x_1 = x``) and, for each
of :data:`MAC_LANES` independent MAC keys ``alpha_l``, as ``[alpha_l x]``; the key
itself is additively shared (``alpha_l = alpha_{l,0} + alpha_{l,1}``, each server
holds one share, :class:`MacKeyShare`), so neither server knows it (Damgard,
Pastro, Smart and Zakarias, CRYPTO 2012; for rings, Cramer, Damgard, Escudero,
Scholl and Xing, CRYPTO 2018, "SPDZ2k"). MACs are linear, so any public integer
linear map (a weighted sum with integer-encoded weights) applies to the value and
MAC shares alike, locally.

Input. The dealer shares a secret with each participant, derives that participant's
mask ``r`` of an upload from it (:func:`participant_mask`) and deals the servers
``[r]`` and ``[alpha_l r]``: the helper's halves are a PRG of a secret it shares
with the dealer (:func:`helper_mask`, so nothing of them crosses the aggregator),
the aggregator's the explicit rest (:meth:`InputMaskDealer.deal`). The participant
sends ``d = x - r``; the servers set ``[x] = [r] + d`` (party 0 adds ``d``) and
``[alpha_l x] = [alpha_l r] + alpha_{l,i} d`` (:func:`authenticate`).

Opening (:class:`MacOpening`). Both parties exchange their shares of the value
``y`` (a vector of ``n``), so both hold the opened ``y'``; a coin toss fixes fresh
coefficients ``rho_l`` (party 0 commits to its seed, party 1 sends its own, party 0
opens; each seed from :mod:`secrets`); each party computes
``sigma_{l,i} = sum_j rho_{l,j} m_{l,i,j} - alpha_{l,i} sum_j rho_{l,j} y'_j``;
party 0 commits to its ``sigma``, party 1 sends its own, party 0 opens, and both
accept only if ``sigma_{l,0} + sigma_{l,1} = 0`` for every lane and every opened
value lies in ``[-bound, bound]`` (as a signed 64-bit integer).

Soundness (why two 64-bit lanes give ``2^-40`` for values of up to 33 bits). Let an
adversary add ``e`` to the opened values (any vector, ``e != 0``) and anything it
likes to its MAC shares and to its ``sigma`` (fixed by its commitment before it sees
the honest ``sigma``, and chosen knowing ``rho`` and its own key share). The check
of lane ``l`` passes iff ``alpha_{l,h} E_l = c`` for a ``c`` the adversary knows,
where ``alpha_{l,h}`` is the honest party's key share (uniform in Z_2^64 and
unknown to it) and ``E_l = sum_j rho_{l,j} e_j``. (i) The bound check accepts only
``|y'_j| <= bound`` with honest ``|y_j| <= bound``, so every accepted ``e_j`` has
``|e_j| <= 2 bound < 2^b`` and, when non-zero, 2-adic valuation ``v < b``.
(ii) With ``v`` the least valuation among the ``e_j`` and ``rho`` uniform,
``Pr[val(E_l) >= v + t] <= 2^-t`` (the coefficient of one ``e_j`` of valuation
``v`` is uniform). (iii) For ``val(E_l) = w < 64``, ``alpha_{l,h} E_l`` is uniform on
``2^{64-w}`` values: ``Pr[pass | w] <= 2^{-(64-w)}``; ``E_l = 0`` (``w = 64``) has
probability at most ``2^{-(64-v)}``. Summing, ``Pr[lane passes] <= (65 - v)
2^{-(64-v)} <= (66 - b) 2^{-(65-b)}``. The lanes use independent keys and
independent coefficients, so ``Pr[both pass] <= ((66 - b) 2^{-(65-b)})^2``; for the
publication, ``b = 33`` (:data:`PUBLICATION_BITS`) gives ``(33 * 2^-32)^2 < 2^-53``,
and :func:`soundness_bits` computes the bound for any ``b`` (``>= 40`` needs
``b <= 40``). The commitments are SM3 (computationally binding and hiding), the
coefficients a ChaCha20 expansion of the tossed seed.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from crypto.errors import MacCheckFailed, ParameterInvalid
from crypto.shares import wire
from crypto.shares._ring import RingArray, check_party
from crypto.shares.prg import SEED_BYTES, ShareLabel, keystream

__all__ = [
    "MAC_LANES",
    "PUBLICATION_BITS",
    "InputMaskDealer",
    "MacKeyShare",
    "MacOpening",
    "authenticate",
    "helper_mask",
    "mask_label",
    "masked_message",
    "parse_mask",
    "participant_mask",
    "soundness_bits",
]

MAC_LANES = 2
"""Independent MAC keys per value (each a uniform element of Z_2^64)."""

PUBLICATION_BITS = 33
"""Bits of the publication's accepted range: ``|sum_k w_k x_k| < 2^32`` with ``f + 16``
fractional bits (``|x| <= 8``, ``sum w <= 1``; :data:`~crypto.shares.RING_WEIGHTS`)."""

COMMIT_BYTES = 32
_NONCE_BYTES = 32
_DOMAIN = b"secure-fed/shares/mac/v1\x00"


def soundness_bits(value_bits: int, lanes: int = MAC_LANES) -> float:
    """Return ``-log2`` of the bound on a forged opening passing (module docstring)."""
    if not 1 <= value_bits <= 63 or lanes < 1:
        raise ParameterInvalid("value_bits must lie in [1, 63] and lanes be >= 1")
    per_lane = (65 - value_bits + 1) * 2.0 ** -(65 - value_bits)
    return -lanes * math.log2(per_lane)


def mask_label(participant_id: str, upload_id: str) -> ShareLabel:
    """Return the label of one upload's input mask (round 0: uploads belong to no round yet)."""
    return ShareLabel(round_id=0, participant_id=participant_id, tensor=f"mask-{upload_id}")


def masked_message(label: ShareLabel, masked: bytes) -> bytes:
    """Return what a participant tags for the helper: the upload's label and ``d = x - r``."""
    return _DOMAIN + b"masked\x00" + label.to_bytes() + masked


def _words(seed: bytes, domain: bytes, label: ShareLabel, count: int) -> RingArray:
    stream = keystream(seed, domain, label, 8 * count)
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def participant_mask(secret: bytes, label: ShareLabel, count: int) -> RingArray:
    """Derive a participant's mask ``r`` from the secret it shares with the dealer."""
    return _words(_seed(secret), b"input-mask", label, count)


def helper_mask(secret: bytes, label: ShareLabel, count: int) -> tuple[RingArray, RingArray]:
    """Derive the helper's shares of ``r`` and ``alpha_l r`` (``[lanes, count]``)."""
    seed = _seed(secret)
    share = _words(seed, b"mask-share", label, count)
    macs = _words(seed, b"mask-macs", label, MAC_LANES * count).reshape(MAC_LANES, count)
    return share, macs


def _seed(secret: bytes) -> bytes:
    if not isinstance(secret, bytes) or len(secret) < SEED_BYTES:
        raise ParameterInvalid(f"a mask secret must be at least {SEED_BYTES} bytes")
    return hashlib.new("sm3", _DOMAIN + b"seed\x00" + secret).digest()


class MacKeyShare:
    """One server's share of the MAC keys (one uniform Z_2^64 element per lane).

    Never shown by ``repr``, never pickled; the whole key exists only in the dealer.
    """

    __slots__ = ("_lanes", "party")

    def __init__(self, *, party: int, lanes: tuple[int, ...]) -> None:
        if len(lanes) != MAC_LANES or not all(0 <= a < 1 << 64 for a in lanes):
            raise ParameterInvalid(f"a MAC key share is {MAC_LANES} elements of Z_2^64")
        self.party = check_party(party)
        self._lanes = np.array(lanes, dtype=np.uint64)

    def words(self) -> RingArray:
        """Return the share, one ``uint64`` per lane (a copy)."""
        return self._lanes.copy()

    def __repr__(self) -> str:
        return f"MacKeyShare(party={self.party}, lanes=<hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("MacKeyShare cannot be pickled")


def authenticate(
    masked: RingArray, share: RingArray, macs: RingArray, *, key: MacKeyShare
) -> tuple[RingArray, RingArray]:
    """Party ``key.party``'s ``[x]`` and ``[alpha_l x]`` from ``d = x - r`` and its mask shares."""
    d = np.asarray(masked, dtype=np.uint64).reshape(-1)
    if share.shape != d.shape or macs.shape != (MAC_LANES, d.size):
        raise ParameterInvalid("mask shares do not match the masked values")
    value = share + d if key.party == 0 else share.copy()
    return value, macs + key.words()[:, None] * d[None, :]


@dataclass(kw_only=True, repr=False)
class InputMaskDealer:
    """The dealer's half of the input masks: the whole MAC key and the mask secrets.

    Parameters
    ----------
    participants
        The secret the dealer shares with each participant (:func:`participant_mask`).
    helper_secret
        The secret it shares with the helper (:func:`helper_mask`).
    """

    participants: Mapping[str, bytes] = field(repr=False)
    helper_secret: bytes = field(repr=False)
    _alpha: RingArray = field(init=False, repr=False)
    _shares: tuple[MacKeyShare, MacKeyShare] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        share0 = np.frombuffer(secrets.token_bytes(8 * MAC_LANES), dtype="<u8").astype(np.uint64)
        share1 = np.frombuffer(secrets.token_bytes(8 * MAC_LANES), dtype="<u8").astype(np.uint64)
        self._alpha = share0 + share1
        self._shares = (
            MacKeyShare(party=0, lanes=tuple(int(a) for a in share0)),
            MacKeyShare(party=1, lanes=tuple(int(a) for a in share1)),
        )

    @classmethod
    def generate(cls, participant_ids: list[str]) -> InputMaskDealer:
        """Fresh secrets (from :mod:`secrets`) for each participant and the helper."""
        return cls(
            participants={p: secrets.token_bytes(SEED_BYTES) for p in participant_ids},
            helper_secret=secrets.token_bytes(SEED_BYTES),
        )

    def key_share(self, party: int) -> MacKeyShare:
        """Hand out server ``party``'s MAC key share (each server receives one)."""
        return self._shares[check_party(party)]

    def deal(
        self, participant_id: str, upload_id: str, count: int, *, key: wire.ShareMacKey
    ) -> bytes:
        """Deal the aggregator's ``[r]_0`` and ``[alpha_l r]_0``, tagged under ``key``.

        Raises
        ------
        ParameterInvalid
            For an unknown participant.
        """
        secret = self.participants.get(participant_id)
        if secret is None:
            raise ParameterInvalid(f"no mask secret for participant {participant_id!r}")
        label = mask_label(participant_id, upload_id)
        r = participant_mask(secret, label, count)
        share1, macs1 = helper_mask(self.helper_secret, label, count)
        macs0 = self._alpha[:, None] * r[None, :] - macs1
        payload = np.concatenate([r - share1, macs0.reshape(-1)])
        return wire.seal(
            key, kind=wire.KIND_AUTH_MASK, party=0, count=count, label=label, payload=payload
        )

    def __reduce__(self) -> NoReturn:
        raise TypeError("InputMaskDealer cannot be pickled")


def parse_mask(
    blob: bytes, *, key: wire.ShareMacKey, label: ShareLabel, count: int
) -> tuple[RingArray, RingArray]:
    """Verify and split the aggregator's mask blob into ``[r]_0`` and ``[alpha_l r]_0``."""
    frame = wire.unpack(blob, key=key, kind=wire.KIND_AUTH_MASK, party=0, label=label, count=count)
    words = frame.words()
    return words[:count], words[count:].reshape(MAC_LANES, count)


def _commit(kind: bytes, value: bytes, nonce: bytes) -> bytes:
    return hashlib.new("sm3", _DOMAIN + kind + b"\x00" + nonce + value).digest()


def _coefficients(seed0: bytes, seed1: bytes, label: ShareLabel, count: int) -> RingArray:
    seed = hashlib.new("sm3", _DOMAIN + b"toss\x00" + seed0 + seed1).digest()
    return _words(seed, b"mac-rho", label, MAC_LANES * count).reshape(MAC_LANES, count)


@dataclass(kw_only=True, repr=False, eq=False)
class MacOpening:
    """One party's side of one checked opening of ``n`` authenticated values.

    Party 0 drives: :meth:`seed_commitment` (to party 1 with its value share),
    party 1's :meth:`open` then :meth:`own_seed` (back, with its share), party 0's
    :meth:`open` and :meth:`sigma_commitment` (to party 1 with :meth:`own_seed`),
    party 1's :meth:`reveal_sigma` after :meth:`receive_seed` (back), party 0's
    :meth:`check` then :meth:`sigma_opening` (to party 1), party 1's :meth:`check`.
    Any failure raises :class:`~crypto.errors.MacCheckFailed`; a party releases
    ``opened`` only after its own :meth:`check` passed.

    Parameters
    ----------
    key
        This party's :class:`MacKeyShare`.
    share, macs
        This party's shares of the values (``[n]``) and of their MACs (``[lanes, n]``).
    label
        Names the opening (round and step), for the coefficients and messages.
    bound
        Largest accepted ``|y|`` of an opened value (as a signed integer).
    """

    key: MacKeyShare
    share: RingArray
    macs: RingArray
    label: ShareLabel
    bound: int
    opened: RingArray | None = None
    _seed: bytes = field(default_factory=lambda: secrets.token_bytes(SEED_BYTES))
    _peer_seed: bytes | None = None
    _peer_commit: bytes | None = None
    _sigma_commit: bytes | None = None
    _nonce: bytes = field(default_factory=lambda: secrets.token_bytes(_NONCE_BYTES))
    _sigma: bytes | None = None
    _peer_sigma: bytes | None = None
    _passed: bool = False

    def __post_init__(self) -> None:
        self.share = np.asarray(self.share, dtype=np.uint64).reshape(-1)
        if self.macs.shape != (MAC_LANES, self.share.size):
            raise ParameterInvalid("MAC shares do not match the value shares")
        if not 0 < self.bound < 1 << 62:
            raise ParameterInvalid("the opening's bound must lie in (0, 2^62)")

    @property
    def party(self) -> int:
        """0 (aggregator, drives the opening) or 1 (helper)."""
        return self.key.party

    def _fail(self, why: str) -> NoReturn:
        raise MacCheckFailed(f"opening {self.label.tensor!r} of round {self.label.round_id}: {why}")

    def seed_commitment(self) -> bytes:
        """Party 0's commitment to its coin-toss seed."""
        return _commit(b"seed", self._seed, b"")

    def own_seed(self) -> bytes:
        """Return the own seed (party 1 sends it at once; party 0 after party 1's)."""
        return self._seed

    def expect_seed(self, commitment: bytes) -> None:
        """Party 1 keeps party 0's seed commitment."""
        if not isinstance(commitment, bytes) or len(commitment) != COMMIT_BYTES:
            self._fail("the seed commitment is malformed")
        self._peer_commit = commitment

    def open(self, peer_share: RingArray) -> RingArray:
        """Reconstruct the values from the peer's share and check the bound."""
        peer = np.asarray(peer_share, dtype=np.uint64).reshape(-1)
        if peer.shape != self.share.shape:
            self._fail("the peer's share has another shape")
        total = self.share + peer
        bound = np.uint64(self.bound)
        if (total + bound).max(initial=0) > np.uint64(2 * self.bound):  # |signed| > bound
            self._fail("an opened value lies outside its public bound")
        self.opened = total
        return total

    def receive_seed(self, seed: bytes) -> None:
        """Take the peer's seed (party 0: party 1's; party 1: party 0's, checked)."""
        if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
            self._fail("the peer's coin-toss seed is malformed")
        if self.party == 1:
            if self._peer_commit is None or not hmac.compare_digest(
                _commit(b"seed", seed, b""), self._peer_commit
            ):
                self._fail("the aggregator's seed does not open its commitment")
        self._peer_seed = seed

    def _own_sigma(self) -> bytes:
        if self.opened is None or self._peer_seed is None:
            self._fail("sigma before the values and both seeds")
        if self._sigma is None:
            seeds = (self._seed, self._peer_seed)
            first, second = seeds if self.party == 0 else seeds[::-1]
            rho = _coefficients(first, second, self.label, self.share.size)
            combined_macs = (rho * self.macs).sum(axis=1, dtype=np.uint64)
            combined_value = (rho * self.opened[None, :]).sum(axis=1, dtype=np.uint64)
            sigma = combined_macs - self.key.words() * combined_value
            self._sigma = sigma.astype("<u8").tobytes()
        return self._sigma

    def sigma_commitment(self) -> bytes:
        """Party 0's commitment to its check values."""
        return _commit(b"sigma", self._own_sigma(), self._nonce)

    def reveal_sigma(self) -> bytes:
        """Party 1's check values (sent once it holds party 0's commitment)."""
        if self._sigma_commit is None:
            self._fail("the aggregator committed to no check value")
        return self._own_sigma()

    def expect_sigma(self, commitment: bytes) -> None:
        """Party 1 keeps party 0's commitment to its check values."""
        if self._peer_seed is None:
            self._fail("a check-value commitment before the seeds")
        if not isinstance(commitment, bytes) or len(commitment) != COMMIT_BYTES:
            self._fail("the check-value commitment is malformed")
        self._sigma_commit = commitment

    def sigma_opening(self) -> bytes:
        """Party 0's check values and commitment nonce (sent after its own check)."""
        if not self._passed:
            self._fail("party 0 opens its check values only after its own check")
        return self._own_sigma() + self._nonce

    def check(self, peer: bytes) -> None:
        """Accept the opening: the peer's check values (and, for party 1, their opening).

        Raises
        ------
        MacCheckFailed
            If the values sum to anything but zero in a lane or do not open the commitment.
        """
        size = 8 * MAC_LANES
        if self.party == 1:
            if not isinstance(peer, bytes) or len(peer) != size + _NONCE_BYTES:
                self._fail("the aggregator's check values are malformed")
            theirs, nonce = peer[:size], peer[size:]
            if self._sigma_commit is None or not hmac.compare_digest(
                _commit(b"sigma", theirs, nonce), self._sigma_commit
            ):
                self._fail("the aggregator's check values do not open its commitment")
        else:
            if not isinstance(peer, bytes) or len(peer) != size:
                self._fail("the helper's check values are malformed")
            theirs = peer
        mine = np.frombuffer(self._own_sigma(), dtype="<u8").astype(np.uint64)
        total = mine + np.frombuffer(theirs, dtype="<u8").astype(np.uint64)
        if not hmac.compare_digest(total.astype("<u8").tobytes(), bytes(size)):
            self._fail("the MAC check failed: a share of the opened values was offset")
        self._passed = True

    @property
    def passed(self) -> bool:
        """True once this party's :meth:`check` accepted the opening."""
        return self._passed

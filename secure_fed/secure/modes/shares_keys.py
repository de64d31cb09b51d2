"""The ``shares`` mode's enrolment, key material and participant encoder.

:class:`SharesEnrolment` and :class:`SharesKeys` are what a participant and the
aggregator hold (with :class:`Dealer`, the aggregator's byte channel to the
triple dealer); :class:`SharesEncoder` splits a participant's matrix into the
aggregator's share and the helper's sealed seed. The aggregator's side of the
helper channel is :mod:`secure_fed.secure.modes.shares_channel`. Importable from
:mod:`secure_fed.secure.modes.shares`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

import numpy as np

from crypto.shares import (
    RING_PREDICTIONS,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    split_with_seed,
)
from crypto.shares.mac import MacKeyShare, mask_label, masked_message, participant_mask
from crypto.sm import SM4GCM
from secure_fed.errors import AggregationInvalid, ModeSetupInvalid
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.computation.share_range import RangeDealer
from secure_fed.secure.mode import UploadEncoder
from secure_fed.secure.protocol.authority_requests import compare_request, deal_request
from secure_fed.secure.protocol.helper_wire import helper_request, seal_key
from secure_fed.secure.protocol.vocabulary import AuthorityOp
from secure_fed.secure.server_auth import ChannelKey, ServerSigningKey
from secure_fed.wire import SHARES_UPLOAD, encode_frame

__all__ = ["CODEC", "SECRET_BYTES", "Dealer", "SharesEncoder", "SharesEnrolment", "SharesKeys"]


CODEC = RING_PREDICTIONS
SECRET_BYTES = 32
Channel = Callable[[bytes], bytes]


class Dealer(Protocol):
    """Byte channel to the triple dealer: a signed deal request in, two blobs out.

    The request is built by :func:`~secure_fed.secure.protocol.authority_requests.deal_request`
    with the aggregator's SM2 key; the reply is (blob for the aggregator, blob for
    the helper), as :meth:`KeyAuthority.handle_deal` returns it.
    """

    def __call__(self, request: bytes) -> tuple[bytes, bytes]:
        """Deal the triples a signed ``request`` asks for."""
        ...


def _secret(name: str, value: object) -> bytes:
    if not isinstance(value, bytes) or len(value) < SECRET_BYTES:
        raise ModeSetupInvalid(f"{name} must be at least {SECRET_BYTES} bytes")
    return value


@dataclass(frozen=True, kw_only=True)
class SharesEnrolment:
    """One participant's enrolment: a secret shared with the aggregator, one with the helper.

    With authenticated shares (:mod:`crypto.shares.mac`) also ``dealer_secret``, shared
    with the dealer, from which the participant derives each upload's input mask.
    Never shown by ``repr`` and never pickled.
    """

    participant_id: str
    aggregator_secret: bytes = field(repr=False)
    helper_secret: bytes = field(repr=False)
    dealer_secret: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.participant_id, str) or not self.participant_id:
            raise ModeSetupInvalid(
                f"participant_id must be a non-empty string, got {self.participant_id!r}"
            )
        _secret("aggregator_secret", self.aggregator_secret)
        _secret("helper_secret", self.helper_secret)
        if self.dealer_secret is not None:
            _secret("dealer_secret", self.dealer_secret)

    @classmethod
    def generate(
        cls, participant_id: str, *, dealer_secret: bytes | None = None
    ) -> SharesEnrolment:
        """Fresh random secrets (from :mod:`secrets`) for ``participant_id``."""
        return cls(
            participant_id=participant_id,
            aggregator_secret=secrets.token_bytes(SECRET_BYTES),
            helper_secret=secrets.token_bytes(SECRET_BYTES),
            dealer_secret=dealer_secret,
        )

    def __reduce__(self) -> NoReturn:
        raise TypeError("SharesEnrolment cannot be pickled")


@dataclass(frozen=True, kw_only=True)
class SharesKeys:
    """What the shares aggregator (party 0) holds. Never pickled.

    Parameters
    ----------
    secrets
        Each participant's enrolment secret shared with the aggregator.
    helper
        Bytes channel to :meth:`HelperParty.handle`.
    dealer
        Byte channel to the Beaver-triple dealer (the key authority's
        :meth:`~KeyAuthority.handle_deal` with the MAC keys bound); it deals only
        for requests signed with ``signing_key``.
    dealer_key, channel_key
        MAC keys of the dealer's blobs to the aggregator and of the helper channel.
    range_dealer
        Byte channel to the dealer of the range check every upload passes at load
        (the key authority's :meth:`~KeyAuthority.handle_deal_range`); it deals only
        for requests signed with ``signing_key``.
    compare_dealer
        Byte channel to the dealer of the copies step's per-pair comparison (the
        key authority's :meth:`~KeyAuthority.handle_deal_compare`), signed likewise.
    request_key
        HMAC-SM3 key of the aggregator's requests to the helper (it tags every
        request: plan, load, range, linear, open, finish; the helper serves none
        without it).
    signing_key
        The aggregator's SM2 key; it signs every deal request to the key authority.
    mac_key
        The aggregator's share of the MAC keys (authenticated shares,
        :mod:`crypto.shares.mac`); ``None``: shares are not authenticated.
    mask_dealer
        Byte channel to the dealer of the uploads' input masks (the key authority's
        :meth:`~secure_fed.secure.parties.dealer.Dealer.handle_deal_masks`), signed.
    audit
        Where the aggregator records a failed MAC check (``access.denied``).
    """

    secrets: Mapping[str, bytes] = field(repr=False)
    helper: Channel
    dealer: Dealer
    dealer_key: ShareMacKey
    channel_key: ShareMacKey
    range_dealer: RangeDealer | None = None
    compare_dealer: RangeDealer | None = None
    request_key: ChannelKey | None = field(default=None, repr=False)
    signing_key: ServerSigningKey | None = field(default=None, repr=False)
    mac_key: MacKeyShare | None = field(default=None, repr=False)
    mask_dealer: Channel | None = None
    audit: AuditSink | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.secrets:
            raise ModeSetupInvalid("secrets must name at least one participant")
        for pid, secret in self.secrets.items():
            _secret(f"secret of {pid!r}", secret)
        if not callable(self.helper) or not callable(self.dealer):
            raise ModeSetupInvalid("helper and dealer must be callables (byte channels)")
        for name in ("dealer_key", "channel_key"):
            if not isinstance(getattr(self, name), ShareMacKey):
                raise ModeSetupInvalid(f"{name} must be a ShareMacKey")
        if self.request_key is not None and not isinstance(self.request_key, ChannelKey):
            raise ModeSetupInvalid("request_key must be a ChannelKey")
        if self.signing_key is not None and not isinstance(self.signing_key, ServerSigningKey):
            raise ModeSetupInvalid("signing_key must be a ServerSigningKey")
        if self.mac_key is not None and (
            not isinstance(self.mac_key, MacKeyShare) or self.mac_key.party != 0
        ):
            raise ModeSetupInvalid("mac_key must be party 0's MacKeyShare")
        if (self.mac_key is None) != (self.mask_dealer is None):
            raise ModeSetupInvalid("mac_key and mask_dealer come together (authenticated shares)")

    def tagged(self, header: Mapping[str, object], payload: bytes, *, round_id: int) -> bytes:
        """Tag a helper request with :attr:`request_key` (bound to its op and ``round_id``).

        Raises
        ------
        ModeSetupInvalid
            If no request key is configured.
        """
        if self.request_key is None:
            raise ModeSetupInvalid("request_key is needed to send requests to the helper")
        return helper_request(header, payload, key=self.request_key, round_id=round_id)

    def deal(self, *, round_id: int, tensor: str, count: int) -> tuple[bytes, bytes]:
        """Ask the dealer for ``count`` triples labelled ``(round_id, tensor)``, signed.

        Raises
        ------
        ModeSetupInvalid
            If no signing key is configured.
        """
        if self.signing_key is None:
            raise ModeSetupInvalid("signing_key is needed to ask the key authority for triples")
        return self.dealer(
            deal_request(round_id=round_id, tensor=tensor, count=count, signer=self.signing_key)
        )

    def deal_range(self, *, round_id: int, tensor: str, count: int) -> tuple[bytes, bytes]:
        """Ask for one upload's range-check material (``round_id``: the current round), signed.

        Raises
        ------
        ModeSetupInvalid
            If no range dealer or no signing key is configured.
        """
        if self.range_dealer is None or self.signing_key is None:
            raise ModeSetupInvalid("a range dealer and signing_key are needed for range checks")
        request = deal_request(
            round_id=round_id,
            tensor=tensor,
            count=count,
            signer=self.signing_key,
            purpose=AuthorityOp.RANGE,
        )
        return self.range_dealer(request)

    def deal_masks(
        self, *, round_id: int, participant_id: str, upload_id: str, count: int
    ) -> bytes:
        """Ask for the aggregator's share of one upload's input mask and its MACs, signed.

        Raises
        ------
        ModeSetupInvalid
            If no mask dealer or no signing key is configured.
        """
        if self.mask_dealer is None or self.signing_key is None:
            raise ModeSetupInvalid("a mask dealer and signing_key are needed for input masks")
        request = deal_request(
            round_id=round_id,
            tensor=json.dumps([participant_id, upload_id]),
            count=count,
            signer=self.signing_key,
            purpose=AuthorityOp.MASKS,
        )
        return self.mask_dealer(request)

    def deal_compare(
        self, *, round_id: int, tensor: str, count: int, upper: int
    ) -> tuple[bytes, bytes]:
        """Ask for ``count`` per-value comparisons with ``[0, upper]`` (the copies step), signed.

        Raises
        ------
        ModeSetupInvalid
            If no comparison dealer or no signing key is configured.
        """
        if self.compare_dealer is None or self.signing_key is None:
            raise ModeSetupInvalid("a comparison dealer and signing_key are needed for copies")
        request = compare_request(
            round_id=round_id, tensor=tensor, count=count, upper=upper, signer=self.signing_key
        )
        return self.compare_dealer(request)

    def __reduce__(self) -> NoReturn:
        raise TypeError("SharesKeys cannot be pickled")


class SharesEncoder(UploadEncoder):
    """Participant side: encode, split, tag the aggregator's share, seal the helper's seed."""

    def __init__(self, *, shape: tuple[int, int], bound: float, enrolment: SharesEnrolment) -> None:
        if not isinstance(enrolment, SharesEnrolment):
            raise ModeSetupInvalid("enrolment must be a SharesEnrolment")
        if bound > CODEC.clip_bound:
            raise ModeSetupInvalid(f"bound {bound} exceeds the ring codec's {CODEC.clip_bound}")
        self.shape, self.bound, self.pid = shape, bound, enrolment.participant_id
        self._agg_key = ShareMacKey.derive(enrolment.aggregator_secret, recipient="aggregator")
        self._helper_key = ShareMacKey.derive(enrolment.helper_secret, recipient="helper")
        self._seal = SM4GCM(seal_key(enrolment.helper_secret))
        self._mask_secret = enrolment.dealer_secret

    def encode(self, predictions: np.ndarray) -> bytes:
        """Return ``SFSH`` payload bytes: aggregator share frame + sealed helper seed frame."""
        arr = np.asarray(predictions, dtype=np.float64)
        if arr.shape != tuple(self.shape):
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        uid = secrets.token_hex(8)
        label = ShareLabel(round_id=0, participant_id=self.pid, tensor=f"pred-{uid}")
        ring = CODEC.encode_clipped(np.clip(arr, -self.bound, self.bound)).reshape(-1)
        f = CODEC.frac_bits
        if self._mask_secret is not None:  # authenticated: d = x - r to both servers
            masked = ring - participant_mask(
                self._mask_secret, mask_label(self.pid, uid), ring.size
            )
            share0 = masked  # the helper gets a tag of d (the aggregator forwards d)
            helper_part = self._helper_key.tag(
                masked_message(label, masked.astype("<u8").tobytes())
            )
        else:
            share0, seed = split_with_seed(ring, label=label)
            bundle1 = ShareBundle.from_seed(seed, label=label, count=ring.size, frac_bits=f)
            helper_part = bundle1.to_bytes(self._helper_key)
        blob0 = ShareBundle.from_values(share0, label=label, party=0, frac_bits=f).to_bytes(
            self._agg_key
        )
        sealed = self._seal.encrypt(helper_part, associated_data=f"{self.pid}|{uid}".encode())
        head: dict[str, object] = {
            "participant_id": self.pid,
            "upload_id": uid,
            "parts": [len(blob0), len(sealed)],
        }
        if self._mask_secret is not None:
            head["masked"] = True
        return encode_frame(SHARES_UPLOAD, head, blob0 + sealed)

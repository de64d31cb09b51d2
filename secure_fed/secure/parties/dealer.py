"""The key authority's dealer: Beaver triples, range-check and comparison material.

In shares mode the key authority holds no shares and decrypts nothing: it deals
correlated randomness to the aggregator and the helper, each blob MAC'd for its
recipient, for requests the enrolled aggregator signed. :class:`Dealer` is that
half of :class:`~secure_fed.secure.parties.key_authority.KeyAuthority` (the
decryption service is the other, in its own module); :func:`deal_request` and
:func:`compare_request` build the aggregator's signed requests.
"""

from __future__ import annotations

import json
import time

from crypto.errors import CryptoError
from crypto.shares import ShareLabel, ShareMacKey, deal_range_check, deal_triples
from crypto.shares.mac import InputMaskDealer
from crypto.shares.wire import seal_to
from secure_fed.errors import AuthorityRequestMalformed, ReleaseRefused
from secure_fed.secure.computation.share_range import (
    COMPARE_PARTICIPANT,
    RANGE_PARTICIPANT,
    RANGE_SPEC,
    compare_spec,
)
from secure_fed.secure.protocol.authority_requests import (
    DealRequest,
    compare_request,
    deal_request,
)
from secure_fed.secure.protocol.vocabulary import AuthorityOp
from secure_fed.secure.release_policy import DecryptionRecord
from secure_fed.secure.server_auth import (
    RequestVerifier,
    VerifiedRequest,
)

__all__ = ["Dealer", "compare_request", "deal_request"]


class Dealer:
    """Dealing for requests the enrolled aggregator signed.

    A base of the key authority: it uses the authority's request verifiers
    (``_verify``, ``_range_verifier``, each refusal audited) and appends one
    :class:`~secure_fed.secure.release_policy.DecryptionRecord` per deal to its
    ``log`` (no values: what was dealt, for which round and tensor).
    """

    log: list[DecryptionRecord]
    _range_verifier: RequestVerifier | None

    def _verify(
        self,
        request: bytes,
        verifier: RequestVerifier | None = None,
        *,
        op: str = AuthorityOp.DECRYPT,
    ) -> VerifiedRequest:
        raise NotImplementedError  # the key authority's

    def _denied(self, exc: ReleaseRefused, *, op: str) -> None:
        raise NotImplementedError  # the key authority's (an ``access.denied`` event)

    def _parsed(self, verified: VerifiedRequest, purpose: AuthorityOp) -> DealRequest:
        """Parse the signed request for ``purpose``; audit a malformed one (``access.denied``)."""
        try:
            return _deal_request(verified, purpose)
        except AuthorityRequestMalformed as exc:
            self._denied(exc, op=purpose)
            raise

    def handle_deal(
        self, request: bytes, *, key_aggregator: ShareMacKey, key_helper: ShareMacKey
    ) -> tuple[bytes, bytes]:
        """Deal triples for a request the aggregator signed (:func:`deal_request`).

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed, AuthorityRequestMalformed
            As :meth:`handle`; a request for anything but triples is malformed.
        """
        verified = self._verify(request, op=AuthorityOp.TRIPLES)
        asked = self._parsed(verified, AuthorityOp.TRIPLES)
        return self.deal(
            round_id=verified.round_id,
            tensor=asked.tensor,
            count=asked.count,
            key_aggregator=key_aggregator,
            key_helper=key_helper,
        )

    def deal(
        self,
        *,
        round_id: int,
        tensor: str,
        count: int,
        key_aggregator: ShareMacKey,
        key_helper: ShareMacKey,
    ) -> tuple[bytes, bytes]:
        """Deal ``count`` Beaver triples; return (blob for the aggregator, blob for the helper).

        The authority holds no shares in this mode, so the masked openings it
        never sees could not tell it anything either.
        """
        label = ShareLabel(round_id=round_id, participant_id="beaver", tensor=tensor)
        t0, t1 = deal_triples(count, label=label, seeded=True)
        self.log.append(
            DecryptionRecord(
                round_id,
                f"triples:{tensor}",
                AuthorityOp.TRIPLES,
                (count,),
                0,
                (),
                False,
                time.time(),
            )
        )
        return t0.to_bytes(key_aggregator), seal_to(key_helper, t1.to_bytes(key_helper))

    def handle_deal_masks(
        self, request: bytes, *, masks: InputMaskDealer, key_aggregator: ShareMacKey
    ) -> bytes:
        """Deal the aggregator's share of one upload's input mask and its MACs (signed request).

        The request names ``[participant_id, upload_id]`` (JSON, its ``tensor``) and
        the count; it belongs to no round (freshness only, as a range check). The
        helper derives its own share from the secret it shares with the dealer, so
        nothing of it crosses the aggregator (:mod:`crypto.shares.mac`).

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed, AuthorityRequestMalformed
            As :meth:`handle_deal`; a request for anything but masks, or naming no
            enrolled participant, is malformed.
        """
        verified = self._verify(request, self._range_verifier, op=AuthorityOp.MASKS)
        asked = self._parsed(verified, AuthorityOp.MASKS)
        try:
            pid, uid = json.loads(asked.tensor)
            if not isinstance(pid, str) or not isinstance(uid, str):
                raise ValueError
            blob = masks.deal(pid, uid, asked.count, key=key_aggregator)
        except (ValueError, TypeError, CryptoError) as exc:
            refusal = AuthorityRequestMalformed(f"an input-mask request names no upload: {exc}")
            self._denied(refusal, op=AuthorityOp.MASKS)
            raise refusal from exc
        self.log.append(
            DecryptionRecord(
                0, f"masks:{uid}", AuthorityOp.MASKS, (asked.count,), 0, (), False, time.time()
            )
        )
        return blob

    def handle_deal_range(
        self, request: bytes, *, key_aggregator: ShareMacKey, key_helper: ShareMacKey
    ) -> tuple[bytes, bytes]:
        """Deal one upload's range-check material for a signed request (:func:`deal_range_request`).

        The request's round is the aggregator's current round (freshness only); the
        material's label names round 0, as every upload's range check does.

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed, AuthorityRequestMalformed
            As :meth:`handle_deal`; a request for anything but a range check is malformed.
        """
        verified = self._verify(request, self._range_verifier, op=AuthorityOp.RANGE)
        asked = self._parsed(verified, AuthorityOp.RANGE)
        return self.deal_range(
            round_id=0,
            tensor=asked.tensor,
            count=asked.count,
            key_aggregator=key_aggregator,
            key_helper=key_helper,
        )

    def deal_range(
        self,
        *,
        round_id: int,
        tensor: str,
        count: int,
        key_aggregator: ShareMacKey,
        key_helper: ShareMacKey,
    ) -> tuple[bytes, bytes]:
        """Deal one range check of ``count`` upload values (edaBits and AND triples).

        Returns (blob for the aggregator, blob for the helper); the material is
        independent of the values, which the authority never sees.
        """
        label = ShareLabel(round_id=round_id, participant_id=RANGE_PARTICIPANT, tensor=tensor)
        m0, m1 = deal_range_check(count, label=label, spec=RANGE_SPEC)
        record = DecryptionRecord(
            round_id, f"range:{tensor}", AuthorityOp.RANGE, (count,), 0, (), False, time.time()
        )
        self.log.append(record)
        return m0.to_bytes(key_aggregator), seal_to(key_helper, m1.to_bytes(key_helper))

    def handle_deal_compare(
        self, request: bytes, *, key_aggregator: ShareMacKey, key_helper: ShareMacKey
    ) -> tuple[bytes, bytes]:
        """Deal per-value comparison material for a signed request (:func:`compare_request`).

        The shares mode's copies step compares each hidden pair distance with a
        public threshold ``upper`` (bits kept shared, then counted); the authority deals
        the material for ``[0, upper]`` (it never sees a value, and the helper
        derives the threshold itself: material for another one yields no verdict).

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed, AuthorityRequestMalformed
            As :meth:`handle_deal`; a request for anything but a comparison, or
            without an integer ``upper`` in ``[0, 2^62)``, is malformed.
        """
        verified = self._verify(request, op=AuthorityOp.COMPARE)
        asked = self._parsed(verified, AuthorityOp.COMPARE)
        tensor, count, upper = asked.tensor, asked.count, asked.upper
        assert upper is not None  # a comparison's model names its threshold
        label = ShareLabel(
            round_id=verified.round_id, participant_id=COMPARE_PARTICIPANT, tensor=tensor
        )
        m0, m1 = deal_range_check(count, label=label, spec=compare_spec(upper))
        self.log.append(
            DecryptionRecord(
                verified.round_id,
                f"compare:{tensor}",
                AuthorityOp.COMPARE,
                (count,),
                0,
                (),
                False,
                time.time(),
            )
        )
        return m0.to_bytes(key_aggregator), seal_to(key_helper, m1.to_bytes(key_helper))


def _deal_request(verified: VerifiedRequest, purpose: AuthorityOp) -> DealRequest:
    """Parse the signed request for ``purpose``; refuse another purpose."""
    return DealRequest.from_wire(verified.header, signed_purpose=verified.purpose, purpose=purpose)

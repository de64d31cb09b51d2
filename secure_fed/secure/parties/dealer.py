"""The key authority's dealer: Beaver triples, range-check and comparison material.

In shares mode the key authority holds no shares and decrypts nothing: it deals
correlated randomness to the aggregator and the helper, each blob MAC'd for its
recipient, for requests the enrolled aggregator signed. :class:`Dealer` is that
half of :class:`~secure_fed.secure.parties.key_authority.KeyAuthority` (the
decryption service is the other, in its own module); :func:`deal_request` and
:func:`compare_request` build the aggregator's signed requests.
"""

from __future__ import annotations

import time

from crypto.shares import ShareLabel, ShareMacKey, deal_range_check, deal_triples
from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.modes.share_range import (
    COMPARE_PARTICIPANT,
    RANGE_PARTICIPANT,
    RANGE_SPEC,
    compare_spec,
)
from secure_fed.secure.release_policy import DecryptionRecord
from secure_fed.secure.server_auth import (
    RequestVerifier,
    Signer,
    VerifiedRequest,
    authenticate_request,
)
from secure_fed.wire import KEY_AUTHORITY_REQUEST

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
        self, request: bytes, verifier: RequestVerifier | None = None, *, op: str = "decrypt"
    ) -> VerifiedRequest:
        raise NotImplementedError  # the key authority's

    def handle_deal(
        self, request: bytes, *, key_aggregator: ShareMacKey, key_helper: ShareMacKey
    ) -> tuple[bytes, bytes]:
        """Deal triples for a request the aggregator signed (:func:`deal_request`).

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed, AuthorityRequestMalformed
            As :meth:`handle`; a request for anything but triples is malformed.
        """
        verified = self._verify(request, op="triples")
        tensor, count = _deal_fields(verified, "triples")
        return self.deal(
            round_id=verified.round_id,
            tensor=tensor,
            count=count,
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
                round_id, f"triples:{tensor}", "triples", (count,), 0, (), False, time.time()
            )
        )
        return t0.to_bytes(key_aggregator), t1.to_bytes(key_helper)

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
        verified = self._verify(request, self._range_verifier, op="range")
        tensor, count = _deal_fields(verified, "range")
        return self.deal_range(
            round_id=0,
            tensor=tensor,
            count=count,
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
            round_id, f"range:{tensor}", "range", (count,), 0, (), False, time.time()
        )
        self.log.append(record)
        return m0.to_bytes(key_aggregator), m1.to_bytes(key_helper)

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
        verified = self._verify(request, op="compare")
        tensor, count = _deal_fields(verified, "compare")
        upper = verified.header.get("upper")
        if not isinstance(upper, int) or isinstance(upper, bool) or not 0 <= upper < 1 << 62:
            raise AuthorityRequestMalformed("a comparison names an integer 'upper' in [0, 2^62)")
        label = ShareLabel(
            round_id=verified.round_id, participant_id=COMPARE_PARTICIPANT, tensor=tensor
        )
        m0, m1 = deal_range_check(count, label=label, spec=compare_spec(upper))
        self.log.append(
            DecryptionRecord(
                verified.round_id,
                f"compare:{tensor}",
                "compare",
                (count,),
                0,
                (),
                False,
                time.time(),
            )
        )
        return m0.to_bytes(key_aggregator), m1.to_bytes(key_helper)


def _deal_fields(verified: VerifiedRequest, purpose: str) -> tuple[str, int]:
    """Return the signed request's tensor label and count; refuse another purpose."""
    head = verified.header
    tensor, count = head.get("tensor"), head.get("count")
    if verified.purpose != purpose or not isinstance(tensor, str):
        raise AuthorityRequestMalformed(f"a dealing request names purpose {purpose!r} and a tensor")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise AuthorityRequestMalformed("a dealing request needs a count >= 1")
    return tensor, count


def deal_request(
    *, round_id: int, tensor: str, count: int, signer: Signer, purpose: str = "triples"
) -> bytes:
    """Build the bytes of a signed request for ``count`` Beaver triples (aggregator side).

    ``purpose="range"`` asks for one upload's range-check material instead
    (:meth:`KeyAuthority.handle_deal_range`; ``round_id`` is then the aggregator's
    current round, for freshness).
    """
    header: dict[str, object] = {"round_id": round_id, "tensor": tensor, "count": count}
    return authenticate_request(
        KEY_AUTHORITY_REQUEST, header, signer=signer, round_id=round_id, purpose=purpose
    )


def compare_request(*, round_id: int, tensor: str, count: int, upper: int, signer: Signer) -> bytes:
    """Build the bytes of a signed request for ``count`` per-value comparisons with ``[0, upper]``.

    Served by :meth:`KeyAuthority.handle_deal_compare` (purpose ``"compare"``).
    """
    header: dict[str, object] = {
        "round_id": round_id,
        "tensor": tensor,
        "count": count,
        "upper": upper,
    }
    return authenticate_request(
        KEY_AUTHORITY_REQUEST, header, signer=signer, round_id=round_id, purpose="compare"
    )

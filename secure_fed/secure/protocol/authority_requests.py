"""The key authority's requests, each parsed once on receipt into a frozen model.

A decryption request (:class:`DecryptionRequest`) names its round, purpose,
participants and ``(rows, cols)`` shape, and carries the aggregator's claim of
how the ciphertext was computed; a dealing request (:class:`DealRequest`) names
the material's tensor label, its count and, for a comparison, the threshold.
``from_wire`` raises :class:`~secure_fed.errors.AuthorityRequestMalformed`
(``AUTHORITY_REQUEST_MALFORMED``) on the first field it refuses. The claim
itself is checked by :func:`secure_fed.secure.ckks_claims.check_claim`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.protocol.vocabulary import AuthorityOp, Key, Purpose
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.release_policy import PURPOSES
from secure_fed.secure.server_auth import Signer, authenticate_request
from secure_fed.wire import KEY_AUTHORITY_REQUEST

__all__ = [
    "DealRequest",
    "DecryptionRequest",
    "compare_request",
    "deal_request",
    "decryption_request",
    "plan_request",
]


@dataclass(frozen=True, kw_only=True)
class DecryptionRequest:
    """A decryption request's fields (the ciphertext and its witness are the payload's).

    ``epoch`` is the key epoch it names, as sent (``None``: the scoring epoch);
    ``names_epoch`` whether the header has the field at all; ``bound`` the
    central-DP bound it states, as sent.
    """

    round_id: int
    purpose: Purpose
    participant_ids: tuple[str, ...]
    shape: tuple[int, int]
    claim: object
    epoch: object
    names_epoch: bool
    bound: object

    @classmethod
    def from_wire(cls, header: Mapping[str, object]) -> DecryptionRequest:
        """Parse a verified decryption request's header.

        Raises
        ------
        AuthorityRequestMalformed
            On a round that is no integer ``>= 0``, an unknown purpose, no
            participant ids or a shape that is not ``[rows, cols]``.
        """
        round_id, purpose = header.get(Key.ROUND_ID), header.get(Key.PURPOSE)
        ids, shape = header.get(Key.PARTICIPANT_IDS), header.get(Key.SHAPE)
        if isinstance(round_id, bool) or not isinstance(round_id, int) or round_id < 0:
            raise AuthorityRequestMalformed("request needs an integer round_id >= 0")
        if purpose not in PURPOSES:
            raise AuthorityRequestMalformed(f"purpose {purpose!r} is unknown; allowed: {PURPOSES}")
        if not isinstance(ids, list) or not ids or not all(isinstance(p, str) for p in ids):
            raise AuthorityRequestMalformed("request needs a non-empty participant_ids list")
        if (
            not isinstance(shape, list)
            or len(shape) != 2
            or not all(isinstance(s, int) and s >= 1 for s in shape)
        ):
            raise AuthorityRequestMalformed(f"request shape must be [rows, cols], got {shape!r}")
        return cls(
            round_id=round_id,
            purpose=Purpose(str(purpose)),
            participant_ids=tuple(ids),
            shape=(shape[0], shape[1]),
            claim=header.get(Key.CLAIM),
            epoch=header.get(Key.EPOCH),
            names_epoch=Key.EPOCH in header,
            bound=header.get(Key.BOUND),
        )


@dataclass(frozen=True, kw_only=True)
class DealRequest:
    """A dealing request: Beaver triples, one upload's range check, or comparisons."""

    purpose: AuthorityOp
    tensor: str
    count: int
    upper: int | None = None

    @classmethod
    def from_wire(
        cls, header: Mapping[str, object], *, signed_purpose: str, purpose: AuthorityOp
    ) -> DealRequest:
        """Parse a verified dealing request that must be for ``purpose``.

        A comparison (``compare``) also names an integer ``upper`` in ``[0, 2^62)``.

        Raises
        ------
        AuthorityRequestMalformed
            If it is signed for another purpose, names no tensor or a count below
            1, or (a comparison) no valid ``upper``.
        """
        tensor, count = header.get(Key.TENSOR), header.get(Key.COUNT)
        if signed_purpose != purpose or not isinstance(tensor, str):
            raise AuthorityRequestMalformed(
                f"a dealing request names purpose {purpose!r} and a tensor"
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise AuthorityRequestMalformed("a dealing request needs a count >= 1")
        if purpose != AuthorityOp.COMPARE:
            return cls(purpose=purpose, tensor=tensor, count=count)
        upper = header.get(Key.UPPER)
        if not isinstance(upper, int) or isinstance(upper, bool) or not 0 <= upper < 1 << 62:
            raise AuthorityRequestMalformed("a comparison names an integer 'upper' in [0, 2^62)")
        return cls(purpose=purpose, tensor=tensor, count=count, upper=upper)


def decryption_request(
    *,
    round_id: int,
    purpose: str,
    participant_ids: Sequence[str],
    shape: tuple[int, int],
    ciphertext: bytes,
    signer: Signer,
    claim: dict[str, object],
    **extra: object,
) -> bytes:
    """Build the bytes of a decryption request, signed by the aggregator.

    ``claim`` says how the ciphertext was computed (:mod:`secure_fed.secure.ckks_claims`).
    """
    header: dict[str, object] = {
        Key.ROUND_ID: round_id,
        Key.PURPOSE: purpose,
        Key.PARTICIPANT_IDS: list(participant_ids),
        Key.SHAPE: list(shape),
        Key.CLAIM: claim,
    }
    header.update(extra)
    return authenticate_request(
        KEY_AUTHORITY_REQUEST,
        header,
        ciphertext,
        signer=signer,
        round_id=round_id,
        purpose=purpose,
    )


def plan_request(plan: ReleasePlan, *, signer: Signer) -> bytes:
    """Build the bytes of a signed request fixing ``plan`` (purpose ``"plan"``, its round)."""
    header: dict[str, object] = {Key.ROUND_ID: plan.round_id, Key.PURPOSE: AuthorityOp.PLAN}
    return authenticate_request(
        KEY_AUTHORITY_REQUEST,
        header,
        plan.to_bytes(),
        signer=signer,
        round_id=plan.round_id,
        purpose=AuthorityOp.PLAN,
    )


def deal_request(
    *, round_id: int, tensor: str, count: int, signer: Signer, purpose: str = AuthorityOp.TRIPLES
) -> bytes:
    """Build the bytes of a signed request for ``count`` Beaver triples (aggregator side).

    ``purpose="range"`` asks for one upload's range-check material instead
    (:meth:`KeyAuthority.handle_deal_range`; ``round_id`` is then the aggregator's
    current round, for freshness).
    """
    header: dict[str, object] = {Key.ROUND_ID: round_id, Key.TENSOR: tensor, Key.COUNT: count}
    return authenticate_request(
        KEY_AUTHORITY_REQUEST, header, signer=signer, round_id=round_id, purpose=purpose
    )


def compare_request(*, round_id: int, tensor: str, count: int, upper: int, signer: Signer) -> bytes:
    """Build the bytes of a signed request for ``count`` per-value comparisons with ``[0, upper]``.

    Served by :meth:`KeyAuthority.handle_deal_compare` (purpose ``"compare"``).
    """
    header: dict[str, object] = {
        Key.ROUND_ID: round_id,
        Key.TENSOR: tensor,
        Key.COUNT: count,
        Key.UPPER: upper,
    }
    return authenticate_request(
        KEY_AUTHORITY_REQUEST, header, signer=signer, round_id=round_id, purpose=AuthorityOp.COMPARE
    )

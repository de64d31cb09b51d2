"""The helper's wire: its request builders, its reply parser and the seed-seal key.

The aggregator builds every helper request with :func:`helper_request` (or
:func:`plan_request` for a round's plan), tagged with the aggregator-helper
channel key; :func:`reply_array` parses a reply. A participant seals its seed
for the helper under :func:`seal_key` of its enrolment secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

import numpy as np

from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.protocol.vocabulary import HelperOp, Key
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.server_auth import ChannelKey, authenticate_request
from secure_fed.wire import HELPER_REPLY, HELPER_REQUEST, decode_array, decode_frame

__all__ = ["helper_request", "plan_request", "reply_array", "seal_key"]


def seal_key(secret: bytes) -> bytes:
    """SM4 key a participant and the helper derive from their enrolment secret."""
    return hmac.new(secret, b"secure-fed/shares/seed-seal/v1", "sm3").digest()[:16]


def plan_request(plan: ReleasePlan, *, key: ChannelKey) -> bytes:
    """Build the helper request fixing ``plan``, tagged with the channel ``key``."""
    header: dict[str, object] = {
        Key.OP: HelperOp.PLAN,
        Key.ROUND_ID: plan.round_id,
        Key.PURPOSE: HelperOp.PLAN,
        Key.PARTS: [len(plan.to_bytes())],
    }
    return authenticate_request(
        HELPER_REQUEST,
        header,
        plan.to_bytes(),
        signer=key,
        round_id=plan.round_id,
        purpose=HelperOp.PLAN,
    )


def helper_request(
    header: Mapping[str, object], payload: bytes = b"", *, key: ChannelKey, round_id: int
) -> bytes:
    """Build a helper request for ``header["op"]``, tagged with the channel ``key``.

    The tag binds every header field (the operation among them), ``round_id``
    (a header ``round_id`` must equal it), the purpose (the header's, else the
    operation), a fresh nonce and the SM3 of ``payload``
    (:func:`~secure_fed.secure.server_auth.authenticate_request`).

    Raises
    ------
    AuthorityRequestMalformed
        If the header names no operation.
    """
    op = header.get(Key.OP)
    if not isinstance(op, str):
        raise AuthorityRequestMalformed("a helper request names its operation ('op')")
    purpose = str(header.get(Key.PURPOSE, op))
    return authenticate_request(
        HELPER_REQUEST, dict(header), payload, signer=key, round_id=round_id, purpose=purpose
    )


def reply_array(reply: bytes) -> tuple[dict[str, object], np.ndarray | bytes]:
    """Parse a helper reply: ``(header, array or raw bytes)``.

    Raises
    ------
    AuthorityRequestMalformed
        On a malformed reply frame or array.
    """
    header, payload = decode_frame(reply, HELPER_REPLY)
    if Key.ARRAY in header:
        return header, decode_array(header[Key.ARRAY], payload)
    return header, payload

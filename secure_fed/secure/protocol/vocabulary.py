"""One vocabulary for the gatekeepers' requests: steps, purposes, operations, header keys.

Every word a key authority or helper request carries, or a gatekeeper writes in
its replies and audit events, is a member of one :class:`enum.StrEnum` here
(the way Flower keeps SecAgg+'s ``Stage`` and ``Key`` in one constants module).
A member *is* its string: it compares, hashes, encodes to canonical JSON and
stores exactly as the literal it replaces, so the wire format is unchanged.
Its ``repr`` is the string's too, so error messages read as before.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AuditEvent",
    "AuthorityOp",
    "Channel",
    "ClaimOp",
    "CopiesStage",
    "HelperOp",
    "Key",
    "Party",
    "Purpose",
    "Step",
    "Word",
    "words",
]


class Word(StrEnum):
    """A protocol word: a string enum whose ``repr`` is the plain string's."""

    def __repr__(self) -> str:
        return repr(self.value)


def words(members: tuple[Word, ...]) -> tuple[str, ...]:
    """Return ``members`` as plain strings (for messages and membership tests)."""
    return tuple(m.value for m in members)


class Purpose(Word):
    """What a released value is (a decryption request's or an opening's ``purpose``)."""

    AGGREGATE = "aggregate"
    MEAN = "mean"
    MOMENTS = "moments"
    SCORE = "score"
    DISTANCE = "distance"


class Step(Word):
    """A step (phase) of a round's release plan, in plan order, then ``done``."""

    RANKING = "ranking"
    MOMENTS = "moments"
    FINAL = "final"
    EVIDENCE = "evidence"
    COPIES = "copies"
    PUBLICATION = "publication"
    DONE = "done"


class HelperOp(Word):
    """An operation of a helper request (its ``op`` header field)."""

    LOAD = "load"
    RANGE = "range"
    PLAN = "plan"
    LINEAR = "linear"
    OPEN = "open"
    FINISH = "finish"
    EVIDENCE = "evidence"
    COPIES = "copies"
    MAC_CHECK = "mac_check"


class AuthorityOp(Word):
    """An operation of the key authority (a request's signed purpose outside decryptions).

    ``decrypt`` requests sign their release :class:`Purpose` instead; every
    operation is the ``op`` of an ``access.denied`` event that refuses it.
    """

    DECRYPT = "decrypt"
    PLAN = "plan"
    TRIPLES = "triples"
    RANGE = "range"
    COMPARE = "compare"
    MASKS = "masks"


class ClaimOp(Word):
    """How a CKKS ciphertext was computed (a decryption claim's ``op``)."""

    WEIGHTED_SUM = "weighted_sum"
    MEAN = "mean"
    MOMENTS = "moments"
    SCORE = "score"
    EVIDENCE = "evidence"
    DISTANCE = "distance"


class CopiesStage(Word):
    """Stage of one running copies comparison at the helper."""

    COMPARE = "compare"
    CONVERT = "convert"
    COUNT = "count"


class Channel(Word):
    """Freshness channel of a request verifier (persisted with its nonces)."""

    DECRYPT = "decrypt"
    PLAN = "plan"
    RANGE = "range"
    OPS = "ops"
    UPLOADS = "uploads"


class Party(Word):
    """A gatekeeper, as its audit events and plan records name it."""

    KEY_AUTHORITY = "key_authority"
    HELPER = "helper"
    VERIFIER = "verifier"


class AuditEvent(Word):
    """An audit event a gatekeeper records."""

    ACCESS_DENIED = "access.denied"
    KEY_GENERATED = "key.generated"
    DECRYPTION_REQUESTED = "decryption.requested"
    DECRYPTION_RELEASED = "decryption.released"


class Key(Word):
    """A header key of a gatekeeper request or reply."""

    ARRAY = "array"
    AUTH = "auth"
    BOUND = "bound"
    CENTRAL_DP = "central_dp"
    CENTRE = "centre"
    CHECK = "check"
    CLAIM = "claim"
    COPIES = "copies"
    COUNT = "count"
    EPOCH = "epoch"
    KIND = "kind"
    NONCE = "nonce"
    OK = "ok"
    OP = "op"
    OP_ID = "op_id"
    PARTICIPANT_ID = "participant_id"
    PARTICIPANT_IDS = "participant_ids"
    PARTS = "parts"
    PURPOSE = "purpose"
    ROUND_ID = "round_id"
    SHAPE = "shape"
    SIGNER = "signer"
    STAGE = "stage"
    STEP = "step"
    TENSOR = "tensor"
    UIDS = "uids"
    UPLOAD_ID = "upload_id"
    UPPER = "upper"
    WEIGHTS = "weights"

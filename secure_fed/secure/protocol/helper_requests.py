"""The helper's requests, each parsed once on receipt into a frozen model: readers, load, linear.

:func:`parse_op` reads a request's operation; each operation's model
(:class:`LoadRequest`, :class:`LinearRequest` and :class:`MacCheckRequest` here;
the scoring steps' models in :mod:`secure_fed.secure.protocol.helper_step_requests`) is
built by its ``from_wire`` from the verified header and payload, raising the
typed error of the check it fails (``AUTHORITY_REQUEST_MALFORMED`` for a
malformed field, ``UPLOAD_MALFORMED`` for a load naming no participant): an
operation id or triple label that is missing or no string, or a payload of
another count of parts than the operation carries, is refused, never read as
the string ``"None"`` or left to unpacking. What
needs the helper's own view (the uploads it holds, its plan) is checked by the
helper on the model. An opening asked under a pair distance's name parses to a
:class:`DistanceAsk`, which the helper refuses (audited). This module also holds
the field readers every model uses (:func:`label`, :func:`upload_ids`,
:func:`upload_names`, :func:`wire_weights`, :func:`hex_bytes`) and the header
fields of an authenticated opening (``MAC_*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from secure_fed.errors import AuthorityRequestMalformed, UploadMalformed
from secure_fed.secure.protocol.codecs import wire_int
from secure_fed.secure.protocol.vocabulary import HelperOp, Key, Purpose, Step
from secure_fed.wire import decode_array, number_from_wire

__all__ = [
    "DISTANCE_NAMES",
    "LINEAR_PURPOSES",
    "DistanceAsk",
    "LinearRequest",
    "LoadRequest",
    "MacCheckRequest",
    "hex_bytes",
    "label",
    "parse_op",
    "upload_ids",
    "upload_names",
    "wire_weights",
]

#: Purposes a linear opening may name (the plan refuses ``mean``: one publication per round).
LINEAR_PURPOSES = (Purpose.AGGREGATE, Purpose.MEAN)
#: Names under which a Beaver or linear opening would open a pair distance itself.
DISTANCE_NAMES = (Purpose.DISTANCE, Step.COPIES)


def parse_op(header: Mapping[str, object]) -> HelperOp:
    """Return the request's operation.

    Raises
    ------
    AuthorityRequestMalformed
        If ``op`` is missing or no :class:`HelperOp`.
    """
    op = header.get(Key.OP)
    if not isinstance(op, str) or op not in set(HelperOp):
        raise AuthorityRequestMalformed(f"helper op {op!r} is unknown; allowed: {sorted(HelperOp)}")
    return HelperOp(op)


def label(header: Mapping[str, object], name: str, what: str) -> str:
    """Return the header's non-empty string ``name`` (an operation id or a triple label).

    Raises
    ------
    AuthorityRequestMalformed
        If it is missing, empty or not a string (never read as ``"None"``).
    """
    value = header.get(name)
    if not isinstance(value, str) or not value:
        raise AuthorityRequestMalformed(f"{what} names a non-empty string {name!r}, got {value!r}")
    return value


def upload_ids(
    raw: object, message: str = "request needs a non-empty list of upload ids"
) -> tuple[str, ...]:
    """Return a non-empty list of upload ids as a tuple, or refuse it with ``message``."""
    if not isinstance(raw, list) or not raw or not all(isinstance(u, str) for u in raw):
        raise AuthorityRequestMalformed(message)
    return tuple(str(u) for u in raw)


def wire_weights(raw: object) -> tuple[float, ...]:
    """Return a list of wire numbers as floats, or refuse it."""
    numbers = [number_from_wire(w) for w in raw] if isinstance(raw, list) else [None]
    if not all(w is not None for w in numbers):
        raise AuthorityRequestMalformed("linear openings need a list of numeric weights")
    return tuple(float(w) for w in numbers if w is not None)


def upload_names(raw: object) -> tuple[str, ...]:
    """Return the string upload ids a (possibly malformed) list names, for a refusal."""
    return tuple(u for u in raw if isinstance(u, str)) if isinstance(raw, list) else ()


@dataclass(frozen=True, kw_only=True)
class DistanceAsk:
    """A linear or Beaver opening asked under a pair distance's name (always refused)."""

    round_id: int
    uids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    """Load one upload's sealed helper share (op ``load``)."""

    participant_id: str
    upload_id: str

    @classmethod
    def from_wire(cls, header: Mapping[str, object]) -> LoadRequest:
        """Parse a load request.

        Raises
        ------
        UploadMalformed
            If the participant or upload id is not a string.
        """
        pid, uid = header.get(Key.PARTICIPANT_ID), header.get(Key.UPLOAD_ID)
        if not isinstance(pid, str) or not isinstance(uid, str):
            raise UploadMalformed(f"helper does not know participant {pid!r}")
        return cls(participant_id=pid, upload_id=uid)


@dataclass(frozen=True, kw_only=True)
class LinearRequest:
    """A weighted sum of the named uploads' shares (op ``linear``)."""

    round_id: int
    purpose: Purpose
    uids: tuple[str, ...]
    weights: tuple[float, ...]
    seed_commitment: bytes | None = None
    share: np.ndarray | None = None

    @classmethod
    def from_wire(
        cls, header: Mapping[str, object], payload: bytes = b""
    ) -> LinearRequest | DistanceAsk:
        """Parse a linear opening (a :class:`DistanceAsk` under a distance's name).

        An authenticated opening (:mod:`crypto.shares.mac`) also carries the
        aggregator's coin-toss commitment (``mac_seed_commit``, hex) and its share
        of the values (the payload, ``array``).

        Raises
        ------
        AuthorityRequestMalformed
            On an unknown purpose, no upload ids, non-numeric weights, or a
            malformed commitment or share.
        """
        purpose, round_id = (
            header.get(Key.PURPOSE, Purpose.AGGREGATE),
            wire_int(header, Key.ROUND_ID),
        )
        if purpose in DISTANCE_NAMES:
            return DistanceAsk(round_id=round_id, uids=upload_names(header.get(Key.UIDS)))
        if purpose not in LINEAR_PURPOSES:
            raise AuthorityRequestMalformed(
                f"linear purpose {purpose!r} is unknown; allowed: {list(LINEAR_PURPOSES)}"
            )
        uids = upload_ids(header.get(Key.UIDS))
        weights = wire_weights(header.get(Key.WEIGHTS))
        commit, share = header.get(MAC_SEED_COMMIT), None
        if commit is not None:
            commit = hex_bytes(commit, 32, "a MAC seed commitment")
            share = np.asarray(decode_array(header.get(Key.ARRAY), payload), dtype=np.uint64)
        elif payload:
            raise AuthorityRequestMalformed("a linear opening without a MAC carries no payload")
        return cls(
            round_id=round_id,
            purpose=Purpose(str(purpose)),
            uids=uids,
            weights=weights,
            seed_commitment=commit,
            share=share,
        )


#: Header fields of an authenticated opening (:mod:`crypto.shares.mac`), hex bytes.
MAC_SEED_COMMIT = "mac_seed_commit"
MAC_SEED = "mac_seed"
MAC_SIGMA_COMMIT = "mac_sigma_commit"
MAC_SIGMA = "mac_sigma"
MAC_STAGE = "mac_stage"
MAC_TOSS, MAC_REVEAL = "toss", "reveal"
MAC_STEP = "mac_step"
#: The openings that are MAC-checked: the publication and the evidence scalars.
MAC_PUBLICATION, MAC_EVIDENCE = "publication", "evidence"


def hex_bytes(raw: object, size: int, what: str) -> bytes:
    """Return ``size`` bytes from a hex string, or refuse it naming ``what``."""
    try:
        if not isinstance(raw, str) or len(raw) != 2 * size:
            raise ValueError
        return bytes.fromhex(raw)
    except ValueError as exc:
        raise AuthorityRequestMalformed(f"{what} must be {size} bytes in hex") from exc


@dataclass(frozen=True, kw_only=True)
class MacCheckRequest:
    """A stage of the MAC check of an authenticated linear opening (op ``mac_check``).

    ``toss``: the aggregator opens its coin-toss seed and commits to its check
    values (the helper replies with its own check values); ``reveal``: the
    aggregator opens its check values (the helper checks, then releases).
    """

    round_id: int
    stage: str
    seed: bytes | None
    commitment: bytes | None
    opening: bytes | None
    step: str = MAC_PUBLICATION

    @classmethod
    def from_wire(cls, header: Mapping[str, object]) -> MacCheckRequest:
        """Parse a MAC-check stage.

        Raises
        ------
        AuthorityRequestMalformed
            On another stage or malformed hex fields.
        """
        round_id, stage = wire_int(header, Key.ROUND_ID), header.get(MAC_STAGE)
        step = header.get(MAC_STEP, MAC_PUBLICATION)
        if step not in (MAC_PUBLICATION, MAC_EVIDENCE):
            raise AuthorityRequestMalformed(
                f"a MAC check names step {MAC_PUBLICATION!r} or {MAC_EVIDENCE!r}"
            )
        if stage == MAC_TOSS:
            seed = hex_bytes(header.get(MAC_SEED), 32, "the aggregator's coin-toss seed")
            commit = hex_bytes(header.get(MAC_SIGMA_COMMIT), 32, "a check-value commitment")
            return cls(
                round_id=round_id,
                stage=MAC_TOSS,
                seed=seed,
                commitment=commit,
                opening=None,
                step=str(step),
            )
        if stage == MAC_REVEAL:
            opening = hex_bytes(header.get(MAC_SIGMA), 48, "the aggregator's check values")
            return cls(
                round_id=round_id,
                stage=MAC_REVEAL,
                seed=None,
                commitment=None,
                opening=opening,
                step=str(step),
            )
        raise AuthorityRequestMalformed(f"a MAC check names stage {MAC_TOSS!r} or {MAC_REVEAL!r}")

"""The helper's requests of the plan's scoring steps, each parsed once into a frozen model.

The Beaver products of the moment and the scoring passes (:class:`OpenRequest`,
op ``open``, and :class:`FinishRequest`, op ``finish``), the evidence scalars
(:class:`EvidenceRequest`, op ``evidence``) and the copies step
(:class:`CopiesRequest`, op ``copies``). Each ``from_wire`` reads the verified
header and payload with the field readers of
:mod:`secure_fed.secure.protocol.helper_requests` and raises
``AUTHORITY_REQUEST_MALFORMED`` on a malformed field; a payload of another count
of parts than the operation carries is refused, never left to unpacking. A
Beaver opening asked under a pair distance's name parses to a
:class:`~secure_fed.secure.protocol.helper_requests.DistanceAsk`, which the
helper refuses (audited). A request carrying an input the helper derives itself
(:data:`DERIVED_FIELDS`, :data:`COPIES_REFUSED_FIELDS`) is refused by the helper.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.protocol.codecs import slice_from_fields, split_parts, wire_int
from secure_fed.secure.protocol.helper_requests import (
    DISTANCE_NAMES,
    MAC_SEED_COMMIT,
    DistanceAsk,
    hex_bytes,
    label,
    upload_ids,
    upload_names,
)
from secure_fed.secure.protocol.vocabulary import CopiesStage, Key, Step
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.wire import decode_array

__all__ = [
    "BEAVER_KINDS",
    "COPIES_REFUSED_FIELDS",
    "DERIVED_FIELDS",
    "CopiesRequest",
    "EvidenceRequest",
    "FinishRequest",
    "OpenRequest",
]

#: Beaver operations: the plan's two scoring passes and its one second moment.
BEAVER_KINDS = (Step.RANKING, Step.FINAL, Step.MOMENTS)
#: Inputs the helper derives itself; a request that carries one is refused.
DERIVED_FIELDS = ("center", "matrix", "samples", "g", "fz", "whitening")
#: What a copies request may not carry: the helper derives the pairs and the threshold
#: itself, and a pair distance is never opened (only the near-duplicate counts).
COPIES_REFUSED_FIELDS = (*DERIVED_FIELDS, "pairs", "threshold", "upper", "lower", "open")


def _counted(sizes: object, payload: bytes, names: tuple[str, ...], what: str) -> list[bytes]:
    """Split ``payload`` by ``sizes``; refuse it unless it has one part per name."""
    parts = split_parts({Key.PARTS: sizes}, payload)
    if len(parts) != len(names):
        raise AuthorityRequestMalformed(
            f"{what} carries {len(names)} payload part(s) ({', '.join(names)}), not {len(parts)}"
        )
    return parts


@dataclass(frozen=True, kw_only=True)
class OpenRequest:
    """The helper's half of a Beaver product (op ``open``): a moment or a scoring pass."""

    round_id: int
    kind: Step
    op_id: str
    uids: tuple[str, ...]
    centre: tuple[str, ...]
    tensor: str | None
    carried: tuple[str, ...]
    sizes: object
    payload: bytes

    @classmethod
    def from_wire(cls, header: Mapping[str, object], payload: bytes) -> OpenRequest | DistanceAsk:
        """Parse a Beaver opening (a :class:`DistanceAsk` under a distance's name).

        ``carried`` lists the derived fields the request set (the helper refuses them);
        the payload's parts are split when the helper reaches them (:meth:`triples`).

        Raises
        ------
        AuthorityRequestMalformed
            On an unknown kind, no upload or centre ids, or no string operation id
            (the triple label is read when the helper reaches it, :meth:`triple_label`).
        """
        kind = header.get(Key.KIND)
        round_id = wire_int(header, Key.ROUND_ID)
        if kind in DISTANCE_NAMES:
            return DistanceAsk(round_id=round_id, uids=upload_names(header.get(Key.UIDS)))
        if kind not in BEAVER_KINDS:
            raise AuthorityRequestMalformed(
                f"Beaver kind {kind!r} is unknown; allowed: {BEAVER_KINDS}"
            )
        op_id = label(header, Key.OP_ID, "a Beaver opening")
        tensor = header.get(Key.TENSOR)
        uids, centre = upload_ids(header.get(Key.UIDS)), upload_ids(header.get(Key.CENTRE))
        carried = tuple(sorted(f for f in DERIVED_FIELDS if f in header))
        return cls(
            round_id=round_id,
            kind=Step(str(kind)),
            op_id=op_id,
            uids=uids,
            centre=centre,
            tensor=tensor if isinstance(tensor, str) and tensor else None,
            carried=carried,
            sizes=header.get(Key.PARTS),
            payload=payload,
        )

    def triple_label(self) -> str:
        """Return the label of the helper's Beaver triples.

        Raises
        ------
        AuthorityRequestMalformed
            If the request names none (never read as the label ``"None"``).
        """
        if self.tensor is None:
            raise AuthorityRequestMalformed("a Beaver opening names a non-empty string 'tensor'")
        return self.tensor

    def triples(self) -> bytes:
        """Return the payload's one part, the helper's Beaver triples.

        Raises
        ------
        AuthorityRequestMalformed
            On malformed parts or another count of parts than one.
        """
        (triples,) = _counted(self.sizes, self.payload, ("triples",), "a Beaver opening")
        return triples


@dataclass(frozen=True, kw_only=True)
class FinishRequest:
    """The end of a Beaver product (op ``finish``): the opening and the aggregator's share."""

    round_id: int
    op_id: str
    sizes: object
    payload: bytes
    array: object

    @classmethod
    def from_wire(cls, header: Mapping[str, object], payload: bytes) -> FinishRequest:
        """Parse a finish request (its parts are split once the operation is found).

        Raises
        ------
        AuthorityRequestMalformed
            On a malformed round or no string operation id.
        """
        round_id = wire_int(header, Key.ROUND_ID)
        op_id = label(header, Key.OP_ID, "a Beaver finish")
        return cls(
            round_id=round_id,
            op_id=op_id,
            sizes=header.get(Key.PARTS),
            payload=payload,
            array=header.get(Key.ARRAY),
        )

    def parts(self) -> tuple[bytes, bytes]:
        """Return the aggregator's opening and its output share's bytes.

        Raises
        ------
        AuthorityRequestMalformed
            On malformed parts or another count of parts than two.
        """
        names = ("opening", "output share")
        opening, theirs_raw = _counted(self.sizes, self.payload, names, "a Beaver finish")
        return opening, theirs_raw

    def theirs(self, theirs_raw: bytes) -> np.ndarray:
        """Return the aggregator's output share (``u8``) from its bytes.

        Raises
        ------
        AuthorityRequestMalformed
            On malformed array metadata.
        """
        return np.asarray(decode_array(self.array, theirs_raw), dtype=np.uint64)


@dataclass(frozen=True, kw_only=True)
class EvidenceRequest:
    """One evidence scalar per upload (op ``evidence``), with the aggregator's sums."""

    round_id: int
    uids: tuple[str, ...]
    theirs: np.ndarray
    evidence: EvidenceSlice | None
    seed_commitment: bytes | None = None

    @classmethod
    def from_wire(cls, header: Mapping[str, object], payload: bytes) -> EvidenceRequest:
        """Parse an evidence request.

        Raises
        ------
        AuthorityRequestMalformed
            On no upload ids, malformed sums or a malformed slice.
        """
        round_id = wire_int(header, Key.ROUND_ID)
        uids = upload_ids(header.get(Key.UIDS))
        theirs = np.asarray(decode_array(header.get(Key.ARRAY), payload), dtype=np.uint64)
        if theirs.shape != (len(uids),):
            raise AuthorityRequestMalformed("the aggregator's evidence sums have the wrong shape")
        commit = header.get(MAC_SEED_COMMIT)
        return cls(
            round_id=round_id,
            uids=uids,
            theirs=theirs,
            evidence=slice_from_fields(header),
            seed_commitment=None
            if commit is None
            else hex_bytes(commit, 32, "a MAC seed commitment"),
        )


@dataclass(frozen=True, kw_only=True)
class CopiesRequest:
    """A copies-step request (op ``copies``): a start (it names uploads) or a stage's step."""

    round_id: int
    check: str
    uids: tuple[str, ...] | None
    names: tuple[str, ...]
    stage: object
    tensor: str | None
    carried: tuple[str, ...]
    sizes: object
    payload: bytes

    @classmethod
    def from_wire(cls, header: Mapping[str, object], payload: bytes) -> CopiesRequest:
        """Parse a copies request; a start's upload ids must be a non-empty list.

        ``names`` are the string ids a start names (for a refusal's record);
        ``carried`` the fields the helper derives itself that the request set;
        ``tensor`` the triple label it names (``None``: none, or not a non-empty
        string; a start and a bit conversion read it with :meth:`triple_label`).

        Raises
        ------
        AuthorityRequestMalformed
            If it names no comparison or a start names no upload ids.
        """
        round_id = wire_int(header, Key.ROUND_ID)
        check = header.get(Key.CHECK)
        if not isinstance(check, str):
            raise AuthorityRequestMalformed("a copies request names its comparison ('check')")
        uids = None
        if Key.UIDS in header:
            message = "a copies request needs a non-empty list of upload ids"
            uids = upload_ids(header.get(Key.UIDS), message)
        stage = header.get(Key.STAGE, CopiesStage.COMPARE)
        tensor = header.get(Key.TENSOR)
        return cls(
            round_id=round_id,
            check=check,
            uids=uids,
            names=upload_names(header.get(Key.UIDS)),
            stage=stage,
            tensor=tensor if isinstance(tensor, str) and tensor else None,
            carried=tuple(sorted(f for f in COPIES_REFUSED_FIELDS if f in header)),
            sizes=header.get(Key.PARTS),
            payload=payload,
        )

    def triple_label(self) -> str:
        """Return the triple label a start or a bit conversion uses.

        Raises
        ------
        AuthorityRequestMalformed
            If the request names none (never read as the label ``"None"``).
        """
        if self.tensor is None:
            raise AuthorityRequestMalformed(
                "a copies start or bit conversion names a non-empty string 'tensor'"
            )
        return self.tensor

    def parts(self, count: int, message: str) -> list[bytes]:
        """Return the payload's parts, refused with ``message`` unless there are ``count``.

        Raises
        ------
        AuthorityRequestMalformed
            On malformed parts or another count.
        """
        parts = split_parts({Key.PARTS: self.sizes}, self.payload)
        if len(parts) != count:
            raise AuthorityRequestMalformed(message)
        return parts

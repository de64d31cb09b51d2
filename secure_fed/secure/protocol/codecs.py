"""Header codecs both sides of the gatekeeper protocol use: parts, integers, slices.

A request's payload may be several byte strings one after the other, their
lengths in the header's ``parts``; counts and rounds are non-negative integers;
an evidence slice travels as its ``rows`` and ``labels``.
"""

from __future__ import annotations

from collections.abc import Mapping

from secure_fed.errors import AuthorityRequestMalformed, ScoringInvalid
from secure_fed.secure.protocol.vocabulary import Key
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = ["slice_fields", "slice_from_fields", "split_parts", "wire_int"]


def split_parts(header: Mapping[str, object], payload: bytes) -> list[bytes]:
    """Split ``payload`` by ``header["parts"]`` (a list of byte lengths).

    Raises
    ------
    AuthorityRequestMalformed
        If the lengths are missing, negative or do not add up to the payload.
    """
    sizes = header.get(Key.PARTS)
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise AuthorityRequestMalformed("request needs a 'parts' list of byte lengths")
    if sum(sizes) != len(payload):
        raise AuthorityRequestMalformed("request parts do not add up to the payload length")
    out, pos = [], 0
    for s in sizes:
        out.append(payload[pos : pos + s])
        pos += s
    return out


def wire_int(header: Mapping[str, object], name: str) -> int:
    """Return the header's integer ``name`` (``>= 0``, not a bool).

    Raises
    ------
    AuthorityRequestMalformed
        If it is missing or not such an integer.
    """
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AuthorityRequestMalformed(f"request field {name!r} must be an integer >= 0")
    return value


def slice_fields(piece: EvidenceSlice) -> dict[str, object]:
    """Return the fields naming ``piece`` in a request or claim (``rows``, ``labels``)."""
    return {"rows": list(piece.rows), "labels": list(piece.labels)}


def slice_from_fields(fields: Mapping[str, object]) -> EvidenceSlice | None:
    """Return the slice a request or claim names (``None`` when it names none).

    Raises
    ------
    AuthorityRequestMalformed
        If ``rows`` or ``labels`` is present but not a list of integers of one length.
    """
    rows, labels = fields.get("rows"), fields.get("labels")
    if rows is None and labels is None:
        return None
    if not (isinstance(rows, list) and isinstance(labels, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (*rows, *labels)
    ):
        raise AuthorityRequestMalformed("an evidence slice lists integer 'rows' and 'labels'")
    try:
        return EvidenceSlice(rows=tuple(rows), labels=tuple(labels))
    except ScoringInvalid as exc:
        raise AuthorityRequestMalformed(f"evidence slice refused: {exc}") from exc

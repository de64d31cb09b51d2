"""The publication's witness: the published sum must be the sum of the values that were scored.

With two key epochs (the ``ckks`` mode's default) every upload carries its matrix twice:
under the scoring epoch, where it is scored, compared for copies and read for evidence,
and under the publication epoch, where it is summed for the publication. Nothing a
participant sends proves the two parts equal, and without a check a participant with an
honest scoring part and a chosen publication part scores as typical, keeps its weight and
moves the published result where it likes.

So the aggregator's publication request carries a second ciphertext, the *witness*: the
same weighted sum (the same claim: uploads, weights) of the same uploads' scoring-epoch
parts. The key authority decrypts both, compares them value by value and releases the
publication only if they agree within their stated error and the publication lies within
the preset's input bound (:func:`crypto.ckks.decrypt_checked_publication`); otherwise it
refuses with :class:`~secure_fed.errors.PublicationInconsistent`, nothing is released and
the refusal is audited. The witness is never released.

Wire: the request's payload is the publication ciphertext followed by the witness; the
signed header's ``witness`` field names both parts' SM3 and the witness's length, so the
aggregator's signature binds each part and an auditor recomputes the publication against
its own digest (``publication_sm3``).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from crypto.sm import sm3_digest
from secure_fed.errors import AuthorityRequestMalformed

__all__ = ["WITNESS", "ciphertext_sm3", "split_witness", "witness_field"]

#: The signed header field that carries the witness's digests and length.
WITNESS = "witness"

_KEYS = frozenset({"publication_sm3", "sm3", "bytes"})


def witness_field(publication: bytes, witness: bytes) -> dict[str, object]:
    """Return the header field naming the two parts of a publication request's payload."""
    return {
        "publication_sm3": sm3_digest(publication).hex(),
        "sm3": sm3_digest(witness).hex(),
        "bytes": len(witness),
    }


def split_witness(header: Mapping[str, object], payload: bytes) -> tuple[bytes, bytes | None]:
    """Return ``(publication ciphertext, witness or None)`` of a verified request's payload.

    A request without the ``witness`` field is returned whole. The payload's digest is
    already bound by the signature; each part is checked against its own signed digest.

    Raises
    ------
    AuthorityRequestMalformed
        A ``witness`` field that is not ``{publication_sm3, sm3, bytes}``, a length that
        leaves no publication, or a part that is not the one its digest names.
    """
    field = header.get(WITNESS)
    if field is None:
        return payload, None
    if not isinstance(field, Mapping) or set(field) != _KEYS:
        raise AuthorityRequestMalformed(
            f"the witness field must name exactly {sorted(_KEYS)}, got {field!r}"
        )
    size = field["bytes"]
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size < len(payload):
        raise AuthorityRequestMalformed(
            f"the witness length {size!r} leaves no publication in {len(payload)} bytes"
        )
    publication, witness = payload[:-size], payload[-size:]
    for name, part in (("publication_sm3", publication), ("sm3", witness)):
        claimed = field[name]
        if not isinstance(claimed, str) or not hmac.compare_digest(sm3_digest(part).hex(), claimed):
            raise AuthorityRequestMalformed(f"the witness field's {name} is not its part's SM3")
    return publication, witness


def ciphertext_sm3(header: Mapping[str, object]) -> str:
    """SM3 of the ciphertext the request asks to decrypt (the publication's, with a witness)."""
    field = header.get(WITNESS)
    if isinstance(field, Mapping) and isinstance(field.get("publication_sm3"), str):
        return str(field["publication_sm3"])
    auth = header.get("auth")
    assert isinstance(auth, Mapping)
    return str(auth["payload_sm3"])

"""The ``ckks_upload`` frame: one upload's ciphertexts under two CKKS key epochs.

With the publication epoch (the ``ckks`` mode's default) a participant encrypts its
matrix under the scoring epoch (``CKKS_SCORING``) and the publication epoch
(``CKKS_PUBLICATION``) and sends both in one frame of the ``ckks_upload`` kind of
:mod:`secure_fed.wire`: the header names each part's epoch (SM3 fingerprint of its
public context, Cheon-Kim-Kim-Song 2017 via TenSEAL) and length, the payload is the
scoring part then the publication part, each in the ``SFCKCT`` format of
:mod:`crypto.ckks.wire`. This module only frames and splits; the ciphertexts are
validated by :func:`crypto.ckks.load_encrypted` against their own epoch.
"""

from __future__ import annotations

from crypto.ckks import PublicContext
from secure_fed.errors import UploadMalformed
from secure_fed.wire import CKKS_UPLOAD, decode_frame, encode_frame

__all__ = ["encode_upload", "epoch_part", "split_upload"]


def encode_upload(
    scoring: bytes, publication: bytes, public: PublicContext, publication_ctx: PublicContext
) -> bytes:
    """Frame the two epochs' ciphertexts of one upload (``ckks_upload``)."""
    head = {
        "scoring": [public.fingerprint.hex(), len(scoring)],
        "publication": [publication_ctx.fingerprint.hex(), len(publication)],
    }
    return encode_frame(CKKS_UPLOAD, head, scoring + publication)


def split_upload(
    payload: bytes, public: PublicContext, publication: PublicContext
) -> tuple[bytes, bytes]:
    """Return ``(scoring, publication)`` ciphertext bytes of a ``ckks_upload`` frame.

    Checks the frame, that each part names its epoch's fingerprint and that the
    part lengths add up; the ciphertexts themselves are validated by
    :func:`crypto.ckks.load_encrypted`.

    Raises
    ------
    UploadMalformed
        A raw ciphertext, a bad frame, another epoch or inconsistent lengths.
    """
    if not isinstance(payload, bytes) or not payload.startswith(CKKS_UPLOAD.magic):
        raise UploadMalformed(
            "ckks upload refused: it must carry the publication epoch's ciphertexts"
        )
    head, body = decode_frame(payload, CKKS_UPLOAD, max_bytes=len(payload))
    parts = []
    for name, ctx in (("scoring", public), ("publication", publication)):
        part = head.get(name)
        if (
            not isinstance(part, list)
            or len(part) != 2
            or part[0] != ctx.fingerprint.hex()
            or not isinstance(part[1], int)
            or isinstance(part[1], bool)
            or part[1] < 1
        ):
            raise UploadMalformed(
                f"ckks upload refused: its {name} part is not [epoch fingerprint, length]"
            )
        parts.append(part[1])
    if sum(parts) != len(body):
        raise UploadMalformed(
            f"ckks upload refused: parts {parts} do not add up to {len(body)} bytes"
        )
    return body[: parts[0]], body[parts[0] :]


def epoch_part(payload: bytes, public: PublicContext) -> bytes:
    """Return the ciphertext bytes of ``payload`` under ``public``'s epoch (for an auditor).

    A ``ckks_upload`` frame yields the part naming that epoch's fingerprint; a raw
    ciphertext (no publication epoch) is returned as is.

    Raises
    ------
    UploadMalformed
        A malformed frame, or one with no part under that epoch.
    """
    if not payload.startswith(CKKS_UPLOAD.magic):
        return payload
    head, body = decode_frame(payload, CKKS_UPLOAD, max_bytes=len(payload))
    start = 0
    for name in ("scoring", "publication"):
        part = head.get(name)
        if not (isinstance(part, list) and len(part) == 2 and isinstance(part[1], int)):
            raise UploadMalformed(
                f"ckks upload refused: its {name} part is not [epoch fingerprint, length]"
            )
        if part[0] == public.fingerprint.hex():
            return body[start : start + part[1]]
        start += part[1]
    raise UploadMalformed("ckks upload holds no ciphertexts under this key epoch")

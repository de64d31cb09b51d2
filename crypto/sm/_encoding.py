"""Strict DER and PEM encodings for SM2 keys and signatures.

- Signatures: ``ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }``
  (GB/T 35276-2017 section 7.3, RFC 5480 section 2.2 shape), decoded strictly:
  minimal lengths, minimal positive integers, no trailing bytes.
- Public keys: X.509 ``SubjectPublicKeyInfo`` (RFC 5280 section 4.1, RFC 5480)
  with ``id-ecPublicKey`` and the SM2 curve OID 1.2.156.10197.1.301
  (GB/T 35276-2017), uncompressed point only, as OpenSSL writes it.
- Private keys: ``ECPrivateKey`` (RFC 5915) inside PKCS#8 (RFC 5208/5958).
- PEM: RFC 7468 textual encoding, exactly one block with an expected label.
"""

from __future__ import annotations

import base64
import binascii
import re

from Crypto.Util.asn1 import DerBitString, DerObjectId, DerOctetString, DerSequence

from crypto.errors import KeyInvalid, SignatureInvalid
from crypto.sm import _curve

__all__ = [
    "EC_PUBLIC_KEY_OID",
    "SM2_CURVE_OID",
    "decode_ec_private_key",
    "decode_signature",
    "decode_spki",
    "encode_ec_private_key",
    "encode_signature",
    "encode_spki",
    "pem_decode",
    "pem_encode",
]

EC_PUBLIC_KEY_OID = "1.2.840.10045.2.1"
SM2_CURVE_OID = "1.2.156.10197.1.301"
# SEQUENCE { SEQUENCE { id-ecPublicKey, sm2 }, BIT STRING (0 unused bits) 04 ... }
_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a811ccf5501822d03420004")
_SPKI_LEN = len(_SPKI_PREFIX) + 2 * _curve.COORD_BYTES
_MAX_SIGNATURE_LEN = 2 + 2 * (2 + 1 + _curve.COORD_BYTES)
MAX_PEM_LEN = 1 << 16
_PEM_RE = re.compile(
    rb"\A\s*-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\r\n]+?)\r?\n"
    rb"-----END ([A-Z0-9 ]+)-----\s*\Z"
)


def encode_signature(r: int, s: int) -> bytes:
    """Return the DER ``SEQUENCE { r, s }`` for ``1 <= r, s < n``."""
    body = _der_int(r) + _der_int(s)
    return b"\x30" + bytes([len(body)]) + body


def _der_int(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "big")  # room for a sign bit
    if len(raw) > 1 and raw[0] == 0 and raw[1] < 0x80:
        raw = raw[1:]
    return b"\x02" + bytes([len(raw)]) + raw


def decode_signature(der: bytes) -> tuple[int, int]:
    """Decode a DER SM2 signature strictly and range-check ``r`` and ``s``.

    Raises
    ------
    SignatureInvalid
        On any deviation from minimal DER, trailing bytes, or ``r``/``s``
        outside ``[1, n - 1]``.
    """
    if not isinstance(der, bytes | bytearray):
        raise SignatureInvalid(f"signature must be bytes, not {type(der).__name__}")
    der = bytes(der)
    if not 8 <= len(der) <= _MAX_SIGNATURE_LEN:
        raise SignatureInvalid(f"signature DER has {len(der)} bytes; expected 8 to 72")
    if der[0] != 0x30 or der[1] != len(der) - 2:
        raise SignatureInvalid("signature DER: not a SEQUENCE of the stated length (truncated?)")
    r, offset = _read_int(der, 2)
    s, offset = _read_int(der, offset)
    if offset != len(der):
        raise SignatureInvalid("signature DER: trailing bytes after s")
    for name, value in (("r", r), ("s", s)):
        if not 1 <= value < _curve.N:
            raise SignatureInvalid(f"signature {name} is outside [1, n-1]")
    return r, s


def _read_int(der: bytes, offset: int) -> tuple[int, int]:
    if offset + 2 > len(der) or der[offset] != 0x02:
        raise SignatureInvalid("signature DER: expected an INTEGER")
    length = der[offset + 1]
    start, end = offset + 2, offset + 2 + length
    if length == 0 or length > _curve.COORD_BYTES + 1 or end > len(der):
        raise SignatureInvalid("signature DER: INTEGER length invalid or truncated")
    raw = der[start:end]
    if raw[0] >= 0x80:
        raise SignatureInvalid("signature DER: negative INTEGER")
    if length > 1 and raw[0] == 0 and raw[1] < 0x80:
        raise SignatureInvalid("signature DER: non-minimal INTEGER encoding")
    return int.from_bytes(raw, "big"), end


def encode_spki(point: _curve.Point) -> bytes:
    """Return the DER SubjectPublicKeyInfo of an SM2 public point."""
    return _SPKI_PREFIX + point[0].to_bytes(32, "big") + point[1].to_bytes(32, "big")


def decode_spki(der: bytes) -> _curve.Point:
    """Decode an SM2 SubjectPublicKeyInfo and check the point is on the curve.

    Raises
    ------
    KeyInvalid
        If the structure is not exactly an uncompressed SM2 SPKI, or the
        point is not on the curve.
    """
    if not isinstance(der, bytes | bytearray):
        raise KeyInvalid(f"public key DER must be bytes, not {type(der).__name__}")
    der = bytes(der)
    if len(der) != _SPKI_LEN or not der.startswith(_SPKI_PREFIX):
        raise KeyInvalid(
            "public key DER is not an SM2 SubjectPublicKeyInfo "
            "(id-ecPublicKey, curve 1.2.156.10197.1.301, uncompressed point)"
        )
    body = der[len(_SPKI_PREFIX) :]
    return point_from_bytes(body)


def point_from_bytes(xy: bytes) -> _curve.Point:
    """Return the point ``x || y`` (64 bytes) after checking it is on the curve."""
    if len(xy) != 2 * _curve.COORD_BYTES:
        raise KeyInvalid(f"public point must be 64 bytes x||y, got {len(xy)}")
    point = (int.from_bytes(xy[:32], "big"), int.from_bytes(xy[32:], "big"))
    if not _curve.is_on_curve(point):
        raise KeyInvalid("public key point is not on the SM2 curve")
    return point


def encode_ec_private_key(d: int, point: _curve.Point) -> bytes:
    """Return RFC 5915 ``ECPrivateKey`` (version 1, 32-byte scalar, [1] public key)."""
    public_bits = DerBitString(b"\x04" + encode_spki(point)[len(_SPKI_PREFIX) :], explicit=1)
    return bytes(DerSequence([1, DerOctetString(d.to_bytes(32, "big")), public_bits]).encode())


def decode_ec_private_key(der: bytes) -> tuple[int, bytes | None]:
    """Decode RFC 5915 ``ECPrivateKey``; return the scalar and the embedded point, if any.

    Raises
    ------
    KeyInvalid
        On malformed DER, a wrong version, scalar length or curve parameters.
    """
    try:
        seq = DerSequence().decode(der, strict=True, nr_elements=range(2, 5))
        if seq[0] != 1:
            raise KeyInvalid("ECPrivateKey version must be 1")
        scalar = DerOctetString().decode(seq[1], strict=True).payload
        embedded: bytes | None = None
        for item in seq[2:]:
            tag = item[0]
            if tag == 0xA0:  # [0] ECParameters: must name the SM2 curve
                oid = DerObjectId(explicit=0).decode(item, strict=True).value
                if oid != SM2_CURVE_OID:
                    raise KeyInvalid(f"ECPrivateKey curve is {oid}, not SM2")
            elif tag == 0xA1:  # [1] publicKey BIT STRING
                bits = DerBitString(explicit=1).decode(item, strict=True).value
                if len(bits) != 65 or bits[0] != 0x04:
                    raise KeyInvalid("ECPrivateKey public key is not an uncompressed point")
                embedded = bytes(bits[1:])
            else:
                raise KeyInvalid("ECPrivateKey has an unexpected field")
    except (ValueError, TypeError, IndexError) as exc:
        raise KeyInvalid(f"malformed ECPrivateKey DER ({exc})") from None
    if len(scalar) != _curve.COORD_BYTES:
        raise KeyInvalid(f"ECPrivateKey scalar must be 32 bytes, got {len(scalar)}")
    return int.from_bytes(scalar, "big"), embedded


def pem_encode(der: bytes, label: str) -> bytes:
    """Return RFC 7468 PEM text (64-column base64) for ``der`` under ``label``."""
    b64 = base64.b64encode(der).decode("ascii")
    lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
    body = "\n".join(lines)
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n".encode("ascii")


def pem_decode(data: bytes, labels: tuple[str, ...]) -> tuple[str, bytes]:
    """Decode exactly one PEM block whose label is one of ``labels``.

    Returns
    -------
    tuple of (str, bytes)
        The label found and the DER body.

    Raises
    ------
    KeyInvalid
        If the text is too large, not a single PEM block, has an unexpected
        label or invalid base64.
    """
    if not isinstance(data, bytes | bytearray):
        raise KeyInvalid(f"PEM must be bytes, not {type(data).__name__}")
    if len(data) > MAX_PEM_LEN:
        raise KeyInvalid(f"PEM is {len(data)} bytes; the limit is {MAX_PEM_LEN}")
    match = _PEM_RE.match(bytes(data))
    if match is None:
        raise KeyInvalid("malformed PEM: expected exactly one -----BEGIN/END----- block")
    begin, body, end = match.groups()
    label = begin.decode("ascii")
    if begin != end or label not in labels:
        raise KeyInvalid(f"PEM label is {label!r}; expected one of {', '.join(labels)}")
    try:
        der = base64.b64decode(re.sub(rb"\s", b"", body), validate=True)
    except binascii.Error:
        raise KeyInvalid("malformed PEM: invalid base64 body") from None
    return label, der

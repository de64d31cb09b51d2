"""SM2 digital signatures with SM3 (GB/T 32918.2-2016, GB/T 32918.5-2017 curve).

Signing follows GB/T 32918.2 section 6.1: ``e = SM3(Z_A || M)`` with
``Z_A = SM3(ENTL_A || ID_A || a || b || x_G || y_G || x_A || y_A)``, a fresh
nonce ``k`` from :mod:`secrets`, ``r = (e + x_1) mod n`` and
``s = (1 + d)^-1 (k - r d) mod n``. The identity ``ID_A`` (``distid``) is always
explicit; the default is the GM/T 0009-2012 value ``1234567812345678`` (note
that OpenSSL 3.0's default is *empty*: pass ``-sigopt distid:...`` there).
Signatures are DER ``SEQUENCE { r, s }``, as OpenSSL produces and accepts.

The curve arithmetic is gmssl's (see :mod:`crypto.sm._curve`); everything else
(hashing, nonces, range checks, encodings) is done here.
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import NoReturn

from crypto.errors import KeyInvalid, ParameterInvalid, SignatureInvalid
from crypto.sm import _curve, _encoding
from crypto.sm._keyfile import (
    unwrap_private_key,
    wrap_private_key,
    wrap_private_key_insecure,
)
from crypto.sm.sm3 import SM3Hasher, sm3_digest

__all__ = ["DEFAULT_SM2_ID", "SM2PrivateKey", "SM2PublicKey"]

DEFAULT_SM2_ID = b"1234567812345678"
_MAX_ID_BYTES = 8191  # ENTL is a 16-bit count of *bits*
_CURVE_BYTES = b"".join(v.to_bytes(32, "big") for v in (_curve.A, _curve.B, *_curve.G))
_CHUNK = 1 << 20
_TOKEN = object()


def _check_distid(distid: bytes) -> bytes:
    if not isinstance(distid, bytes):
        raise ParameterInvalid(f"distid must be bytes, not {type(distid).__name__}")
    if len(distid) > _MAX_ID_BYTES:
        raise ParameterInvalid(f"distid is {len(distid)} bytes; at most {_MAX_ID_BYTES}")
    return distid


def _check_message(message: bytes) -> bytes:
    if not isinstance(message, bytes | bytearray | memoryview):
        raise ParameterInvalid(f"message must be bytes, not {type(message).__name__}")
    return bytes(message)


def _z_hasher(point: _curve.Point, distid: bytes) -> SM3Hasher:
    """Return an SM3 hasher already fed with ``Z_A`` (ready for the message)."""
    distid = _check_distid(distid)
    z = sm3_digest(
        (8 * len(distid)).to_bytes(2, "big")
        + distid
        + _CURVE_BYTES
        + point[0].to_bytes(32, "big")
        + point[1].to_bytes(32, "big")
    )
    hasher = SM3Hasher()
    hasher.update(z)
    return hasher


def _e_of(hasher: SM3Hasher) -> int:
    return int.from_bytes(hasher.digest(), "big")


def _refuse_pickle(kind: str) -> NoReturn:
    raise TypeError(f"{kind} cannot be pickled or copied; export it explicitly")


class SM2PublicKey:
    """An SM2 public key (a validated point of the SM2 curve).

    Build one with :meth:`from_pem`, :meth:`from_der` or
    :attr:`SM2PrivateKey.public_key`; direct construction is refused.
    """

    __slots__ = ("_point", "_der")

    def __init__(self, point: _curve.Point, *, _token: object = None) -> None:
        if _token is not _TOKEN:
            raise TypeError("use SM2PublicKey.from_pem or from_der")
        self._point = point
        self._der = _encoding.encode_spki(point)

    @classmethod
    def from_der(cls, data: bytes) -> SM2PublicKey:
        """Load a DER SubjectPublicKeyInfo (SM2 curve, uncompressed point).

        Raises
        ------
        KeyInvalid
            If the bytes are not an SM2 SPKI or the point is not on the curve.
        """
        return cls(_encoding.decode_spki(data), _token=_TOKEN)

    @classmethod
    def from_pem(cls, data: bytes) -> SM2PublicKey:
        """Load a ``PUBLIC KEY`` PEM block (as ``openssl pkey -pubout`` writes it).

        Raises
        ------
        KeyInvalid
            If the PEM is malformed, of another kind, or the key is invalid.
        """
        _, der = _encoding.pem_decode(data, ("PUBLIC KEY",))
        return cls.from_der(der)

    def to_der(self) -> bytes:
        """Return the DER SubjectPublicKeyInfo."""
        return self._der

    def to_pem(self) -> bytes:
        """Return the SubjectPublicKeyInfo as a ``PUBLIC KEY`` PEM block."""
        return _encoding.pem_encode(self._der, "PUBLIC KEY")

    def fingerprint(self) -> str:
        """Return the hex SM3 digest of the DER SubjectPublicKeyInfo."""
        return sm3_digest(self._der).hex()

    def verify(self, message: bytes, signature: bytes, *, distid: bytes = DEFAULT_SM2_ID) -> None:
        """Verify a DER SM2-with-SM3 signature; return ``None`` or raise.

        Parameters
        ----------
        message
            The signed bytes (hashed here with ``Z_A``).
        signature
            DER ``SEQUENCE { r, s }``.
        distid
            The signer's identity used in ``Z_A``.

        Raises
        ------
        SignatureInvalid
            If the signature is malformed, out of range, or does not verify.
        """
        hasher = _z_hasher(self._point, distid)
        hasher.update(_check_message(message))
        self._verify_e(_e_of(hasher), signature)

    def verify_file(
        self, path: str | os.PathLike[str], signature: bytes, *, distid: bytes = DEFAULT_SM2_ID
    ) -> None:
        """Verify a signature over a file's contents, streamed in 1 MiB chunks.

        Raises
        ------
        SignatureInvalid
            As :meth:`verify`.
        OSError
            If the file cannot be read.
        """
        hasher = _z_hasher(self._point, distid)
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                hasher.update(chunk)
        self._verify_e(_e_of(hasher), signature)

    def _verify_e(self, e: int, signature: bytes) -> None:
        r, s = _encoding.decode_signature(signature)
        t = (r + s) % _curve.N
        if t == 0:
            raise SignatureInvalid("signature does not verify (r + s = 0 mod n)")
        total = _curve.add(_curve.scalar_mult(s, _curve.G), _curve.scalar_mult(t, self._point))
        if total is None:
            raise SignatureInvalid("signature does not verify (sG + tP is infinity)")
        expected = ((e + total[0]) % _curve.N).to_bytes(32, "big")
        if not hmac.compare_digest(expected, r.to_bytes(32, "big")):
            raise SignatureInvalid("signature does not verify for this key, ID and message")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SM2PublicKey):
            return NotImplemented
        return self._der == other._der

    def __hash__(self) -> int:
        return hash(self._der)

    def __repr__(self) -> str:
        return f"SM2PublicKey(fingerprint={self.fingerprint()[:16]}...)"

    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        # Safe: a pickled public key is re-validated through from_der.
        return (SM2PublicKey.from_der, (self._der,))


class SM2PrivateKey:
    """An SM2 signing key: an opaque handle.

    Create with :meth:`generate` or :meth:`from_pem`. The scalar is never
    exposed, repr'd, pickled or copied; it leaves the process only through
    :meth:`to_pem` (encrypted) or the loudly named
    :meth:`to_pem_unencrypted_insecure`.
    """

    __slots__ = ("__d", "_public")

    def __init__(self, d: int, *, _token: object = None) -> None:
        if _token is not _TOKEN:
            raise TypeError("use SM2PrivateKey.generate or from_pem")
        if not 1 <= d <= _curve.N - 2:
            raise KeyInvalid("private scalar is outside [1, n-2]")
        self.__d = d
        self._public = SM2PublicKey(_curve.scalar_mult(d, _curve.G), _token=_TOKEN)

    @classmethod
    def generate(cls) -> SM2PrivateKey:
        """Generate a key with ``d`` uniform in ``[1, n-2]`` from :mod:`secrets`."""
        return cls(secrets.randbelow(_curve.N - 2) + 1, _token=_TOKEN)

    @classmethod
    def from_pem(cls, data: bytes, *, passphrase: bytes | None) -> SM2PrivateKey:
        """Load a PKCS#8 ``PRIVATE KEY`` or ``ENCRYPTED PRIVATE KEY`` PEM block.

        Parameters
        ----------
        data
            PEM text, e.g. from :meth:`to_pem` or ``openssl genpkey -algorithm SM2``.
        passphrase
            Required for an encrypted key; ``None`` only for an unencrypted one.

        Raises
        ------
        KeyInvalid
            On malformed PEM/DER, a wrong passphrase, a non-SM2 key, a scalar out
            of range, or an embedded public key that does not match the scalar.
        """
        label, der = _encoding.pem_decode(data, ("ENCRYPTED PRIVATE KEY", "PRIVATE KEY"))
        if label == "ENCRYPTED PRIVATE KEY" and passphrase is None:
            raise KeyInvalid("private key is encrypted; a passphrase is required")
        d, embedded = unwrap_private_key(der, passphrase)
        key = cls(d, _token=_TOKEN)
        if embedded is not None and embedded != key._public.to_der()[-64:]:
            raise KeyInvalid("embedded public key does not match the private scalar")
        return key

    def to_pem(self, *, passphrase: bytes) -> bytes:
        """Return the key as encrypted PKCS#8 PEM (PBES2: scrypt + AES-256-CBC).

        Raises
        ------
        KeyExportRefused
            If ``passphrase`` is empty or not bytes.
        """
        der = wrap_private_key(self.__ec_der(), passphrase)
        return _encoding.pem_encode(der, "ENCRYPTED PRIVATE KEY")

    def to_pem_unencrypted_insecure(self) -> bytes:
        """Return the key as *unencrypted* PKCS#8 PEM: the secret in clear text."""
        return _encoding.pem_encode(wrap_private_key_insecure(self.__ec_der()), "PRIVATE KEY")

    def __ec_der(self) -> bytes:
        return _encoding.encode_ec_private_key(self.__d, self._public._point)

    @property
    def public_key(self) -> SM2PublicKey:
        """The matching public key."""
        return self._public

    def sign(self, message: bytes, *, distid: bytes = DEFAULT_SM2_ID) -> bytes:
        """Sign ``message`` with SM2-with-SM3; return a DER signature.

        Parameters
        ----------
        message
            Bytes to sign.
        distid
            Signer identity in ``Z_A`` (default ``1234567812345678``).

        Returns
        -------
        bytes
            DER ``SEQUENCE { r, s }`` (70 to 72 bytes, usually).
        """
        hasher = _z_hasher(self._public._point, distid)
        hasher.update(_check_message(message))
        return self._sign_e(_e_of(hasher), None)

    def sign_file(self, path: str | os.PathLike[str], *, distid: bytes = DEFAULT_SM2_ID) -> bytes:
        """Sign a file's contents, streamed in 1 MiB chunks; return a DER signature."""
        hasher = _z_hasher(self._public._point, distid)
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                hasher.update(chunk)
        return self._sign_e(_e_of(hasher), None)

    def _sign_e(self, e: int, fixed_k: int | None) -> bytes:
        d = self.__d
        while True:
            k = fixed_k if fixed_k is not None else secrets.randbelow(_curve.N - 1) + 1
            x1, _ = _curve.scalar_mult(k, _curve.G)
            r = (e + x1) % _curve.N
            s = pow(1 + d, -1, _curve.N) * (k - r * d) % _curve.N
            if r != 0 and r + k != _curve.N and s != 0:
                return _encoding.encode_signature(r, s)
            if fixed_k is not None:
                raise ParameterInvalid("fixed nonce k gives a degenerate signature")

    def __repr__(self) -> str:
        return f"SM2PrivateKey(public_fingerprint={self._public.fingerprint()[:16]}...)"

    def __reduce__(self) -> NoReturn:
        _refuse_pickle("SM2PrivateKey")

    def __copy__(self) -> NoReturn:
        _refuse_pickle("SM2PrivateKey")

    def __deepcopy__(self, memo: object) -> NoReturn:
        _refuse_pickle("SM2PrivateKey")


def _sign_with_fixed_nonce_for_tests(
    key: SM2PrivateKey, message: bytes, k: int, *, distid: bytes = DEFAULT_SM2_ID
) -> bytes:
    """Sign with a caller-chosen nonce: ONLY for known-answer tests (GB/T 32918 Annex A).

    Reusing or predicting ``k`` reveals the private key; never call this elsewhere.
    """
    if not 1 <= k < _curve.N:
        raise ParameterInvalid("k must be in [1, n-1]")
    hasher = _z_hasher(key.public_key._point, distid)
    hasher.update(_check_message(message))
    return key._sign_e(_e_of(hasher), k)


def _private_key_from_scalar_for_tests(d: int) -> SM2PrivateKey:
    """Build a key from a known scalar: ONLY for known-answer tests."""
    return SM2PrivateKey(d, _token=_TOKEN)

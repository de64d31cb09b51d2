"""CKKS key handles: the key authority's secret keys and the public context.

The key authority generates one key set per *key epoch* with
:func:`generate_keys`. Everyone else receives only the :class:`PublicContext`
(public key plus the evaluation keys the preset needs), serialized once and
named by its SM3 fingerprint (GB/T 32905-2016); ciphertexts cite that
fingerprint instead of carrying a copy of the context.

Handles are opaque (Tink's ``KeysetHandle`` is the model): they cannot be
built directly, pickled or copied, and their ``repr`` names the preset and the
fingerprint only. Exporting the secret key is the one loudly named function
:func:`crypto.ckks.export_secret_key_encrypted`.
"""

from __future__ import annotations

import hmac
import logging
from typing import NoReturn

import numpy as np

from crypto.ckks import _tenseal
from crypto.ckks._tenseal import TsContext
from crypto.ckks.presets import CkksPreset, get_preset
from crypto.errors import (
    ContextMismatch,
    KeyExportRefused,
    KeyInvalid,
    ParameterInvalid,
    ReleaseLimitReached,
)
from crypto.sm import sm3_digest

__all__ = ["KeyAuthorityKeys", "PublicContext", "generate_keys", "resume_release_count"]

logger = logging.getLogger(__name__)

_TOKEN = object()
FINGERPRINT_SIZE = 32


def _public_bytes(ctx: TsContext, preset: CkksPreset) -> bytes:
    return bytes(
        ctx.serialize(
            save_public_key=True,
            save_secret_key=False,
            save_galois_keys=preset.galois_keys,
            save_relin_keys=preset.relin_keys,
        )
    )


def _check_parameters(ctx: TsContext, preset: CkksPreset, *, eval_keys: bool = True) -> None:
    """Raise ContextMismatch unless ``ctx`` uses exactly the preset's N and primes."""
    reference = _reference_parms_id(preset)
    if _tenseal.first_parms_id(ctx) != reference:
        raise ContextMismatch(f"context parameters are not those of preset {preset.name}")
    if float(ctx.global_scale) != preset.scale:
        raise ContextMismatch(f"context scale is not 2^{preset.scale_bits} ({preset.name})")
    if not eval_keys:
        return
    if preset.relin_keys and not bool(ctx.has_relin_keys()):
        raise ContextMismatch(f"{preset.name} context lacks its relinearization keys")
    if preset.galois_keys and not bool(ctx.has_galois_keys()):
        raise ContextMismatch(f"{preset.name} context lacks its Galois keys")


_PARMS_CACHE: dict[str, tuple[int, ...]] = {}


def _reference_parms_id(preset: CkksPreset) -> tuple[int, ...]:
    # parms_id is SEAL's hash of (N, primes); primes are chosen deterministically.
    if preset.name not in _PARMS_CACHE:
        ctx = _tenseal.new_context(
            poly_modulus_degree=preset.poly_modulus_degree,
            coeff_mod_bit_sizes=preset.coeff_mod_bit_sizes,
            scale_bits=preset.scale_bits,
        )
        _PARMS_CACHE[preset.name] = _tenseal.first_parms_id(ctx)
    return _PARMS_CACHE[preset.name]


class PublicContext:
    """Public CKKS context of one key epoch: encrypts and evaluates, never decrypts.

    Obtain it from :attr:`KeyAuthorityKeys.public_context` or
    :meth:`PublicContext.from_bytes`. :attr:`data` is what is distributed,
    :attr:`fingerprint` (SM3 of :attr:`data`) is what ciphertexts cite.
    """

    __slots__ = ("_ctx", "_data", "_fingerprint", "_preset")

    def __init__(self, token: object, ctx: TsContext, data: bytes, preset: CkksPreset) -> None:
        if token is not _TOKEN:
            raise TypeError("use PublicContext.from_bytes or KeyAuthorityKeys.public_context")
        self._ctx = ctx
        self._data = data
        self._fingerprint = sm3_digest(data)
        self._preset = preset

    @classmethod
    def from_bytes(
        cls, data: bytes, *, preset: str, expected_fingerprint: bytes, max_bytes: int = 64 << 20
    ) -> PublicContext:
        """Load a distributed public context after checking size and fingerprint.

        Parameters
        ----------
        data
            The serialized public context.
        preset
            Name of the preset it must match.
        expected_fingerprint
            The 32-byte SM3 fingerprint announced for the key epoch.
        max_bytes
            Refuse larger inputs before parsing.

        Raises
        ------
        ContextMismatch
            Wrong fingerprint, wrong parameters or missing evaluation keys.
        KeyInvalid
            Oversized or unparsable bytes, or the context holds a secret key.
        """
        p = get_preset(preset)
        if not isinstance(data, bytes) or len(data) > max_bytes:
            raise KeyInvalid(f"public context must be bytes of at most {max_bytes} bytes")
        if not hmac.compare_digest(sm3_digest(data), bytes(expected_fingerprint)):
            raise ContextMismatch("public context does not match the expected SM3 fingerprint")
        try:
            ctx = _tenseal.load_context(data)
        except Exception as exc:  # TenSEAL raises bare C++ exceptions
            raise KeyInvalid(f"public context does not parse: {type(exc).__name__}") from None
        if not bool(ctx.is_public()):
            raise KeyInvalid("a public context must not carry a secret key")
        _check_parameters(ctx, p)
        return cls(_TOKEN, ctx, data, p)

    @property
    def preset(self) -> CkksPreset:
        """The preset this context was generated for."""
        return self._preset

    @property
    def fingerprint(self) -> bytes:
        """SM3 digest of :attr:`data`: the key epoch's identifier."""
        return self._fingerprint

    @property
    def data(self) -> bytes:
        """The serialized public context, distributed once per key epoch."""
        return self._data

    def __repr__(self) -> str:
        return f"PublicContext({self._preset.name}, fingerprint={self._fingerprint.hex()[:16]})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("distribute PublicContext.data, not a pickle")


class KeyAuthorityKeys:
    """The key authority's CKKS key set (secret key inside); opaque.

    Raises
    ------
    KeyExportRefused
        On pickling or copying; use ``export_secret_key_encrypted``.
    """

    __slots__ = ("_ctx", "_public", "_preset", "_releases")

    def __init__(
        self, token: object, ctx: TsContext, preset: CkksPreset, public_data: bytes | None = None
    ) -> None:
        if token is not _TOKEN:
            raise TypeError("use crypto.ckks.generate_keys or import_secret_key_encrypted")
        if not bool(ctx.has_secret_key()):
            raise KeyInvalid("a key-authority context must hold the secret key")
        # Imported key sets carry the epoch's public context separately: TenSEAL does
        # not serialize evaluation keys next to a secret key, and regenerating them
        # would change the epoch's fingerprint.
        _check_parameters(ctx, preset, eval_keys=public_data is None)
        data = _public_bytes(ctx, preset) if public_data is None else public_data
        try:
            public_ctx = _tenseal.load_context(data)
        except Exception as exc:  # TenSEAL raises bare C++ exceptions
            raise KeyInvalid(f"public context does not parse: {type(exc).__name__}") from None
        if not bool(public_ctx.is_public()):
            raise KeyInvalid("the public context of a key set must not carry a secret key")
        _check_parameters(public_ctx, preset)
        if public_data is not None:
            _check_pair(ctx, public_ctx)
        self._ctx = ctx
        self._preset = preset
        self._public = PublicContext(_TOKEN, public_ctx, data, preset)
        self._releases = 0

    @property
    def preset(self) -> CkksPreset:
        """The preset of this key epoch."""
        return self._preset

    @property
    def public_context(self) -> PublicContext:
        """The matching public context (no secret key)."""
        return self._public

    @property
    def fingerprint(self) -> bytes:
        """SM3 fingerprint of the public context (the key epoch's identifier)."""
        return self._public.fingerprint

    @property
    def releases(self) -> int:
        """Ciphertexts decrypted and released by this handle (the ``t`` of the flooding bound).

        :func:`crypto.ckks.decrypt_aggregate` and :func:`crypto.ckks.decrypt_score`
        refuse beyond the preset's ``max_decryptions``; the key-authority runtime
        may stop earlier and rotates the key epoch. Not persisted across imports.
        """
        return self._releases

    def __repr__(self) -> str:
        return (
            f"KeyAuthorityKeys({self._preset.name}, "
            f"fingerprint={self.fingerprint.hex()[:16]}, secret=<hidden>)"
        )

    def __reduce__(self) -> NoReturn:
        raise KeyExportRefused(
            "CKKS secret keys cannot be pickled; use export_secret_key_encrypted"
        )

    def __copy__(self) -> NoReturn:
        raise KeyExportRefused("CKKS secret keys cannot be copied")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise KeyExportRefused("CKKS secret keys cannot be copied")


def _check_pair(private: TsContext, public: TsContext) -> None:
    """Raise KeyInvalid unless the secret key decrypts what the public key encrypts."""
    probe = np.array([1.0, -2.0, 0.5])
    vector = _tenseal.encrypt_vector(public, probe)
    got = _tenseal.decrypt_vector(private, vector)
    if got.shape != probe.shape or not np.allclose(got, probe, atol=1e-3):
        raise KeyInvalid("the secret key does not match the public context's public key")


def generate_keys(preset: str) -> KeyAuthorityKeys:
    """Generate a fresh key epoch for ``preset`` (key authority only).

    Parameters
    ----------
    preset
        A registered preset name, e.g. ``"CKKS_AGGREGATION"``.

    Returns
    -------
    KeyAuthorityKeys
        Secret key, public key and exactly the evaluation keys the preset needs.

    Raises
    ------
    ParameterInvalid
        If ``preset`` is not registered.
    """
    p = get_preset(preset)
    ctx = _tenseal.new_context(
        poly_modulus_degree=p.poly_modulus_degree,
        coeff_mod_bit_sizes=p.coeff_mod_bit_sizes,
        scale_bits=p.scale_bits,
    )
    if p.relin_keys:
        ctx.generate_relin_keys()
    if p.galois_keys:
        ctx.generate_galois_keys()
    keys = KeyAuthorityKeys(_TOKEN, ctx, p)
    logger.info("generated CKKS key epoch %s for %s", keys.fingerprint.hex()[:16], p.name)
    return keys


def _keys_from_context(ctx: TsContext, preset: CkksPreset, public_data: bytes) -> KeyAuthorityKeys:
    """Wrap an imported private context and its epoch's public context."""
    return KeyAuthorityKeys(_TOKEN, ctx, preset, public_data)


def _private_context(keys: KeyAuthorityKeys) -> TsContext:
    if not isinstance(keys, KeyAuthorityKeys):
        raise ParameterInvalid(f"keys must be KeyAuthorityKeys, not {type(keys).__name__}")
    return keys._ctx


def _reserve_releases(keys: KeyAuthorityKeys, count: int) -> None:
    """Count ``count`` decrypted ciphertexts, refusing beyond the preset's ``max_decryptions``.

    Raises
    ------
    ReleaseLimitReached
        If the epoch would release more ciphertexts than its flooding is sized for;
        nothing is counted then.
    """
    limit = keys._preset.max_decryptions
    if keys._releases + count > limit:
        raise ReleaseLimitReached(
            f"key epoch {keys.fingerprint.hex()[:16]} released {keys._releases} of the "
            f"{limit} ciphertexts {keys._preset.name} is sized for; {count} more would "
            f"lower its flooding below {keys._preset.guaranteed_bits:.0f} bits: rotate the keys"
        )
    keys._releases += count


def resume_release_count(keys: KeyAuthorityKeys, count: int) -> None:
    """Count ``count`` ciphertexts an earlier process of this epoch already released.

    A key set imported after a restart counts from zero; the key authority
    restores the count it persisted, so the epoch never releases more than its
    preset's ``max_decryptions`` across restarts. The count only ever grows.

    Raises
    ------
    ParameterInvalid
        If ``count`` is not an integer >= 0.
    ReleaseLimitReached
        If the restored count exceeds the preset's ``max_decryptions``.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ParameterInvalid(f"count must be an integer >= 0, got {count!r}")
    if not isinstance(keys, KeyAuthorityKeys):
        raise ParameterInvalid(f"keys must be KeyAuthorityKeys, not {type(keys).__name__}")
    _reserve_releases(keys, count)


def _public_ts(public: PublicContext) -> TsContext:
    if not isinstance(public, PublicContext):
        raise ParameterInvalid(f"context must be PublicContext, not {type(public).__name__}")
    return public._ctx

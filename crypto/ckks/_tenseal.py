"""Typed boundary around TenSEAL 0.3.18 (Microsoft SEAL 4 underneath).

TenSEAL ships no type stubs, so every call into it goes through this module:
the rest of :mod:`crypto.ckks` sees opaque :data:`TsContext` / :data:`TsVector`
aliases and typed helpers, and every TenSEAL/SEAL exception is translated into
a :mod:`crypto.errors` type here or by the caller that knows what was asked.

References
----------
Benaissa et al., "TenSEAL: A Library for Encrypted Tensor Operations Using
Homomorphic Encryption", ICLR 2021 workshop (arXiv:2104.03152).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

import numpy as np
import tenseal as ts
import tenseal.sealapi as sealapi
from numpy.typing import NDArray

from crypto.errors import DecryptionFailed

__all__ = [
    "TsContext",
    "TsVector",
    "chain_index",
    "ciphertext_facts",
    "decrypt_vector",
    "encrypt_vector",
    "load_context",
    "lazy_vector",
    "new_context",
    "primes",
]

TsContext: TypeAlias = Any
"""A ``tenseal.Context`` (untyped library object)."""

TsVector: TypeAlias = Any
"""A ``tenseal.CKKSVector`` (untyped library object)."""


def new_context(
    *, poly_modulus_degree: int, coeff_mod_bit_sizes: Sequence[int], scale_bits: int
) -> TsContext:
    """Create a private CKKS context (secret key inside) with a global scale."""
    ctx = ts.context(
        ts.SCHEME_TYPE.CKKS,
        poly_modulus_degree=poly_modulus_degree,
        coeff_mod_bit_sizes=list(coeff_mod_bit_sizes),
    )
    ctx.global_scale = float(2**scale_bits)
    return ctx


def load_context(data: bytes) -> TsContext:
    """Parse serialized context bytes (the caller has size-checked them)."""
    return ts.context_from(data)


def encrypt_vector(ctx: TsContext, values: NDArray[np.float64]) -> TsVector:
    """Encrypt one run of at most ``N/2`` values with the context's public key."""
    return ts.ckks_vector(ctx, values.tolist())


def lazy_vector(data: bytes) -> TsVector:
    """Parse vector bytes without a context; SEAL validates at link time."""
    return ts.lazy_ckks_vector_from(data)


def decrypt_vector(ctx: TsContext, vector: TsVector) -> NDArray[np.float64]:
    """Decrypt with the secret key held by ``ctx``.

    Raises
    ------
    DecryptionFailed
        If ``ctx`` holds no secret key (a public context) or SEAL refuses.
    """
    if not bool(ctx.has_secret_key()):
        raise DecryptionFailed("this context holds no secret key: a public context cannot decrypt")
    vector.link_context(ctx)
    try:
        plain = vector.decrypt()
    except (ValueError, RuntimeError) as exc:
        raise DecryptionFailed(f"CKKS decryption refused: {type(exc).__name__}") from None
    return np.asarray(plain, dtype=np.float64)


def chain_index(ctx: TsContext, parms_id: Sequence[int]) -> int:
    """Return the modulus-chain index of ``parms_id`` (-1 if unknown to ``ctx``)."""
    data = ctx.seal_context().data.get_context_data(list(parms_id))
    if data is None:
        return -1
    return int(data.chain_index())


def first_parms_id(ctx: TsContext) -> tuple[int, ...]:
    """Return the parms_id of the top data level (hash of N and the primes)."""
    return tuple(int(x) for x in ctx.seal_context().data.first_parms_id())


def ciphertext_facts(vector: TsVector) -> list[tuple[int, int, int, float, tuple[int, ...]]]:
    """Per SEAL ciphertext: (size, poly degree, coeff-modulus size, scale, parms_id)."""
    facts = []
    for ct in cast(list[Any], vector.ciphertext()):
        facts.append(
            (
                int(ct.size()),
                int(ct.poly_modulus_degree()),
                int(ct.coeff_modulus_size()),
                float(ct.scale),
                tuple(int(x) for x in ct.parms_id()),
            )
        )
    return facts


@functools.lru_cache(maxsize=16)
def primes(poly_modulus_degree: int, coeff_mod_bit_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Return SEAL's primes for these sizes (deterministic: what every context uses)."""
    moduli = sealapi.CoeffModulus.Create(poly_modulus_degree, list(coeff_mod_bit_sizes))
    return tuple(int(m.value()) for m in moduli)

"""Named CKKS parameter presets and their registry (callers state goals, not knobs).

Each preset fixes the ring degree ``N``, the coefficient-modulus primes, the
scale and which evaluation keys exist. Every preset is checked against the
HomomorphicEncryption.org security standard (Albrecht et al., "Homomorphic
Encryption Security Standard", 2018, table for ternary secrets): at 128-bit
classical security the total coefficient-modulus bits may not exceed
109 / 218 / 438 for ``N`` = 4096 / 8192 / 16384.

CKKS itself: Cheon, Kim, Kim, Song, "Homomorphic Encryption for Arithmetic of
Approximate Numbers", ASIACRYPT 2017. Parameters and the measurements behind
them are in ``docs/crypto-ckks.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from crypto.ckks._tenseal import primes
from crypto.errors import ParameterInvalid

__all__ = [
    "CKKS_AGGREGATION",
    "CKKS_AGGREGATION_STRICT",
    "CKKS_PUBLICATION",
    "CKKS_SCORING",
    "HE_STANDARD_MAX_BITS_128",
    "PRESETS",
    "CkksPreset",
    "get_preset",
]

HE_STANDARD_MAX_BITS_128: Mapping[int, int] = MappingProxyType(
    {1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}
)
"""Largest total ``log2 q`` with 128-bit security, per ring degree ``N``."""

WeightEncoding = Literal["integer", "scalar"]


@dataclass(frozen=True, slots=True)
class CkksPreset:
    """One named CKKS configuration; construct only through this module.

    Attributes
    ----------
    name
        Registry name, e.g. ``"CKKS_AGGREGATION"``.
    wire_id
        One byte naming the preset inside wire headers.
    poly_modulus_degree
        Ring degree ``N``; a ciphertext holds ``N/2`` values.
    coeff_mod_bit_sizes
        Prime sizes; the last is SEAL's special (key-switching) prime and never
        travels with a ciphertext.
    scale_bits
        ``log2`` of the encoding scale ``Delta``.
    depth
        Multiplicative depth (rescalings) the chain allows.
    relin_keys, galois_keys
        Whether the public context carries these evaluation keys.
    weight_encoding
        ``"integer"``: weights become integers ``W_k = w_k 2^weight_bits`` applied
        by additions only (depth 0); ``"scalar"``: plaintext-scalar multiply and
        rescale (depth 1).
    weight_bits
        Fractional bits of the integer weights (``"integer"`` encoding only).
    input_bound
        Public clip bound of every encrypted value (``|x| <= input_bound``).
    error_budget
        The preset's stated error budget for the result it is meant for:
        absolute for the weighted sum, relative for the distance score.
    decryption_error_bound
        Bound ``E`` of the CKKS error of that result, in value units: the
        measured maximum rounded up to a power of two (aggregation: worst case
        of one weight equal to 1 over 100,000 values; scores: mean scores up
        to 16). Measurements in ``docs/crypto-ckks.md``. The preset's error
        budget (:attr:`error_budget`) holds for ``E`` plus 5.5 ``flood_sigma``.
    flood_sigma
        Standard deviation of the Gaussian noise added to every value that
        leaves the key authority decrypted: value units for aggregates; for
        scores relative, ``flood_sigma * max(|score|, 1)``, so that the relative
        error budget holds for every score (scores below 1 get the absolute
        noise of a score of 1).
    max_decryptions
        Decrypted ciphertexts one key epoch may release: the ``t`` the flooding is
        sized for. :func:`crypto.ckks.decrypt_aggregate` and
        :func:`crypto.ckks.decrypt_score` refuse beyond it
        (``CRYPTO_RELEASE_LIMIT_REACHED``); :attr:`guaranteed_bits` (the
        :meth:`flood_bits` at this ``t``) is the statistical security the preset keeps.
    """

    name: str
    wire_id: int
    purpose: str
    poly_modulus_degree: int
    coeff_mod_bit_sizes: tuple[int, ...]
    scale_bits: int
    depth: int
    relin_keys: bool
    galois_keys: bool
    weight_encoding: WeightEncoding
    weight_bits: int
    input_bound: float
    error_budget: float
    decryption_error_bound: float
    flood_sigma: float
    max_decryptions: int

    def __post_init__(self) -> None:
        bound = HE_STANDARD_MAX_BITS_128.get(self.poly_modulus_degree)
        if bound is None:
            allowed = ", ".join(str(n) for n in HE_STANDARD_MAX_BITS_128)
            raise ParameterInvalid(f"poly_modulus_degree must be one of {allowed}")
        if self.total_bits > bound:
            raise ParameterInvalid(
                f"coeff_mod_bit_sizes total {self.total_bits} bits exceeds the 128-bit "
                f"HE-standard bound {bound} for N={self.poly_modulus_degree}"
            )
        if self.depth != len(self.coeff_mod_bit_sizes) - 2:
            raise ParameterInvalid("depth must equal the number of rescaling primes")
        if not isinstance(self.max_decryptions, int) or self.max_decryptions < 1:
            raise ParameterInvalid(
                f"max_decryptions must be an integer >= 1, got {self.max_decryptions!r}"
            )

    def flood_bits(self, decryptions: int) -> float:
        """Statistical security ``s`` of the flooding after ``decryptions`` releases.

        Solves ``flood_sigma = E * 2^(s/2) * sqrt(64 t)`` (Li, Micciancio, Schultz,
        Sorrell, CRYPTO 2022) with ``E = decryption_error_bound``; each decrypted
        ciphertext counts as one decryption.

        Raises
        ------
        ParameterInvalid
            If ``decryptions`` is not a positive integer.
        """
        if not isinstance(decryptions, int) or isinstance(decryptions, bool) or decryptions < 1:
            raise ParameterInvalid(f"decryptions must be a positive integer, got {decryptions!r}")
        ratio = self.flood_sigma / self.decryption_error_bound
        return 2.0 * (math.log2(ratio) - 0.5 * math.log2(64 * decryptions))

    @property
    def guaranteed_bits(self) -> float:
        """Statistical security of the flooding at :attr:`max_decryptions` (the epoch's end)."""
        return self.flood_bits(self.max_decryptions)

    @property
    def total_bits(self) -> int:
        """Total bits of the coefficient modulus including the special prime."""
        return sum(self.coeff_mod_bit_sizes)

    @property
    def data_primes(self) -> int:
        """Number of primes a fresh ciphertext carries (special prime excluded)."""
        return len(self.coeff_mod_bit_sizes) - 1

    @property
    def slots(self) -> int:
        """Values per ciphertext (``N/2``)."""
        return self.poly_modulus_degree // 2

    @property
    def scale(self) -> float:
        """The encoding scale ``Delta = 2^scale_bits``."""
        return float(2**self.scale_bits)

    def rescale_factor(self, level: int) -> float:
        """``q / Delta`` for the prime dropped when rescaling from ``level`` primes.

        TenSEAL resets the scale to ``Delta`` after each rescale although SEAL
        divided by the prime ``q``; multiplying the plaintext operand by this
        factor cancels the resulting ``Delta / q`` bias exactly.
        """
        if not 2 <= level <= self.data_primes:
            raise ParameterInvalid(f"level must be in [2, {self.data_primes}], got {level}")
        q = primes(self.poly_modulus_degree, self.coeff_mod_bit_sizes)[level - 1]
        return q / self.scale

    @property
    def max_ciphertext_bytes(self) -> int:
        """Upper bound of one serialized fresh ciphertext (uncompressed SEAL size + slack)."""
        raw = 2 * self.poly_modulus_degree * self.data_primes * 8
        return raw + raw // 64 + 4096


CKKS_AGGREGATION = CkksPreset(
    name="CKKS_AGGREGATION",
    wire_id=1,
    purpose="weighted sums of predictions only (no ciphertext multiplication)",
    poly_modulus_degree=4096,
    coeff_mod_bit_sizes=(60, 49),
    scale_bits=35,
    depth=0,
    relin_keys=False,
    galois_keys=False,
    weight_encoding="integer",
    weight_bits=20,
    input_bound=8.0,
    error_budget=5e-4,
    decryption_error_bound=2.0**-22,
    flood_sigma=2.0**-14,
    max_decryptions=1024,
)

CKKS_AGGREGATION_STRICT = CkksPreset(
    name="CKKS_AGGREGATION_STRICT",
    wire_id=3,
    purpose="weighted sums with strong flooding (s = 42 - log2 t) at about 43 bytes per value",
    poly_modulus_degree=4096,
    coeff_mod_bit_sizes=(60, 16, 33),
    scale_bits=51,
    depth=1,
    relin_keys=False,
    galois_keys=False,
    weight_encoding="integer",
    weight_bits=20,
    input_bound=8.0,
    error_budget=5e-4,
    decryption_error_bound=2.0**-38,
    flood_sigma=2.0**-14,
    max_decryptions=1024,
)

CKKS_SCORING = CkksPreset(
    name="CKKS_SCORING",
    wire_id=2,
    purpose="depth-2 Mahalanobis scoring: plaintext-matrix multiply, square, slot sum",
    poly_modulus_degree=8192,
    coeff_mod_bit_sizes=(60, 32, 32, 60),
    scale_bits=32,
    depth=2,
    relin_keys=True,
    galois_keys=True,
    weight_encoding="scalar",
    weight_bits=0,
    input_bound=8.0,
    error_budget=1e-3,
    decryption_error_bound=2.0**-15,
    flood_sigma=2.0**-13,
    max_decryptions=1 << 16,
)

CKKS_PUBLICATION = CkksPreset(
    name="CKKS_PUBLICATION",
    wire_id=4,
    purpose="the published weighted sum, flooded at s >= 40 for 16,384 ciphertexts per epoch",
    poly_modulus_degree=4096,
    coeff_mod_bit_sizes=(60, 30, 19),
    scale_bits=58,
    depth=1,
    relin_keys=False,
    galois_keys=False,
    weight_encoding="integer",
    weight_bits=20,
    input_bound=8.0,
    error_budget=5e-4,
    decryption_error_bound=2.0**-44,
    flood_sigma=2.0**-14,
    max_decryptions=1 << 14,
)

PRESETS: Mapping[str, CkksPreset] = MappingProxyType(
    {p.name: p for p in (CKKS_AGGREGATION, CKKS_AGGREGATION_STRICT, CKKS_SCORING, CKKS_PUBLICATION)}
)
"""Registry of every preset, by name."""

_BY_WIRE_ID: Mapping[int, CkksPreset] = MappingProxyType({p.wire_id: p for p in PRESETS.values()})


def get_preset(name: str) -> CkksPreset:
    """Return the preset registered under ``name``.

    Raises
    ------
    ParameterInvalid
        If no preset has that name; the message lists the registered names.
    """
    preset = PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        allowed = ", ".join(sorted(PRESETS))
        raise ParameterInvalid(f"unknown CKKS preset {name!r}; allowed: {allowed}")
    return preset


def preset_by_wire_id(wire_id: int) -> CkksPreset | None:
    """Return the preset with this wire byte, or ``None``."""
    return _BY_WIRE_ID.get(wire_id)

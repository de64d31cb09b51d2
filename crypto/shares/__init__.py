"""Secret shares over Z_2^64: fixed-point codec, additive sharing, PRG seeds, Beaver triples.

Shares mode of secure-fed (``docs/crypto-shares.md``): a participant encodes its
clipped predictions with :data:`RING_PREDICTIONS`, splits them with
:func:`split_with_seed`, sends the explicit share to the aggregator and the
32-byte seed to the helper; the key authority deals Beaver triples and the
material of the range check (:mod:`crypto.shares.range_check`) that rejects an
upload with any value outside the public bound.
"""

from crypto.shares.additive import (
    ShareBundle,
    WireSizes,
    reconstruct,
    split,
    split_with_seed,
    wire_bytes_per_value,
)
from crypto.shares.beaver import BeaverParty, TripleShare, deal_triples, secure_multiply
from crypto.shares.bounds import EncodedMatrix, encode_quadratic_form
from crypto.shares.codec import RING_PREDICTIONS, RING_WEIGHTS, FixedPointCodec
from crypto.shares.prg import ShareLabel, expand_seed
from crypto.shares.range_check import (
    RANGE_PREDICTIONS,
    RangeCheckParty,
    RangeCost,
    RangeMaterial,
    RangeSpec,
    deal_range_check,
    range_check,
    range_cost,
    range_verdicts,
    require_in_range,
)
from crypto.shares.wire import ShareMacKey

__all__ = [
    "RANGE_PREDICTIONS",
    "RING_PREDICTIONS",
    "RING_WEIGHTS",
    "BeaverParty",
    "EncodedMatrix",
    "RangeCheckParty",
    "RangeCost",
    "RangeMaterial",
    "RangeSpec",
    "FixedPointCodec",
    "ShareBundle",
    "ShareLabel",
    "ShareMacKey",
    "TripleShare",
    "WireSizes",
    "deal_range_check",
    "deal_triples",
    "encode_quadratic_form",
    "expand_seed",
    "range_check",
    "range_cost",
    "range_verdicts",
    "reconstruct",
    "require_in_range",
    "secure_multiply",
    "split",
    "split_with_seed",
    "wire_bytes_per_value",
]

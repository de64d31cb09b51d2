r"""Canonical JSON for audit entries: one byte string per value, no floats.

Audit entries are hashed into the Merkle tree (RFC 9162 section 2.1), so the
same value must always give the same bytes. The encoding follows the spirit of
RFC 8785 (JSON Canonicalization Scheme) with stricter number rules:

* object keys are strings, sorted by Unicode code point; no duplicates;
* no insignificant whitespace (``,`` and ``:`` separators);
* UTF-8, non-ASCII characters written as themselves (not ``\u`` escapes);
* integers only: floats, NaN and infinities are rejected. Quantities such as
  epsilons travel as :class:`decimal.Decimal` and are written as decimal
  strings (``format(d, "f")``), so nothing is ever rounded by binary floating
  point.

:func:`decode` is the strict inverse for stored bytes: it refuses floats,
duplicate keys and any byte string that is not already canonical.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from privacy_ledger.errors import CanonicalJSONInvalid

__all__ = ["encode", "decode", "decimal_from_float", "MAX_CANONICAL_BYTES"]

#: Largest canonical document accepted by :func:`decode` (untrusted bytes are size-checked).
MAX_CANONICAL_BYTES = 1 << 20
_MAX_DEPTH = 32
_MAX_DECIMAL_CHARS = 100


def _prepare(value: object, path: str, depth: int) -> object:
    if depth > _MAX_DEPTH:
        raise CanonicalJSONInvalid(f"{path}: nesting deeper than {_MAX_DEPTH}")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        raise CanonicalJSONInvalid(
            f"{path}: float {value!r} not allowed; pass decimal.Decimal or a decimal string"
        )
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise CanonicalJSONInvalid(f"{path}: non-finite Decimal {value} not allowed")
        text = format(value, "f")
        if len(text) > _MAX_DECIMAL_CHARS:
            raise CanonicalJSONInvalid(f"{path}: Decimal longer than {_MAX_DECIMAL_CHARS} digits")
        return text
    if isinstance(value, Mapping):
        out: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJSONInvalid(f"{path}: key {key!r} is not a string")
            out[key] = _prepare(item, f"{path}.{key}", depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_prepare(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise CanonicalJSONInvalid(f"{path}: unsupported type {type(value).__name__}")


def encode(value: object) -> bytes:
    """Encode ``value`` as canonical JSON bytes.

    Parameters
    ----------
    value
        ``None``, ``bool``, ``int``, ``str``, :class:`~decimal.Decimal`,
        sequences (list, tuple) and mappings with string keys, nested.

    Returns
    -------
    bytes
        UTF-8 JSON with sorted keys and no whitespace.

    Raises
    ------
    CanonicalJSONInvalid
        On floats, NaN/infinite decimals, non-string keys, unsupported types,
        strings that are not valid Unicode (lone surrogates) or too deep nesting.
    """
    return _dump(_prepare(value, "$", 0))


def _dump(prepared: object) -> bytes:
    text = json.dumps(
        prepared, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONInvalid(f"$: string is not valid Unicode ({exc.reason})") from None


def _no_float(text: str) -> Any:
    raise CanonicalJSONInvalid(f"float literal {text!r} in canonical JSON")


def _no_constant(text: str) -> Any:
    raise CanonicalJSONInvalid(f"constant {text!r} in canonical JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in pairs:
        if key in out:
            raise CanonicalJSONInvalid(f"duplicate key {key!r} in canonical JSON")
        out[key] = item
    return out


def decode(data: bytes) -> Any:
    """Parse canonical JSON bytes, refusing anything :func:`encode` would not produce.

    Parameters
    ----------
    data
        Untrusted bytes (at most :data:`MAX_CANONICAL_BYTES`).

    Returns
    -------
    Any
        The parsed value (decimal quantities come back as strings).

    Raises
    ------
    CanonicalJSONInvalid
        When the bytes are too large, not UTF-8 JSON, contain floats, constants
        or duplicate keys, or are not byte-for-byte canonical.
    """
    if len(data) > MAX_CANONICAL_BYTES:
        raise CanonicalJSONInvalid(f"document of {len(data)} bytes exceeds {MAX_CANONICAL_BYTES}")
    try:
        value = json.loads(
            data.decode("utf-8"),
            parse_float=_no_float,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_keys,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise CanonicalJSONInvalid(f"not JSON: {exc}") from None
    if _dump(value) != data:  # parsed values are already plain JSON types (no floats)
        raise CanonicalJSONInvalid("bytes are valid JSON but not in canonical form")
    return value


def decimal_from_float(value: float) -> Decimal:
    """Convert a float to the :class:`~decimal.Decimal` of its shortest repr.

    ``0.1`` becomes ``Decimal("0.1")`` (not the binary expansion). Use it at
    the boundary where a library hands back floats (noise multipliers, sample
    rates) before they enter an audit entry.

    Raises
    ------
    CanonicalJSONInvalid
        When ``value`` is NaN or infinite.
    """
    result = Decimal(repr(float(value)))
    if not result.is_finite():
        raise CanonicalJSONInvalid(f"value: non-finite float {value!r}")
    return result

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from privacy_ledger.audit.canonical import MAX_CANONICAL_BYTES, decimal_from_float, decode, encode
from privacy_ledger.errors import CanonicalJSONInvalid


def test_sorted_keys_no_whitespace_utf8() -> None:
    value = {"b": [1, True, None], "a": {"z": "é", "y": Decimal("0.10")}, "c": -3}
    assert encode(value) == '{"a":{"y":"0.10","z":"é"},"b":[1,true,null],"c":-3}'.encode()


def test_decimals_are_plain_decimal_strings() -> None:
    assert encode(Decimal("1E+2")) == b'"100"'
    assert encode(Decimal("3.14159")) == b'"3.14159"'
    assert encode((1, 2)) == b"[1,2]"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (1.5, "float 1.5 not allowed"),
        ({"eps": float("nan")}, "$.eps: float nan"),
        (Decimal("NaN"), "non-finite Decimal"),
        (Decimal("Infinity"), "non-finite Decimal"),
        ({1: "x"}, "key 1 is not a string"),
        (b"raw", "unsupported type bytes"),
        ({"s": "\ud800"}, "not valid Unicode"),
        (Decimal("1E+500"), "longer than"),
    ],
)
def test_rejections(value: object, fragment: str) -> None:
    with pytest.raises(CanonicalJSONInvalid, match=fragment.replace("$", r"\$")):
        encode(value)


def test_too_deep() -> None:
    value: object = 1
    for _ in range(40):
        value = [value]
    with pytest.raises(CanonicalJSONInvalid, match="nesting deeper"):
        encode(value)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b'{"a":1.0}', "float literal"),
        (b'{"a":1e3}', "float literal"),
        (b'{"a":NaN}', "constant"),
        (b'{"a":1,"a":2}', "duplicate key"),
        (b'{"b":1,"a":2}', "not in canonical form"),
        (b'{"a": 1}', "not in canonical form"),
        (b'"\\u00e9"', "not in canonical form"),
        (b'{"a":-0}', "not in canonical form"),
        (b"\xff", "not JSON"),
        (b"{", "not JSON"),
    ],
)
def test_decode_refuses_non_canonical(data: bytes, fragment: str) -> None:
    with pytest.raises(CanonicalJSONInvalid, match=fragment):
        decode(data)


def test_decode_size_is_checked_first() -> None:
    with pytest.raises(CanonicalJSONInvalid, match="exceeds"):
        decode(b" " * (MAX_CANONICAL_BYTES + 1))


def test_decimal_from_float() -> None:
    assert decimal_from_float(0.1) == Decimal("0.1")
    with pytest.raises(CanonicalJSONInvalid, match="non-finite"):
        decimal_from_float(float("inf"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_json)
def test_roundtrip(value: object) -> None:
    data = encode(value)
    assert decode(data) == value
    assert encode(decode(data)) == data


# Within the encoder's domain: plain notation of at most 100 characters (31 integer digits,
# sign, point and 40 places stay below it; a tiny value such as 9.99E-50 written plainly
# does not, and is refused: see test_a_decimal_longer_than_the_limit_is_refused).
_decimals = st.decimals(
    allow_nan=False, allow_infinity=False, min_value=-(10**30), max_value=10**30, places=40
)


@pytest.mark.parametrize(
    "value", ["9.9999999999999999999999999999999999999999999999990E-50", "1E+101"]
)
def test_a_decimal_longer_than_the_limit_is_refused(value: str) -> None:
    with pytest.raises(CanonicalJSONInvalid, match=r"Decimal longer than 100 digits$"):
        encode({"epsilon": Decimal(value)})


@given(_decimals)
def test_decimal_is_an_exact_plain_string(value: Decimal) -> None:
    data = encode(value)
    text = decode(data)
    assert isinstance(text, str) and "E" not in text.upper()  # plain notation, never a float
    assert Decimal(text) == value  # exact: nothing rounded through binary floating point
    assert encode(Decimal(text)) == data  # re-reading the stored string gives the same bytes


_with_decimals = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | _decimals,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _as_stored(value: object) -> object:
    """What decode returns for ``value``: decimals as their plain strings."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, list):
        return [_as_stored(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items()}
    return value


@given(_with_decimals)
def test_roundtrip_with_decimals_is_stable(value: object) -> None:
    data = encode(value)
    assert decode(data) == _as_stored(value)
    assert encode(decode(data)) == data  # one byte string per stored value


# ledger quantities (epsilons, noise multipliers, rates): written within 100 plain digits
_quantities = st.floats(min_value=-1e30, max_value=1e30).filter(lambda f: f == 0 or abs(f) >= 1e-30)


@given(_quantities)
def test_decimal_from_float_is_the_shortest_repr(value: float) -> None:
    converted = decimal_from_float(value)
    assert float(converted) == value  # no value is changed
    assert converted == Decimal(repr(value))
    assert encode(converted) == encode(Decimal(repr(value)))

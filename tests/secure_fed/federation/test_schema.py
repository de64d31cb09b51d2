from __future__ import annotations

import pytest

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.audit import canonical
from secure_fed.errors import OutputSpecMismatch, SchemaInvalid, SchemaMajorMismatch, SchemaUnknown
from secure_fed.federation.schema import (
    ModelSchema,
    OutputSpec,
    RoundSchema,
    SchemaRegistry,
    SemVer,
)
from tests.secure_fed.federation.helpers import CONTRACT, OUTPUT, schema


def test_semver_parse_and_order() -> None:
    assert SemVer.parse("1.10.2") == SemVer(1, 10, 2)
    assert SemVer.parse("1.2.0") < SemVer.parse("1.10.0")
    assert str(SemVer(3, 0, 1)) == "3.0.1"


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-rc1", "a.b.c", "", "1..2"])
def test_semver_rejects_malformed(text: str) -> None:
    with pytest.raises(SchemaInvalid, match="MAJOR.MINOR.PATCH"):
        SemVer.parse(text)


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0", "1.0.3"])
def test_minor_and_patch_pass(registry: SchemaRegistry, version: str) -> None:
    registry.validate(schema(version=version), CONTRACT)


def test_major_mismatch_refused(registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaMajorMismatch, match="requires MAJOR 1") as info:
        registry.validate(schema(version="2.0.0"), CONTRACT)
    assert info.value.code == "SCHEMA_MAJOR_MISMATCH"


@pytest.mark.parametrize(
    "other",
    [
        OutputSpec(num_classes=4, bound=8.0),
        OutputSpec(num_classes=3, bound=4.0),
    ],
)
def test_output_spec_mismatch_refused(other: OutputSpec) -> None:
    reg = SchemaRegistry()
    declared = schema(version="1.2.0", output=other)
    reg.register(declared)
    with pytest.raises(OutputSpecMismatch, match="round requires"):
        reg.validate(declared, CONTRACT)


def test_unknown_model_or_version_refused(registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaUnknown, match="not registered"):
        registry.validate(schema(model_id="cnn"), CONTRACT)
    with pytest.raises(SchemaUnknown, match=r"registered versions: \['1.0.0'"):
        registry.validate(schema(version="1.5.0"), CONTRACT)


def test_registered_version_is_immutable(registry: SchemaRegistry) -> None:
    registry.register(schema())  # identical: idempotent
    with pytest.raises(SchemaInvalid, match="already registered"):
        registry.register(schema(output=OutputSpec(num_classes=5)))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 3, "representation": "probs"}, "representation"),
        ({"num_classes": 3, "bound": 0.0}, "bound"),
        ({"num_classes": 3, "bound": float("nan")}, "bound"),
    ],
)
def test_output_spec_validation(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(SchemaInvalid, match=fragment):
        OutputSpec(**kwargs)  # type: ignore[arg-type]


def test_model_id_validated() -> None:
    with pytest.raises(SchemaInvalid, match="model_id"):
        ModelSchema(model_id="bad id!", version=SemVer(1, 0, 0), output=OUTPUT)


def test_round_trip_and_hash() -> None:
    s = schema(version="1.4.2")
    assert ModelSchema.from_dict(s.to_dict()) == s
    assert RoundSchema.from_dict(CONTRACT.to_dict()) == CONTRACT
    other = RoundSchema(major=2, output=OUTPUT)
    assert len(CONTRACT.schema_hash()) == 64 and CONTRACT.schema_hash() != other.schema_hash()
    with pytest.raises(SchemaInvalid, match="model_id/version/output"):
        ModelSchema.from_dict({"model_id": "x"})


def test_contract_bytes_and_hash_are_pinned() -> None:
    """Version-2 schema hash: SM3 of canonical JSON with the bound as a decimal string."""
    contract = RoundSchema(major=1, output=OutputSpec(num_classes=10))
    expected = (
        b'{"major":1,"output":{"bound":"8.0","num_classes":10,"representation":"clipped_logits"}}'
    )
    assert canonical.encode(contract.to_dict()) == expected
    assert contract.schema_hash() == sm3_digest(expected).hex()
    assert contract.schema_hash() == (
        "98fcb97f0a2a357a7f2c4ae4d6896ccac811741e60a811bb3a765de376a8a794"
    )


@pytest.mark.parametrize(("bound", "expected"), [("8.0", 8.0), (8.0, 8.0), (8, 8.0), ("0.5", 0.5)])
def test_output_bound_accepts_decimal_strings_and_stored_numbers(
    bound: object, expected: float
) -> None:
    data = {"num_classes": 3, "representation": "clipped_logits", "bound": bound}
    assert OutputSpec.from_dict(data).bound == expected


@pytest.mark.parametrize("bound", ["8e0", True, None, "nan", [8]])
def test_output_bound_refuses_other_forms(bound: object) -> None:
    data = {"num_classes": 3, "representation": "clipped_logits", "bound": bound}
    with pytest.raises(SchemaInvalid, match="bound"):
        OutputSpec.from_dict(data)

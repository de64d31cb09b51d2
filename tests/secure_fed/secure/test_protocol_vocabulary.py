"""The gatekeeper protocol's shape: one vocabulary, requests parsed once into frozen models.

Every step, purpose and operation a gatekeeper accepts is a member of an enum
of :mod:`secure_fed.secure.protocol.vocabulary`; a member is its string on the
wire (canonical JSON bytes unchanged); each request model refuses a malformed
request with the typed error and code the handlers raised before, and cannot
be changed once parsed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from crypto.shares import ShareMacKey
from secure_fed.errors import AuthorityRequestMalformed, UploadMalformed
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.protocol.authority_requests import DealRequest, DecryptionRequest
from secure_fed.secure.protocol.helper_requests import (
    DistanceAsk,
    LinearRequest,
    LoadRequest,
    parse_op,
)
from secure_fed.secure.protocol.helper_step_requests import (
    CopiesRequest,
    EvidenceRequest,
    FinishRequest,
    OpenRequest,
)
from secure_fed.secure.protocol.vocabulary import (
    AuthorityOp,
    HelperOp,
    Key,
    Purpose,
    Step,
)
from secure_fed.secure.release_plan import STEPS
from secure_fed.secure.release_policy import PURPOSES
from secure_fed.secure.server_auth import ChannelKey
from secure_fed.wire import HELPER_REQUEST, encode_array, encode_frame, encode_header

MALFORMED = "AUTHORITY_REQUEST_MALFORMED"
DECRYPT = {"round_id": 3, "purpose": "aggregate", "participant_ids": ["a", "b"], "shape": [4, 3]}


def test_every_purpose_and_step_the_gatekeepers_accept_is_a_member() -> None:
    assert PURPOSES == tuple(Purpose)
    assert all(type(p) is Purpose for p in PURPOSES)
    assert STEPS == tuple(Step)
    for purpose in Purpose:
        assert DecryptionRequest.from_wire({**DECRYPT, "purpose": str(purpose)}).purpose is purpose


def test_a_member_is_its_string_on_the_wire_and_in_messages() -> None:
    plain = {"op": "open", "kind": "final", "purpose": "score", "uids": ["u1"]}
    typed = {Key.OP: HelperOp.OPEN, Key.KIND: Step.FINAL, Key.PURPOSE: Purpose.SCORE}
    typed[Key.UIDS] = ["u1"]
    assert encode_header(HELPER_REQUEST, typed) == encode_header(HELPER_REQUEST, plain)
    assert repr(Step.FINAL) == "'final'" and f"{Purpose.SCORE}" == "score"
    assert repr((AuthorityOp.PLAN,)) == "('plan',)"


@pytest.mark.parametrize("op", list(HelperOp))
def test_every_helper_operation_is_served_and_only_those(op: HelperOp) -> None:
    helper = HelperParty(
        shape=(4, 3),
        min_participants=2,
        secrets={"a": b"a" * 32, "b": b"b" * 32},
        dealer_key=ShareMacKey.generate(recipient="helper"),
        channel_key=ShareMacKey.generate(recipient="channel"),
        request_key=ChannelKey.generate("aggregator"),
    )
    assert parse_op({"op": str(op)}) is op
    unsigned = encode_frame(HELPER_REQUEST, {"op": str(op), "round_id": 1})
    with pytest.raises(Exception) as caught:  # every operation reaches the tag check
        helper.handle(unsigned)
    assert getattr(caught.value, "code", None) == "SERVER_REQUEST_UNAUTHENTICATED"
    with pytest.raises(AuthorityRequestMalformed, match=r"helper op 'opem' is unknown") as bad:
        helper.handle(encode_frame(HELPER_REQUEST, {"op": "opem", "round_id": 1}))
    assert bad.value.code == MALFORMED


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("round_id", None),
        ("purpose", "secret"),
        ("purpose", None),
        ("participant_ids", None),
        ("shape", [4]),
    ],
)
def test_a_decryption_request_missing_or_unknown_field_is_malformed(
    field: str, value: object
) -> None:
    header = {k: v for k, v in DECRYPT.items() if k != field or value is not None}
    if value is not None:
        header[field] = value
    with pytest.raises(AuthorityRequestMalformed) as caught:
        DecryptionRequest.from_wire(header)
    assert caught.value.code == MALFORMED


def test_a_dealing_request_is_for_its_own_purpose() -> None:
    fields = {"tensor": "w", "count": 2, "upper": 9}
    deal = DealRequest.from_wire(fields, signed_purpose="compare", purpose=AuthorityOp.COMPARE)
    assert (deal.tensor, deal.count, deal.upper) == ("w", 2, 9)
    for signed, header in [("range", fields), ("compare", {"tensor": "w", "count": 2})]:
        with pytest.raises(AuthorityRequestMalformed) as caught:
            DealRequest.from_wire(header, signed_purpose=signed, purpose=AuthorityOp.COMPARE)
        assert caught.value.code == MALFORMED


@pytest.mark.parametrize(
    ("parse", "header"),
    [
        (LinearRequest.from_wire, {"op": "linear", "round_id": 1, "purpose": "moments"}),
        (LinearRequest.from_wire, {"op": "linear", "round_id": 1, "weights": [1]}),
        (LinearRequest.from_wire, {"op": "linear", "round_id": 1, "uids": ["u"]}),
        (lambda h: OpenRequest.from_wire(h, b""), {"op": "open", "round_id": 1, "kind": "x"}),
        (lambda h: OpenRequest.from_wire(h, b""), {"op": "open", "round_id": 1, "uids": ["u"]}),
        (lambda h: FinishRequest.from_wire(h, b""), {"op": "finish", "op_id": "o"}),
        (lambda h: EvidenceRequest.from_wire(h, b""), {"op": "evidence", "round_id": 1}),
        (lambda h: CopiesRequest.from_wire(h, b""), {"op": "copies", "round_id": 1}),
        (lambda h: CopiesRequest.from_wire(h, b""), {"check": "c", "round_id": 1, "uids": []}),
    ],
)
def test_a_helper_request_missing_a_field_is_malformed(parse, header) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AuthorityRequestMalformed) as caught:
        parse(header)
    assert caught.value.code == MALFORMED


def test_a_load_naming_no_participant_is_an_upload_error() -> None:
    with pytest.raises(UploadMalformed) as caught:
        LoadRequest.from_wire({"op": "load", "upload_id": "u1"})
    assert caught.value.code == "UPLOAD_MALFORMED"


def test_an_opening_under_a_distance_name_parses_to_its_refusal() -> None:
    for parsed in (
        LinearRequest.from_wire({"round_id": 2, "purpose": "distance", "uids": ["u", 3]}),
        OpenRequest.from_wire({"round_id": 2, "kind": "copies", "uids": ["u"]}, b""),
    ):
        assert parsed == DistanceAsk(round_id=2, uids=("u",))


def test_models_are_parsed_once_and_frozen() -> None:
    meta, raw = encode_array(np.zeros(2, dtype=np.uint64), "u8")
    models: list[object] = [
        DecryptionRequest.from_wire(DECRYPT),
        DealRequest.from_wire(
            {"tensor": "w", "count": 1}, signed_purpose="triples", purpose=AuthorityOp.TRIPLES
        ),
        LoadRequest.from_wire({"participant_id": "a", "upload_id": "u1"}),
        LinearRequest.from_wire({"round_id": 1, "uids": ["u1", "u2"], "weights": ["0.5", "0.5"]}),
        OpenRequest.from_wire(
            {
                "round_id": 1,
                "kind": "final",
                "op_id": "o",
                "uids": ["u1"],
                "centre": ["u1"],
                "parts": [1],
            },
            b"t",
        ),
        FinishRequest.from_wire({"round_id": 1, "op_id": "o", "parts": [1, 1]}, b"ab"),
        EvidenceRequest.from_wire({"round_id": 1, "uids": ["u1", "u2"], "array": meta}, raw),
        CopiesRequest.from_wire({"round_id": 1, "check": "c"}, b""),
    ]
    for model in models:
        assert dataclasses.is_dataclass(model)
        field = dataclasses.fields(model)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(model, field, None)
    linear = models[3]
    assert isinstance(linear, LinearRequest) and linear.purpose is Purpose.AGGREGATE
    opened = models[4]
    assert isinstance(opened, OpenRequest) and opened.kind is Step.FINAL
    assert opened.triples() == b"t" and opened.carried == ()
    finished = models[5]
    assert isinstance(finished, FinishRequest) and finished.parts() == (b"a", b"b")

"""Guards of signed server-to-server requests, each at its boundary with its exact refusal.

``scripts/mutation`` changed each of these and the selected tests stayed green
(docs/benchmarks.md, "Mutation testing", fourth run). The requests below are
signed correctly with the channel key, so each reaches the one check it breaks:
a missing or non-hex tag, another signer, a payload off its digest, a nonce of
the wrong length, a round or purpose of the wrong type, a negative round, a
header round or purpose that differs from the signed one. The builder's output
(``auth`` fields, the tag over domain, kind and header) is checked field by field.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from crypto.sm import sm3_digest
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    ServerRequestUnauthenticated,
)
from secure_fed.secure.server_auth import (
    ChannelKey,
    RequestVerifier,
    ServerIdentity,
    ServerSigningKey,
    authenticate_request,
    request_message,
)
from secure_fed.wire import HELPER_REQUEST, KEY_AUTHORITY_REQUEST, decode_frame, encode_frame
from secure_fed.wire import encode_header as canonical

KEY = ChannelKey.generate("aggregator")
NONCE = "ab" * 16


def _forged(
    auth: dict[str, Any] | None = None,
    header: dict[str, Any] | None = None,
    payload: bytes = b"body",
    *,
    drop: tuple[str, ...] = (),
    key: ChannelKey = KEY,
) -> bytes:
    """A request tagged correctly under ``key`` whose ``auth`` and header are as given."""
    fields: dict[str, Any] = {
        "signer": key.name,
        "nonce": NONCE,
        "round_id": 2,
        "purpose": "linear",
        "payload_sm3": sm3_digest(payload).hex(),
    }
    fields.update(auth or {})
    for name in drop:
        del fields[name]
    signed = {"op": "linear", **(header or {}), "auth": fields}
    tag = key.tag(request_message(HELPER_REQUEST, canonical(HELPER_REQUEST, signed)))
    return encode_frame(HELPER_REQUEST, {**signed, "signature": tag.hex()}, payload)


def _verify(request: bytes) -> object:
    return RequestVerifier(HELPER_REQUEST, KEY).verify(request)


def test_a_correctly_forged_request_is_verified_with_every_field() -> None:
    verified = RequestVerifier(HELPER_REQUEST, KEY).verify(_forged())
    header, _ = decode_frame(_forged(), HELPER_REQUEST)
    del header["signature"]
    assert verified.header == header and "signature" not in verified.header
    assert verified.payload == b"body"
    assert verified.signed_header == canonical(HELPER_REQUEST, header)
    assert verified.signature == KEY.tag(request_message(HELPER_REQUEST, verified.signed_header))
    assert verified.request_sm3 == sm3_digest(verified.signed_header).hex()
    assert (verified.round_id, verified.purpose, verified.nonce, verified.signer) == (
        2,
        "linear",
        NONCE,
        "aggregator",
    )


def test_the_tag_covers_the_domain_the_kind_and_the_header_digest() -> None:
    head = b'{"a":1}'
    expected = b"secure-fed/server-request/v1|" + HELPER_REQUEST.magic + sm3_digest(head)
    assert request_message(HELPER_REQUEST, head) == expected
    assert request_message(HELPER_REQUEST.magic, head) == expected
    assert request_message(KEY_AUTHORITY_REQUEST, head) != expected


@pytest.mark.parametrize(
    ("signer", "verifier_sender", "name"),
    [
        (KEY, KEY, "aggregator"),
        (ServerSigningKey.generate("agg-7"), None, "agg-7"),
    ],
)
def test_a_built_request_carries_its_auth_and_a_tag_over_it(
    signer: Any, verifier_sender: Any, name: str
) -> None:
    sender = verifier_sender or signer.identity
    header = {"op": "open", "round_id": 4}
    raw = authenticate_request(
        HELPER_REQUEST, header, b"xyz", signer=signer, round_id=4, purpose="open"
    )
    got, payload = decode_frame(raw, HELPER_REQUEST)
    assert payload == b"xyz"
    auth = got["auth"]
    assert isinstance(auth, dict)
    assert set(auth) == {"signer", "nonce", "round_id", "purpose", "payload_sm3"}
    assert (auth["signer"], auth["round_id"], auth["purpose"]) == (name, 4, "open")
    assert auth["payload_sm3"] == sm3_digest(b"xyz").hex()
    assert isinstance(auth["nonce"], str) and len(bytes.fromhex(auth["nonce"])) == 16
    assert {k: v for k, v in got.items() if k not in ("auth", "signature")} == header
    verifier = RequestVerifier(HELPER_REQUEST, sender)
    assert verifier.sender_name == name
    verified = verifier.verify(raw)
    assert (verified.signer, verified.round_id, verified.purpose) == (name, 4, "open")
    again = authenticate_request(
        HELPER_REQUEST, header, b"xyz", signer=signer, round_id=4, purpose="open"
    )
    assert decode_frame(again, HELPER_REQUEST)[0]["auth"] != auth  # a fresh nonce
    bare = authenticate_request(HELPER_REQUEST, header, signer=signer, round_id=4, purpose="x")
    assert decode_frame(bare, HELPER_REQUEST)[1] == b""  # no payload unless one is given


def test_a_channel_key_checks_its_own_tags_only() -> None:
    other = ChannelKey(name="aggregator", key=b"k" * 32)
    assert KEY.name == "aggregator"
    assert KEY.check(b"m", KEY.tag(b"m"))
    assert not KEY.check(b"m", other.tag(b"m"))
    assert not KEY.check(b"n", KEY.tag(b"m"))


@pytest.mark.parametrize(
    ("request_bytes", "message"),
    [
        (encode_frame(HELPER_REQUEST, {"op": "linear"}), "the request is not signed"),
        (
            encode_frame(HELPER_REQUEST, {"op": "linear", "signature": "00", "auth": "x"}),
            "the request is not signed",
        ),
        (
            encode_frame(HELPER_REQUEST, {"op": "linear", "signature": 5, "auth": {}}),
            "the request is not signed",
        ),
        (_forged({"signer": "intruder"}), "signer 'intruder' is not the enrolled 'aggregator'"),
        (_forged(drop=("signer",)), "signer None is not the enrolled 'aggregator'"),
        (
            _forged(key=ChannelKey(name="aggregator", key=b"k" * 32)),
            "the request's HMAC-SM3 tag is wrong",
        ),
        (
            _forged({"payload_sm3": sm3_digest(b"other").hex()}),
            "the payload does not match its signed digest",
        ),
        (_forged(drop=("nonce",)), "the request carries no nonce"),
        (_forged({"nonce": 12}), "the request carries no nonce"),
        (_forged({"nonce": "ab" * 15}), "the request carries no nonce"),
        (_forged({"nonce": "ab" * 17}), "the request carries no nonce"),
        (_forged({"nonce": "ab" * 16 + "a"}), "the request carries no nonce"),
        (_forged(drop=("round_id",)), "the request names no round or purpose"),
        (_forged({"round_id": True}), "the request names no round or purpose"),
        (_forged({"round_id": "2"}), "the request names no round or purpose"),
        (_forged({"round_id": 2.0}), "the request names no round or purpose"),
        (_forged(drop=("purpose",)), "the request names no round or purpose"),
        (_forged({"purpose": 3}), "the request names no round or purpose"),
        (_forged(header={"round_id": 3}), "round_id 3 differs from the signed 2"),
        (_forged(header={"purpose": "open"}), "purpose 'open' differs from the signed 'linear'"),
    ],
    ids=lambda v: "request" if isinstance(v, bytes) else v.replace(" ", "-"),
)
def test_each_broken_part_of_a_request_is_named(request_bytes: bytes, message: str) -> None:
    with pytest.raises(ServerRequestUnauthenticated, match=rf"\] {message}$"):
        _verify(request_bytes)


def test_a_tag_that_is_not_hex_is_named() -> None:
    header, payload = decode_frame(_forged(), HELPER_REQUEST)
    header["signature"] = "zz" + str(header["signature"])[2:]
    with pytest.raises(ServerRequestUnauthenticated, match=r"\] the signature is not hex$"):
        _verify(encode_frame(HELPER_REQUEST, header, payload))


def test_a_negative_round_is_malformed_and_round_zero_is_a_round() -> None:
    with pytest.raises(
        AuthorityRequestMalformed, match=r"\] request needs an integer round_id >= 0$"
    ):
        _verify(_forged({"round_id": -1}))
    assert RequestVerifier(HELPER_REQUEST, KEY).verify(_forged({"round_id": 0})).round_id == 0


def test_a_header_round_and_purpose_equal_to_the_signed_ones_are_accepted() -> None:
    request = _forged(header={"round_id": 2, "purpose": "linear"})
    verified = RequestVerifier(HELPER_REQUEST, KEY).verify(request)
    assert verified.header["round_id"] == 2 and verified.header["purpose"] == "linear"


@pytest.mark.parametrize("name", ["", "x" * 65, 7, None])
def test_a_server_name_has_1_to_64_characters(name: object) -> None:
    shown = repr(name)
    with pytest.raises(
        ModeSetupInvalid,
        match=rf"\] server name must be a string of 1-64 characters, got {re.escape(shown)}$",
    ):
        ChannelKey(name=name, key=b"k" * 32)  # type: ignore[arg-type]
    with pytest.raises(ModeSetupInvalid, match="server name must be a string of 1-64"):
        ServerIdentity(name, ServerSigningKey.generate("x").identity.public_key)  # type: ignore[arg-type]


def test_a_server_name_of_1_or_64_characters_is_accepted() -> None:
    public = ServerSigningKey.generate("x").identity.public_key
    for name in ("a", "n" * 64):
        assert ChannelKey(name=name, key=b"k" * 32).name == name
        assert ServerIdentity(name, public).name == name
    with pytest.raises(ModeSetupInvalid, match=r"\] public_key must be an SM2PublicKey$"):
        ServerIdentity("a", b"not a key")  # type: ignore[arg-type]

"""Guards of the shares-mode helper's request parsing that surviving mutants showed unchecked.

``scripts/mutation gatekeepers`` changed each of these and the selected tests
stayed green: how a payload is split by its ``parts`` lengths (negative,
non-integer or mismatched lengths, the split itself), the linear weights, the
integer request fields and a request that names no operation.
"""

from __future__ import annotations

import pytest

from secure_fed.errors import AuthorityRequestMalformed, UploadMalformed
from secure_fed.secure.parties.helper import helper_request
from secure_fed.secure.protocol.codecs import split_parts
from secure_fed.secure.protocol.codecs import wire_int as _int
from secure_fed.secure.protocol.helper_requests import wire_weights as _weights
from secure_fed.secure.server_auth import ChannelKey
from secure_fed.wire import HELPER_REQUEST, decode_frame
from tests.secure_fed.secure.conftest import IDS
from tests.secure_fed.secure.signed_requests import signed


def test_a_payload_is_split_by_its_part_lengths() -> None:
    assert split_parts({"parts": [2, 0, 3]}, b"abcde") == [b"ab", b"", b"cde"]
    assert split_parts({"parts": [5]}, b"abcde") == [b"abcde"]
    assert split_parts({"parts": [1, 1, 1, 2]}, b"abcde") == [b"a", b"b", b"c", b"de"]
    assert split_parts({"parts": []}, b"") == []


@pytest.mark.parametrize("parts", [None, "5", [2, "3"], [-1, 6], [2.0, 3], (2, 3)])
def test_part_lengths_must_be_a_list_of_non_negative_integers(parts: object) -> None:
    with pytest.raises(
        AuthorityRequestMalformed, match=r"request needs a 'parts' list of byte lengths$"
    ):
        split_parts({"parts": parts}, b"abcde")


@pytest.mark.parametrize("parts", [[2, 2], [3, 3], [], [6]])
def test_part_lengths_must_add_up_to_the_payload(parts: list[int]) -> None:
    with pytest.raises(
        AuthorityRequestMalformed, match="request parts do not add up to the payload length$"
    ):
        split_parts({"parts": parts}, b"abcde")


def test_linear_weights_are_exact_numbers() -> None:
    assert _weights(["0.25", 1, "0.75"]) == (0.25, 1.0, 0.75)
    assert _weights([]) == ()
    for bad in ("0.5", [None], ["0.5", True], ["x"], None):
        with pytest.raises(
            AuthorityRequestMalformed, match="linear openings need a list of numeric weights$"
        ):
            _weights(bad)


def test_integer_request_fields_are_non_negative_integers() -> None:
    assert _int({"count": 0}, "count") == 0
    assert _int({"count": 7}, "count") == 7
    assert _int({"count": 1}, "count") == 1
    for bad in ({"count": -1}, {"count": True}, {"count": "3"}, {"count": 1.0}, {}):
        with pytest.raises(
            AuthorityRequestMalformed, match="request field 'count' must be an integer >= 0$"
        ):
            _int(bad, "count")


def test_a_helper_request_names_its_operation() -> None:
    key = ChannelKey.generate("aggregator")
    for header in ({}, {"op": 3}, {"purpose": "aggregate"}):
        with pytest.raises(
            AuthorityRequestMalformed, match=r"a helper request names its operation \('op'\)$"
        ):
            helper_request(header, key=key, round_id=1)
    _, payload = decode_frame(helper_request({"op": "open"}, key=key, round_id=1), HELPER_REQUEST)
    assert payload == b""  # no payload unless one is given
    assert helper_request({"op": "linear"}, key=key, round_id=1) != helper_request(
        {"op": "open"}, key=key, round_id=1
    )


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"participant_id": "zz", "upload_id": "u1"}, "helper does not know participant 'zz'$"),
        (
            {"participant_id": IDS[0], "upload_id": 5},
            f"helper does not know participant '{IDS[0]}'$",
        ),
        ({"participant_id": 5, "upload_id": "u1"}, "helper does not know participant 5$"),
        ({"upload_id": "u1"}, "helper does not know participant None$"),
        (
            {"participant_id": IDS[0], "upload_id": "u1"},
            f"helper share of '{IDS[0]}' refused: .*ciphertext is 4 bytes",
        ),
    ],
)
def test_the_helper_loads_only_an_enrolled_participants_sealed_share(  # type: ignore[no-untyped-def]
    shares_plain, header: dict[str, object], message: str
) -> None:
    dep, _ = shares_plain
    with pytest.raises(UploadMalformed, match=message):
        dep.helper.handle(signed(dep, {"op": "load", **header}, b"junk"))


@pytest.mark.parametrize(
    ("uids", "message"),
    [
        ([], "request needs a non-empty list of upload ids$"),
        ("ab", "request needs a non-empty list of upload ids$"),
        (["ab", 3], "request needs a non-empty list of upload ids$"),
        (["nope"], r"helper holds no share of uploads \['nope'\]$"),
    ],
)
def test_an_opening_names_uploads_the_helper_holds(shares, uids: object, message: str) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    request = {"op": "linear", "purpose": "aggregate", "uids": uids, "weights": ["1"]}
    with pytest.raises(AuthorityRequestMalformed, match=message):
        dep.helper.handle(signed(dep, {**request, "round_id": 1}))

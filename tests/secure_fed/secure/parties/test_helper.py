"""The shares-mode helper as a gatekeeper: it names contributors from the shares it holds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, UploadMalformed
from secure_fed.secure.modes.shares import SharesAggregator
from secure_fed.secure.parties.helper import reply_array
from secure_fed.wire import HELPER_REQUEST, SHARES_UPLOAD, decode_frame
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, install_helper_plan, plan, population
from tests.secure_fed.secure.signed_requests import signed


def _load(dep, agg, pid: str, matrix: np.ndarray) -> str:  # type: ignore[no-untyped-def]
    """Send one upload through the aggregator (which forwards the seed); return its upload id."""
    payload = dep.encoder(pid, bound=BOUND).encode(matrix)
    agg.load(payload)
    head, _ = decode_frame(payload, SHARES_UPLOAD)
    return str(head["upload_id"])


def _linear(dep, uids: list[str], weights: list[object], purpose: str = "aggregate") -> object:  # type: ignore[no-untyped-def]
    request = {"op": "linear", "purpose": purpose, "uids": uids, "weights": weights, "round_id": 1}
    return reply_array(dep.helper.handle(signed(dep, request)))


@pytest.fixture
def loaded(shares_plain):  # type: ignore[no-untyped-def]
    dep, sink = shares_plain
    agg = dep.aggregator(bound=BOUND)
    preds = population(3, N, C, seed=3)
    uids = {p: _load(dep, agg, p, m) for p, m in preds.items()}
    uids["p00-again"] = _load(dep, agg, "p00", preds["p00"] * 0.5)
    install_helper_plan(dep.helper, plan(1, (N, C), scored=False))
    return dep, sink, uids


def test_three_distinct_participants_are_opened(loaded) -> None:  # type: ignore[no-untyped-def]
    dep, sink, uids = loaded
    _linear(dep, [uids["p00"], uids["p01"], uids["p02"]], [1 / 3] * 3)
    assert dep.helper.log[-1].released and dep.helper.log[-1].participant_ids == (
        "p00",
        "p01",
        "p02",
    )
    assert sink.named("decryption.released")[-1]["party"] == "helper"


@pytest.mark.parametrize(
    "names",
    [
        ["p00", "p00-again", "p01"],  # 3 uploads, 2 distinct participants
        ["p00", "p00-again", "p01", "p02"],  # 3 distinct participants, one counted twice
        ["p00", "p00", "p01", "p02"],  # the same upload named twice
    ],
)
def test_one_participant_never_counts_twice(loaded, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    dep, sink, uids = loaded
    with pytest.raises(OpeningRefused, match="repeat"):
        _linear(dep, [uids[n] for n in names], [1 / len(names)] * len(names))
    assert not dep.helper.log[-1].released
    denied = sink.named("access.denied")[-1]
    assert denied["party"] == "helper" and "repeat" in str(denied["reason"])


def test_an_upload_id_belongs_to_one_participant(loaded) -> None:  # type: ignore[no-untyped-def]
    """An aggregator re-labelling p01's upload with p00's upload id is refused before decryption."""
    dep, _, uids = loaded
    stolen = {"op": "load", "participant_id": "p01", "upload_id": uids["p00"], "round_id": 1}
    with pytest.raises(UploadMalformed, match="already used by another participant"):
        dep.helper.handle(signed(dep, stolen, b"\x00" * 64))
    # the id still names p00's share: an opening over it is p00's contribution
    _linear(dep, [uids["p00"], uids["p01"], uids["p02"]], [1 / 3] * 3)
    assert dep.helper.log[-1].participant_ids == ("p00", "p01", "p02")
    # the same participant re-sending its own upload is an idempotent reload
    again = {"op": "load", "participant_id": "p00", "upload_id": uids["p00"], "round_id": 1}
    assert reply_array(dep.helper.handle(signed(dep, again, b""))) == ({"ok": True}, b"")


def test_weights_and_purposes_are_checked(loaded) -> None:  # type: ignore[no-untyped-def]
    dep, _, uids = loaded
    three = [uids["p00"], uids["p01"], uids["p02"]]
    with pytest.raises(OpeningRefused, match=r"weight in \(0, 1\]"):
        _linear(dep, three, [0.5, 0.5, 0.0])
    with pytest.raises(OpeningRefused, match=r"weight in \(0, 1\]"):
        _linear(dep, three, [0.5, 0.5])
    with pytest.raises(AuthorityRequestMalformed, match="numeric weights"):
        _linear(dep, three, ["half", 0.5, 0.5])
    with pytest.raises(AuthorityRequestMalformed, match="linear purpose"):
        _linear(dep, [uids["p00"]], [1.0], purpose="score")  # a label cannot make it a score


def test_small_moments_and_unknown_beaver_kinds_are_refused(loaded) -> None:  # type: ignore[no-untyped-def]
    dep, _, uids = loaded
    with pytest.raises(OpeningRefused, match="at least 3"):
        dep.helper.handle(
            signed(
                dep,
                {
                    "op": "open",
                    "kind": "moments",
                    "op_id": "m1",
                    "round_id": 1,
                    "uids": [uids["p00"], uids["p01"]],
                    "centre": [uids["p00"], uids["p01"]],
                    "parts": [0],
                },
            )
        )
    with pytest.raises(AuthorityRequestMalformed, match="Beaver kind"):
        dep.helper.handle(
            signed(
                dep,
                {
                    "op": "open",
                    "kind": "vector",
                    "op_id": "v1",
                    "round_id": 1,
                    "uids": [uids["p00"]],
                    "centre": [uids["p00"]],
                    "parts": [0],
                },
            )
        )


def test_a_beaver_operation_finishes_in_its_own_round(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares

    def relabel(request: bytes) -> bytes:  # the aggregator's channel, finish moved to round 2
        head, payload = decode_frame(request, HELPER_REQUEST)
        if head["op"] == "finish":
            head = {**head, "round_id": 2}
        return dep.helper.handle(signed(dep, head, payload))

    agg = SharesAggregator(
        shape=(N, C),
        bound=BOUND,
        keys=replace(dep.server_keys(), helper=relabel),
        min_participants=3,
    )
    preds = population(3, N, C, seed=4)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    with pytest.raises(AuthorityRequestMalformed, match="another round"):
        agg.score(handles, round_id=1)
    assert not any(r.released for r in dep.helper.log)

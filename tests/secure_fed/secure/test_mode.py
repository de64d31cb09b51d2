from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import AggregationInvalid, UnknownMode, UploadMalformed
from secure_fed.federation.messages import encode_matrix
from secure_fed.secure.mode import (
    MODE_REGISTRY,
    AggregationMode,
    AggregatorWrapper,
    InsecurePlaintextMode,
    get_mode,
    register_mode,
)
from tests.secure_fed.federation.helpers import BOUND, N_PUB, C, honest


def _server():  # type: ignore[no-untyped-def]
    return get_mode("plaintext").aggregator(shape=(N_PUB, C), bound=BOUND)


def test_plaintext_mode_is_named_insecure() -> None:
    mode = get_mode("plaintext")
    assert mode is InsecurePlaintextMode and mode.insecure
    assert "INSECURE" in mode.description


def test_round_trip_weighted_sum_and_scores() -> None:
    enc = get_mode("plaintext").encoder(shape=(N_PUB, C), bound=BOUND)
    srv = _server()
    mats = {f"p{i}": honest(i) for i in range(3)}
    handles = {pid: srv.load(enc.encode(m)) for pid, m in mats.items()}
    weights = {"p0": 0.5, "p1": 0.25, "p2": 0.25}
    agg = srv.reveal(srv.weighted_sum(handles, weights))
    np.testing.assert_allclose(agg, sum(weights[p] * mats[p] for p in mats), atol=1e-6)
    handles["bad"] = srv.load(enc.encode(-honest(9)))
    ref = srv.weighted_sum(handles, {p: 0.25 for p in handles})
    scores = srv.score(handles, ref)
    assert max(scores, key=scores.__getitem__) == "bad"


def test_encoder_clips_to_public_bound() -> None:
    enc = get_mode("plaintext").encoder(shape=(N_PUB, C), bound=BOUND)
    big = np.full((N_PUB, C), 100.0)
    assert np.abs(_server().reveal(_server().weighted_sum(
        {"a": _server().load(enc.encode(big))}, {"a": 1.0}))).max() == BOUND  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (encode_matrix(np.zeros((N_PUB + 1, C))), "shape"),
        (encode_matrix(np.full((N_PUB, C), np.nan)), "NaN"),
        (encode_matrix(np.full((N_PUB, C), 9.0)), "public bound"),
        (b"SFMX" + b"\0" * 3, "SFMX"),
        (encode_matrix(np.zeros((N_PUB, C)))[:-1], "does not match"),
    ],
)
def test_load_rejects_malformed(payload: bytes, fragment: str) -> None:
    with pytest.raises(UploadMalformed, match=fragment):
        _server().load(payload)


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        ({"a": -1.0}, ">= 0"),
        ({"a": 0.0}, "all be zero"),
        ({"a": 1.0, "z": 1.0}, "unknown"),
        ({}, "missing"),
    ],
)
def test_weights_validated(weights: dict[str, float], fragment: str) -> None:
    srv = _server()
    handles = {"a": srv.load(encode_matrix(honest(0)))}
    with pytest.raises(AggregationInvalid, match=fragment):
        srv.weighted_sum(handles, weights)
    with pytest.raises(AggregationInvalid, match="no uploads"):
        srv.weighted_sum({}, {})


def test_unknown_mode_lists_registered_names() -> None:
    with pytest.raises(UnknownMode, match=r"registered: \[.*'plaintext'") as info:
        get_mode("rot13")
    assert info.value.code == "AGGREGATION_UNKNOWN_MODE"
    assert all(repr(name) in str(info.value) for name in MODE_REGISTRY)


def test_registry_refuses_name_clash() -> None:
    other = AggregationMode(
        name="plaintext", insecure=True, description="x",
        encoder=MODE_REGISTRY["plaintext"].encoder,
        aggregator=MODE_REGISTRY["plaintext"].aggregator,
    )  # fmt: skip
    with pytest.raises(AggregationInvalid, match="already registered"):
        register_mode(other)


class _Shift(AggregatorWrapper):
    def reveal(self, aggregate):  # type: ignore[no-untyped-def]
        return self.inner.reveal(aggregate) + 1.0


def test_wrapper_overrides_one_step_and_delegates_the_rest() -> None:
    srv = _Shift(_server())
    h = {"a": srv.load(encode_matrix(honest(0)))}
    agg = srv.weighted_sum(h, {"a": 1.0})
    np.testing.assert_allclose(srv.reveal(agg), honest(0) + 1.0, atol=1e-6)
    assert srv.score(h, agg) == {"a": 0.0}

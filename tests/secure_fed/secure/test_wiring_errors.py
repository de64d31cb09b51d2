"""Negative tests of the byte frames, mode wiring and fixed-point plans (typed errors)."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    OpeningRefused,
    ScoringInvalid,
    UnknownMode,
    UploadMalformed,
)
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.ckks import CkksAggregator, CkksEncoder
from secure_fed.secure.modes.share_ops import score_plan
from secure_fed.secure.parties.helper import HELPER_MAGIC, split_parts
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.wire import decode_array, decode_frame, encode_array, encode_frame
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, population


def test_frames_round_trip_and_refuse_defects() -> None:
    frame = encode_frame(b"TEST", {"a": 1}, b"xyz")
    assert decode_frame(frame, b"TEST", max_bytes=100) == ({"a": 1}, b"xyz")
    with pytest.raises(AuthorityRequestMalformed, match="exceeds"):
        decode_frame(frame, b"TEST", max_bytes=10)
    with pytest.raises(AuthorityRequestMalformed, match="lengths"):
        decode_frame(frame + b"!", b"TEST", max_bytes=100)
    with pytest.raises(AuthorityRequestMalformed, match="JSON"):
        decode_frame(b"TEST" + frame[4:8] + b"{" * (len(frame) - 8), b"TEST", max_bytes=100)
    meta, raw = encode_array(np.arange(6.0).reshape(2, 3))
    assert decode_array(meta, raw).shape == (2, 3)
    with pytest.raises(AuthorityRequestMalformed, match="does not match"):
        decode_array(meta, raw[:-8])
    with pytest.raises(AuthorityRequestMalformed, match="dtype"):
        decode_array({"shape": [1], "dtype": "f4"}, b"1234")
    with pytest.raises(AuthorityRequestMalformed, match="parts"):
        split_parts({"parts": [2, 2]}, b"abc")


def test_helper_refuses_small_moments_and_unknown_operations(shares) -> None:  # type: ignore[no-untyped-def]
    dep, sink = shares
    agg = dep.aggregator(bound=BOUND)
    preds = population(2, N, C)
    agg._handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    with pytest.raises(OpeningRefused, match="at least 3"):
        agg.second_moment(sorted(preds), 64, np.zeros((N, C)))
    assert sink.named("access.denied")[-1]["party"] == "helper"
    with pytest.raises(AuthorityRequestMalformed, match="no open Beaver"):
        dep.helper.handle(encode_frame(HELPER_MAGIC, {"op": "finish", "op_id": "x",
                                                      "round_id": 0}))
    with pytest.raises(AuthorityRequestMalformed, match="round_id"):
        dep.helper.handle(encode_frame(HELPER_MAGIC, {"op": "finish", "op_id": "x"}))


def test_ckks_wiring_errors(ckks) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    with pytest.raises(ModeSetupInvalid, match="public_context"):
        CkksEncoder(shape=(N, C), bound=BOUND)
    with pytest.raises(ModeSetupInvalid, match="authority"):
        CkksAggregator(shape=(N, C), bound=BOUND, public_context=dep.public_context)
    with pytest.raises(ModeSetupInvalid, match="moment_samples"):
        CkksAggregator(shape=(N, C), bound=BOUND, public_context=dep.public_context,
                       authority=dep.authority.handle, scoring=ScoringConfig(moment_samples=10))
    agg = dep.aggregator(bound=BOUND)
    with pytest.raises(UploadMalformed, match="ckks upload refused"):
        agg.load(b"SFCKCT" + bytes(100))
    with pytest.raises(ScoringInvalid, match="first"):
        agg.scores([], np.zeros((N, C)), np.eye(C), samples=5)


def test_score_plan_refuses_a_whitening_that_could_wrap() -> None:
    plan = score_plan(np.eye(3), n_samples=100)
    assert 0 < plan.fz <= 12
    with pytest.raises(ScoringInvalid, match="wrap"):
        score_plan(np.full((9, 10), 1e6), n_samples=10_000)
    with pytest.raises(ScoringInvalid, match="finite"):
        score_plan(np.zeros((2, 2)), n_samples=10)


def test_deployment_errors() -> None:
    with pytest.raises(ModeSetupInvalid, match="distinct"):
        SecureDeployment.create(mode="shares", shape=(N, C), participant_ids=["a", "a"],
                                min_participants=2)
    with pytest.raises(UnknownMode, match="registered"):
        SecureDeployment.create(mode="paillier", shape=(N, C), participant_ids=["a"],
                                min_participants=2)
    dep = SecureDeployment.create(mode="shares", shape=(N, C), participant_ids=["a", "b"],
                                  min_participants=2)
    with pytest.raises(ModeSetupInvalid, match="not enrolled"):
        dep.encoder_kwargs("c")

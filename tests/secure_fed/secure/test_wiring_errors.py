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
from secure_fed.secure.computation.share_ops import score_plan
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.mode import AggregationMode
from secure_fed.secure.modes.ckks import CkksAggregator, CkksEncoder, CkksKeys
from secure_fed.secure.parties.central_dp import CentralDP
from secure_fed.secure.protocol.codecs import split_parts
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, population
from tests.secure_fed.secure.signed_requests import signed


def test_request_parts_must_add_up_to_the_payload() -> None:
    assert split_parts({"parts": [1, 2]}, b"abc") == [b"a", b"bc"]
    with pytest.raises(AuthorityRequestMalformed, match="parts"):
        split_parts({"parts": [2, 2]}, b"abc")


def test_helper_refuses_small_moments_and_unknown_operations(shares) -> None:  # type: ignore[no-untyped-def]
    dep, sink = shares
    agg = dep.aggregator(bound=BOUND)
    preds = population(2, N, C)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    with pytest.raises(OpeningRefused, match="3 distinct participants"):
        agg.score(handles, round_id=4)  # the aggregator holds itself to the plan
    uids = [h.uid for h in handles.values()]  # type: ignore[attr-defined]
    head = {"op": "open", "kind": "moments", "op_id": "m", "round_id": 4, "parts": [0]}
    with pytest.raises(OpeningRefused, match="at least 3"):
        dep.helper.handle(signed(dep, {**head, "uids": uids, "centre": uids}))
    assert sink.named("access.denied")[-1]["party"] == "helper"
    with pytest.raises(AuthorityRequestMalformed, match="no open Beaver"):
        dep.helper.handle(signed(dep, {"op": "finish", "op_id": "x", "round_id": 4}))
    with pytest.raises(AuthorityRequestMalformed, match="round_id"):
        dep.helper.handle(signed(dep, {"op": "finish", "op_id": "x"}, round_id=4))


def test_ckks_wiring_errors(ckks) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    with pytest.raises(ModeSetupInvalid, match="public_context"):
        CkksEncoder(shape=(N, C), bound=BOUND, public_context=b"context bytes")  # type: ignore[arg-type]
    with pytest.raises(ModeSetupInvalid, match="authority"):
        CkksKeys(
            public_context=dep.public_context,
            authority=b"not a channel",  # type: ignore[arg-type]
            signer=dep.server_keys().signer,
        )
    with pytest.raises(ModeSetupInvalid, match="keys"):
        CkksAggregator(shape=(N, C), bound=BOUND, keys=dep.public_context)  # type: ignore[arg-type]
    with pytest.raises(ModeSetupInvalid, match="moment_samples"):
        CkksAggregator(
            shape=(N, C),
            bound=BOUND,
            keys=dep.server_keys(),
            scoring=ScoringConfig(moment_samples=10),
        )
    agg = dep.aggregator(bound=BOUND)
    with pytest.raises(UploadMalformed, match="ckks upload refused"):
        agg.load(b"SFCKCT" + bytes(100))
    with pytest.raises(ScoringInvalid, match="first"):
        agg.scoring_round({}, round_id=1).ranking_scores([], samples=5)


def test_score_plan_refuses_a_whitening_that_could_wrap() -> None:
    plan = score_plan(np.eye(3), n_samples=100)
    assert 0 < plan.fz <= 12
    with pytest.raises(ScoringInvalid, match="wrap"):
        score_plan(np.full((9, 10), 1e6), n_samples=10_000)
    with pytest.raises(ScoringInvalid, match="finite"):
        score_plan(np.zeros((2, 2)), n_samples=10)


def test_deployment_errors() -> None:
    with pytest.raises(ModeSetupInvalid, match="distinct"):
        SecureDeployment.create(
            mode="shares", shape=(N, C), participant_ids=["a", "a"], min_participants=2
        )
    with pytest.raises(UnknownMode, match="registered"):
        SecureDeployment.create(
            mode="paillier", shape=(N, C), participant_ids=["a"], min_participants=2
        )
    dep = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=["a", "b"], min_participants=2
    )
    with pytest.raises(ModeSetupInvalid, match="not enrolled"):
        dep.encoder("c", bound=BOUND)
    with pytest.raises(ModeSetupInvalid, match="shape"):
        SecureDeployment.create(
            mode="plaintext", shape=(N, 0), participant_ids=["a"], min_participants=1
        )
    with pytest.raises(ModeSetupInvalid, match="both or neither"):
        SecureDeployment.create(
            mode="ckks",
            shape=(N, C),
            participant_ids=["a", "b"],
            min_participants=2,
            central_dp=CentralDP(noise_multiplier=1.0),
        )


@pytest.mark.parametrize("mode", ["plaintext", "shares"])
def test_central_dp_is_refused_where_the_aggregator_would_see_the_aggregate(mode: str) -> None:
    able = sorted(m.name for m in _registered() if m.central_dp)
    with pytest.raises(ModeSetupInvalid, match="cannot add central DP") as info:
        SecureDeployment.create(
            mode=mode,
            shape=(N, C),
            participant_ids=["a", "b"],
            min_participants=2,
            central_dp=CentralDP(noise_multiplier=1.0),
            budget=object(),
        )  # type: ignore[arg-type]
    assert able == ["ckks"] and str(able) in str(info.value)


def _registered() -> list[AggregationMode]:
    from secure_fed.secure.mode import MODE_REGISTRY, mode_names

    return [MODE_REGISTRY[name] for name in mode_names()]

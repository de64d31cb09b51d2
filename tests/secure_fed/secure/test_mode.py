from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import AggregationInvalid, ScoringInvalid, UnknownMode, UploadMalformed
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import (
    MODE_REGISTRY,
    AggregationMode,
    AggregatorWrapper,
    get_mode,
    mode_names,
    register_mode,
)
from secure_fed.secure.modes.plaintext import (
    InsecurePlaintextAggregator,
    InsecurePlaintextEncoder,
    InsecurePlaintextMode,
    PlaintextDeployment,
)
from secure_fed.secure.scoring.mahalanobis import PlainBackend, pooled_mahalanobis
from secure_fed.wire import encode_matrix
from tests.secure_fed.federation.helpers import BOUND, N_PUB, C, honest


def _server() -> InsecurePlaintextAggregator:
    return InsecurePlaintextAggregator(shape=(N_PUB, C), bound=BOUND)


def _encoder() -> InsecurePlaintextEncoder:
    return InsecurePlaintextEncoder(shape=(N_PUB, C), bound=BOUND)


def test_plaintext_mode_is_named_insecure() -> None:
    mode = get_mode("plaintext")
    assert mode is InsecurePlaintextMode and mode.insecure and not mode.central_dp
    assert "INSECURE" in mode.description


def test_a_registered_mode_is_deployed_without_any_other_change() -> None:
    built: list[DeploymentPlan] = []

    class _Echo(PlaintextDeployment):
        @classmethod
        def deploy(cls, plan: DeploymentPlan) -> PlaintextDeployment:
            built.append(plan)
            return cls(mode="echo", plan=plan)

    echo = AggregationMode(
        name="echo", insecure=True, central_dp=False, description="test", deploy=_Echo.deploy
    )
    register_mode(echo)
    try:
        assert "echo" in mode_names()
        dep = SecureDeployment.create(
            mode="echo", shape=(N_PUB, C), participant_ids=["a", "b"], min_participants=2
        )
        assert isinstance(dep, _Echo) and dep.mode == "echo"
        assert built == [dep.plan] and dep.plan.participant_ids == ("a", "b")
    finally:
        del MODE_REGISTRY["echo"]
    assert mode_names() == ["ckks", "plaintext", "shares"]


def test_round_trip_weighted_sum_and_scores() -> None:
    enc, srv = _encoder(), _server()
    mats = {f"p{i}": honest(i) for i in range(3)}
    handles = {pid: srv.load(enc.encode(m)) for pid, m in mats.items()}
    weights = {"p0": 0.5, "p1": 0.25, "p2": 0.25}
    agg = srv.reveal(srv.weighted_sum(handles, weights), round_id=1)
    np.testing.assert_allclose(agg, sum(weights[p] * mats[p] for p in mats), atol=1e-6)
    handles["bad"] = srv.load(enc.encode(-honest(9)))
    report = srv.score(handles, round_id=1)
    assert max(report.scores, key=report.scores.__getitem__) == "bad"
    assert "bad" not in report.subset


def test_plaintext_scores_are_the_reference_scores() -> None:
    enc, srv = _encoder(), _server()
    mats = {f"p{i}": honest(i) for i in range(4)}
    handles = {pid: srv.load(enc.encode(m)) for pid, m in mats.items()}
    ref = pooled_mahalanobis(PlainBackend(mats), sorted(mats), num_samples=N_PUB)
    assert srv.score(handles, round_id=2).scores == pytest.approx(ref.scores, rel=1e-6)


def test_encoder_clips_to_public_bound() -> None:
    srv = _server()
    handle = srv.load(_encoder().encode(np.full((N_PUB, C), 100.0)))
    out = srv.reveal(srv.weighted_sum({"a": handle}, {"a": 1.0}), round_id=1)
    assert np.abs(out).max() == BOUND


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (encode_matrix(np.zeros((N_PUB + 1, C))), "shape"),
        (encode_matrix(np.full((N_PUB, C), np.nan)), "NaN"),
        (encode_matrix(np.full((N_PUB, C), 9.0)), "public bound"),
        (b"SFMX" + b"\0" * 3, "SFMX"),
        (encode_matrix(np.zeros((N_PUB, C)))[:-1], "bytes"),
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


def test_scoring_needs_two_uploads() -> None:
    srv = _server()
    with pytest.raises(ScoringInvalid, match="at least two"):
        srv.score({"a": srv.load(encode_matrix(honest(0)))}, round_id=1)


def test_unknown_mode_lists_registered_names() -> None:
    with pytest.raises(UnknownMode, match=r"registered: \[.*'plaintext'") as info:
        get_mode("rot13")
    assert info.value.code == "AGGREGATION_UNKNOWN_MODE"
    assert all(repr(name) in str(info.value) for name in mode_names())
    with pytest.raises(UnknownMode, match="'ckks', 'plaintext', 'shares'"):
        SecureDeployment.create(
            mode="rot13", shape=(N_PUB, C), participant_ids=["a"], min_participants=1
        )


def test_registry_refuses_name_clash() -> None:
    other = AggregationMode(
        name="plaintext",
        insecure=True,
        central_dp=False,
        description="x",
        deploy=MODE_REGISTRY["shares"].deploy,
    )
    with pytest.raises(AggregationInvalid, match="already registered"):
        register_mode(other)
    register_mode(InsecurePlaintextMode)  # the same mode again is a no-op
    assert get_mode("plaintext") is InsecurePlaintextMode


class _Shift(AggregatorWrapper):
    def reveal(self, aggregate, *, round_id):  # type: ignore[no-untyped-def]
        return self.inner.reveal(aggregate, round_id=round_id) + 1.0


def test_wrapper_overrides_one_step_and_delegates_the_rest() -> None:
    srv = _Shift(_server())
    h = {p: srv.load(encode_matrix(honest(i))) for i, p in enumerate("ab")}
    agg = srv.weighted_sum(h, {"a": 1.0, "b": 0.0})
    np.testing.assert_allclose(srv.reveal(agg, round_id=1), honest(0) + 1.0, atol=1e-6)
    assert srv.score(h, round_id=1).scores == _server().score(h, round_id=1).scores

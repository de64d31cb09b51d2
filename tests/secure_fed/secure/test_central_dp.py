"""Central DP: the key authority's noise is in the released aggregate and in the ledger.

The released values are compared with the noiseless aggregate of the same
uploads, so the tests fail if the noise is missing, mis-scaled, or added to
anything but the published aggregate; the charges are read back from a real
SQLite privacy ledger.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from api.cli import app
from privacy_ledger.budget.service import PrivacyLedger
from privacy_ledger.errors import BudgetExceeded
from secure_fed.demo import DemoConfig
from secure_fed.errors import FederationConfigInvalid
from secure_fed.federation.config import ASSET_ID, FederationConfig
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.central_dp import CentralDP
from secure_fed.secure.release_plan import ReleasePlan
from tests.secure_fed.secure.helpers import BOUND, population, publication_only
from tests.tolerances import aggregate_tolerance

N, C, Z = 300, 10, 2.0
IDS = [f"p{j:02d}" for j in range(6)]
CONTRIBUTORS = IDS[:4]


def _ledger(tmp_path: Path, budgets: dict[str, str]) -> PrivacyLedger:
    ledger = PrivacyLedger.from_url(f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}")
    for pid in IDS:
        ledger.register_participant(pid, institution=f"Bank {pid}", kind="bank")
        ledger.register_asset(pid, ASSET_ID)
        ledger.set_budget(pid, ASSET_ID, epsilon=budgets.get(pid, "20"), delta=1e-5)
    return ledger


def _round(  # type: ignore[no-untyped-def]
    dep: SecureDeployment, round_id: int = 7, cap: float | None = 0.25, scored: bool = False
):
    """Uploads of the contributors, under a round plan whose weight cap is ``cap``."""
    preds = population(len(CONTRIBUTORS), N, C, seed=3)
    agg = dep.aggregator(bound=BOUND)
    scoring = agg.scoring  # type: ignore[attr-defined]
    cap is None or agg.begin_round(  # the round's public weight cap: the sensitivity's max_weight
        ReleasePlan.for_round(
            round_id=round_id,
            min_participants=3,
            shape=(N, C),
            scoring=scoring,
            max_weight=cap,
            scored=scored,
        )
    )
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(preds[p])) for p in preds}
    noiseless = np.mean([preds[p] for p in CONTRIBUTORS], axis=0)
    return agg, handles, noiseless


def test_noise_is_in_the_released_aggregate_and_charged_to_each_contributor(
    tmp_path: Path,
) -> None:
    ledger, sink = _ledger(tmp_path, {}), MemoryAuditSink()
    dp = CentralDP(noise_multiplier=Z, delta=1e-5, asset_id=ASSET_ID)
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
        central_dp=dp,
        budget=ledger,
    )
    agg, handles, noiseless = _round(dep, scored=True)
    agg.score(handles, round_id=7)  # scoring releases are not noised and not charged
    assert not any(ledger.events(p, ASSET_ID) for p in IDS)
    weights = {p: 1.0 / len(CONTRIBUTORS) for p in CONTRIBUTORS}
    released = agg.reveal(agg.weighted_sum(handles, weights), round_id=7)
    sensitivity = 0.25 * 2 * BOUND * math.sqrt(N * C)
    noise = released.astype(np.float64) - noiseless
    assert np.std(noise) == pytest.approx(Z * sensitivity, rel=0.1)  # 3000 draws: 1.3% error
    assert abs(np.mean(noise)) < 0.1 * Z * sensitivity
    for pid in CONTRIBUTORS:
        (event,) = ledger.events(pid, ASSET_ID)
        assert event.state == "committed" and event.round_id == "r7-central"
        assert event.event.mechanism == "gaussian" and event.event.noise_multiplier == Z
        assert event.event.max_grad_norm == pytest.approx(sensitivity)
        assert ledger.epsilon_spent(pid, ASSET_ID) > 0
    assert all(not ledger.events(p, ASSET_ID) for p in IDS[4:])
    released_events = [e for e in sink.named("decryption.released") if e["central_dp"]]
    assert [e["purpose"] for e in released_events] == ["aggregate"]


def test_without_central_dp_the_aggregate_is_only_flooded(ckks) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    agg, handles, noiseless = _round(dep, cap=None)
    out = agg.reveal(agg.weighted_sum(handles, {p: 0.25 for p in CONTRIBUTORS}), round_id=1)
    tolerance = aggregate_tolerance(dep.authority.keys.public_context.preset, values=out.size)
    assert np.abs(out - noiseless).max() <= tolerance


def test_one_refusing_budget_releases_nothing_and_charges_nobody(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, {"p02": "0.5"})
    dp = CentralDP(noise_multiplier=Z, delta=1e-5, asset_id=ASSET_ID)
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        central_dp=dp,
        budget=ledger,
    )
    agg, handles, _ = _round(dep, round_id=2)
    with pytest.raises(BudgetExceeded):
        agg.reveal(agg.weighted_sum(handles, {p: 0.25 for p in CONTRIBUTORS}), round_id=2)
    assert not dep.authority.log or dep.authority.log[-1].purpose != "aggregate"
    for pid in CONTRIBUTORS:
        assert ledger.epsilon_spent(pid, ASSET_ID) == 0
        assert {e.state for e in ledger.events(pid, ASSET_ID)} <= {"aborted"}


def test_federation_config_reaches_the_released_aggregate(tmp_path: Path) -> None:
    task = load_task("digits", seed=0)
    config = FederationConfig(
        participants=3,
        rounds=1,
        mode="ckks",
        central_dp=Z,
        architectures=("logreg",),
        baseline=False,
    )
    gate = InMemoryBudgetGate(epsilon=20.0, delta=config.delta)
    fed = Federation(
        config=config,
        task=task,
        budget=gate,
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
    )
    ids = [m.participant.participant_id for m in fed.members]
    preds = population(3, *fed.deployment.shape, seed=4)
    agg = fed.engine.aggregator
    # this test drives the aggregator itself, past the envelope gate, so no upload reaches
    # the verifier: the key authority is left without one, as a deployment may be
    fed.deployment.authority.verifier = None  # type: ignore[attr-defined]
    agg.keys = replace(agg.keys, attest=None)  # type: ignore[attr-defined]
    cap = config.weight_cap()
    dp = fed.deployment.authority.central_dp  # type: ignore[attr-defined]
    assert (dp.bound, dp.max_weight) == (PUBLIC_LOGIT_BOUND, cap)  # the enforced caps
    plan = ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=fed.deployment.shape,
        scoring=agg.scoring,  # type: ignore[attr-defined]
        max_weight=cap,  # the round's cap, as the engine fixes it
    )
    agg.begin_round(plan)
    handles = {
        p: agg.load(fed.deployment.encoder(p, bound=PUBLIC_LOGIT_BOUND).encode(m))
        for p, m in zip(ids, preds.values(), strict=True)
    }
    agg.score(handles, round_id=1)  # the federation's policy requires the scoring steps
    out = agg.reveal(agg.weighted_sum(handles, {p: 1 / 3 for p in ids}), round_id=1)
    clipped = [np.clip(m, -PUBLIC_LOGIT_BOUND, PUBLIC_LOGIT_BOUND) for m in preds.values()]
    noise = out - np.mean(clipped, axis=0)
    sensitivity = cap * 2 * PUBLIC_LOGIT_BOUND * math.sqrt(out.size)
    assert np.std(noise) == pytest.approx(Z * sensitivity, rel=0.1)
    assert all(gate.epsilon_spent(p, ASSET_ID) > 0 for p in ids)


@pytest.mark.parametrize("earlier_demo_in_cwd", [False, True])
def test_central_dp_options_are_validated_and_reach_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier_demo_in_cwd: bool
) -> None:
    """Whatever the working directory holds (the README's demo leaves secure-fed-work/demo)."""
    monkeypatch.chdir(tmp_path)
    if earlier_demo_in_cwd:
        earlier = tmp_path / "secure-fed-work" / "demo"
        earlier.mkdir(parents=True)
        (earlier / "results.json").write_text("{}", encoding="utf-8")
    with pytest.raises(FederationConfigInvalid, match=r"central_dp.*\['ckks'\]"):
        FederationConfig(mode="plaintext", central_dp=1.0)
    with pytest.raises(FederationConfigInvalid, match="central_dp"):
        FederationConfig(mode="ckks", central_dp=0.0)
    out = tmp_path / "elsewhere"
    assert DemoConfig(central_dp=1.5, out=out).federation_config().central_dp == 1.5
    result = CliRunner().invoke(app, ["demo", "--help"])
    assert result.exit_code == 0 and "--central-dp" in result.output


@pytest.mark.parametrize("claimed", [1e-6, 0.25])
def test_noise_follows_the_configured_caps_not_the_requests_claims(
    tmp_path: Path, claimed: float
) -> None:
    """An aggregator that under-states max_weight in its request gets no less noise."""
    ledger = _ledger(tmp_path, {})
    dp = CentralDP(noise_multiplier=Z, delta=1e-5, asset_id=ASSET_ID, bound=BOUND, max_weight=0.5)
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        central_dp=dp,
        budget=ledger,
    )
    agg, handles, noiseless = _round(dep, round_id=5)
    aggregate = agg.weighted_sum(handles, {p: 0.25 for p in CONTRIBUTORS})
    aggregate.max_weight = claimed  # the claim the request will carry
    noise = agg.reveal(aggregate, round_id=5).astype(np.float64) - noiseless
    enforced = 0.5 * 2 * BOUND * math.sqrt(N * C)
    assert np.std(noise) == pytest.approx(Z * enforced, rel=0.1)
    for pid in CONTRIBUTORS:
        (event,) = ledger.events(pid, ASSET_ID)
        assert event.event.max_grad_norm == pytest.approx(enforced)

"""Small, fast federations on digits: learning happens, refusals, attacks, dropouts."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from secure_fed.errors import FederationConfigInvalid, RoundConfigInvalid, UnknownMode
from secure_fed.evaluation.attacks import AttackSpec
from secure_fed.federation.config import FederationConfig, plan_participants
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.messages import decode_upload
from secure_fed.federation.stages import RoundConfig, Stage
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import TaskData, load_task
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.wire import decode_matrix

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def task() -> TaskData:
    return load_task("digits", seed=0)


def _fed(task: TaskData, tmp_path: Path, **kw: object) -> Federation:
    defaults: dict[str, object] = {
        "participants": 3,
        "rounds": 3,
        "architectures": ("logreg", "mlp"),
        "distill": DistillSettings(epochs=5),
    }
    defaults.update(kw)
    epsilon = float(defaults.get("epsilon", 8.0))  # type: ignore[arg-type]
    return Federation(
        config=FederationConfig(**defaults),  # type: ignore[arg-type]
        task=task,
        budget=InMemoryBudgetGate(epsilon=epsilon, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
    )


def test_federated_beats_local_only_with_dp(task: TaskData, tmp_path: Path) -> None:
    fed = _fed(task, tmp_path)
    results = fed.run()
    assert [r.stage for r in results] == ["published"] * 3
    federated, local = results[-1].mean_accuracy()
    assert local is not None and federated > local + 0.03, (federated, local)
    last = results[-1].rows
    assert all(r.epsilon_spent is not None and 0 < r.epsilon_spent <= 8.0 + 1e-6 for r in last)
    assert sum(r.weight or 0 for r in last) == pytest.approx(1.0)
    # the engine persisted every round as published
    stored = [fed.engine.store.load(i) for i in (1, 2, 3)]
    assert [s.stage if s else None for s in stored] == [Stage.PUBLISHED] * 3


def test_budget_refusal_stops_private_training_and_round_goes_on(
    task: TaskData, tmp_path: Path
) -> None:
    fed = _fed(task, tmp_path, rounds=2, distill=DistillSettings(epochs=1))
    p0 = fed.members[0].participant
    # Another mechanism eats this participant's whole budget on the real gate.
    gate = fed.budget
    assert isinstance(gate, InMemoryBudgetGate)
    gate.set_budget(p0.participant_id, "private-train", epsilon=0.05)
    result = fed.run_round()
    assert result.stage == "published"
    row = {r.participant_id: r for r in result.rows}[p0.participant_id]
    # refused at calibration (no noise fits 0.05) or at reservation (the label prior of
    # the logit adjustment is reserved first): typed, with the code
    stop = r"stopped: \[(LEDGER_CALIBRATION_IMPOSSIBLE|(LEARNING_)?BUDGET_REFUSED)\] "
    assert re.match(stop, row.private_training), row.private_training
    assert p0.private_training_stopped and row.weight is not None  # still uploads and distills
    assert all(r.private_training == "trained" for r in result.rows if r is not row)
    assert gate.epsilon_spent(p0.participant_id, "private-train") == 0.0


def test_attackers_upload_poison_and_are_down_weighted(task: TaskData, tmp_path: Path) -> None:
    fed = _fed(
        task,
        tmp_path,
        participants=4,
        rounds=1,
        attack=AttackSpec("gaussian", 1),
        distill=DistillSettings(epochs=1),
    )
    result = fed.run_round()
    rows = {r.participant_id: r for r in result.rows}
    attacker = [r for r in result.rows if r.attacker]
    last_planned = plan_participants(fed.config)[-1].participant_id
    assert len(attacker) == 1 and attacker[0].participant_id == last_planned
    honest_scores = [r.score for r in result.rows if not r.attacker]
    assert attacker[0].score > max(honest_scores)  # type: ignore[operator]
    honest_weights = [r.weight or 0.0 for r in result.rows if not r.attacker]
    assert (attacker[0].weight or 0.0) < min(honest_weights)
    # the table has a row for every participant, and only for them
    assert set(rows) == {m.participant.participant_id for m in fed.members} and len(rows) == 4
    # the audit log says which factor and which weight each participant got, and the
    # table's weights are exactly those (the federation's default only down-weights)
    assert isinstance(fed.audit, MemoryAuditSink)
    events = {str(e["participant_id"]): e for e in fed.audit.named("outlier.decision")}
    assert {p: e["weight"] for p, e in events.items()} == {p: r.weight for p, r in rows.items()}
    assert all(e["action"] != "exclude" for e in events.values())
    factor = float(events[attacker[0].participant_id]["factor"])  # type: ignore[arg-type]
    assert factor < 1.0, "a poisoning attacker's weight is cut by the outlier factor"


def test_upload_is_bounded_bytes_bound_to_round(task: TaskData, tmp_path: Path) -> None:
    fed = _fed(task, tmp_path, rounds=1)
    config = fed.round_config(7)
    msg = fed.members[0].participant.upload(config)
    header, payload = decode_upload(msg, max_bytes=config.max_upload_bytes)
    assert header.round_id == 7 and header.schema_hash == config.schema.schema_hash()
    assert header.num_samples == fed.members[0].participant.num_samples
    matrix = decode_matrix(payload)  # the plaintext mode's frame, shape read from it
    assert matrix.shape == (len(fed.task.public_x), task.num_classes)  # with the labeled slice
    assert np.abs(matrix).max() <= 8.0


def test_participant_refuses_round_with_other_public_set(task: TaskData, tmp_path: Path) -> None:
    from dataclasses import replace

    fed = _fed(task, tmp_path, rounds=1)
    config = replace(fed.round_config(1), public_set_sm3="0" * 64)
    with pytest.raises(RoundConfigInvalid, match="SM3 differs"):
        fed.members[0].participant.upload(config)


def test_too_few_uploads_abort_the_round_without_distillation(
    task: TaskData, tmp_path: Path
) -> None:
    fed = _fed(task, tmp_path, rounds=1, min_participants=3)
    # one participant drops out: it trains and sends a valid envelope, which the
    # network loses, so the aggregator never hears of it (a missing participant,
    # not a malformed upload that would be refused)
    dropped = fed.members[0]
    sent: list[bytes] = []
    real_round, real_upload = dropped.handler.handle_round, fed.aggregator.handle_upload

    def send(config: RoundConfig) -> bytes:
        sent.append(real_round(config))
        return sent[-1]

    def network(envelope: bytes, *, round_id: int) -> str:
        if envelope in sent:
            return dropped.participant.participant_id  # lost on the way
        return real_upload(envelope, round_id=round_id)

    dropped.handler.handle_round = send  # type: ignore[method-assign]
    fed.aggregator.handle_upload = network  # type: ignore[method-assign]
    result = fed.run_round()
    assert len(sent) == 1  # the participant did take part, only its upload is missing
    assert result.stage == "aborted" and "only 2 of the required 3" in (result.reason or "")
    assert all(r.weight is None for r in result.rows)  # nothing was published
    state = fed.engine.state(1)
    assert state.stage is Stage.ABORTED
    others = {m.participant.participant_id for m in fed.members[1:]}
    assert set(state.uploads) == others  # the two others were accepted, the dropout absent


def test_nonprivate_mode_reports_no_epsilon(task: TaskData, tmp_path: Path) -> None:
    fed = _fed(
        task, tmp_path, rounds=1, private=False, baseline=False, distill=DistillSettings(epochs=1)
    )
    result = fed.run_round()
    assert all(r.epsilon_spent is None and r.accuracy_local is None for r in result.rows)


@pytest.mark.parametrize(
    ("kw", "error", "fragment"),
    [
        ({"participants": 1}, FederationConfigInvalid, "participants"),
        ({"rounds": 0}, FederationConfigInvalid, "rounds"),
        ({"alpha": 0.0}, FederationConfigInvalid, "alpha"),
        ({"epsilon": -1.0}, FederationConfigInvalid, "epsilon"),
        ({"architectures": ("resnet",)}, FederationConfigInvalid, "not registered"),
        ({"mode": "rot13"}, UnknownMode, "registered"),
        (
            {"attack": AttackSpec("sign_flip", 4), "participants": 4},
            FederationConfigInvalid,
            "honest",
        ),
        ({"min_participants": 9}, FederationConfigInvalid, "min_participants"),
    ],
)
def test_config_validation(kw: dict[str, object], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        FederationConfig(**kw)  # type: ignore[arg-type]

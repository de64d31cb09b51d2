"""In process, both modes: a withheld noticed upload aborts the round; a real dropout does not.

The federation's participants send their signed upload notices to the mode's opening
gatekeeper before uploading (:func:`secure_fed.federation.participant.upload_notice`).
The attacker is the aggregator's message handler: it answers a participant's upload as
accepted and keeps it to itself, so the round's roster omits that participant (before,
the round published over the others: with the next round's publication over everybody,
a difference of single uploads). Now the gatekeeper refuses the roster, typed and
audited, and the round aborts with nothing released.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.errors import RoundConfigInvalid
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.stages import RoundConfig
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.wire import ENVELOPE, decode_frame

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]

VICTIM = "bank-4"


def _federation(mode: str, tmp_path: Path) -> tuple[Federation, MemoryAuditSink]:
    config = FederationConfig(
        participants=4,
        rounds=1,
        mode=mode,
        architectures=("logreg",),
        epochs_per_round=1,
        baseline=False,
        distill=DistillSettings(epochs=1),
    )
    sink = MemoryAuditSink()
    fed = Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        audit=sink,
    )
    return fed, sink


def _released(sink: MemoryAuditSink) -> list[dict[str, object]]:
    return [e for e in sink.named("decryption.released") if e.get("purpose") == "aggregate"]


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_an_aggregator_withholding_a_noticed_upload_aborts_the_round(
    mode: str, tmp_path: Path
) -> None:
    fed, sink = _federation(mode, tmp_path)
    assert VICTIM in [m.participant.participant_id for m in fed.members]
    honest = fed.aggregator.handle_upload

    def withholding(envelope: bytes, *, round_id: int) -> str:
        head, _ = decode_frame(envelope, ENVELOPE, max_bytes=len(envelope))
        if head["participant_id"] == VICTIM:
            return VICTIM  # "accepted", and never stored: the roster will omit it
        return honest(envelope, round_id=round_id)

    fed.aggregator.handle_upload = withholding  # type: ignore[method-assign]
    result = fed.run_round()
    assert result.stage == "aborted", result.reason
    assert result.reason is not None and "ROSTER_OMITS_NOTICED" in result.reason
    assert len(sink.named("upload.noticed")) == 4
    denied = [e for e in sink.named("access.denied") if e.get("op") == "roster"]
    assert denied and all(e["participant_ids"] == [VICTIM] for e in denied), denied
    assert _released(sink) == []  # nothing published
    assert all(row.weight is None for row in result.rows)


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_a_participant_that_drops_out_before_its_notice_leaves_the_round_to_the_rest(
    mode: str, tmp_path: Path
) -> None:
    fed, sink = _federation(mode, tmp_path)
    member = next(m for m in fed.members if m.participant.participant_id == VICTIM)

    def dropped(config: RoundConfig) -> bytes:
        raise RoundConfigInvalid(f"{VICTIM} went offline before round {config.round_id}")

    member.handler.handle_round = dropped  # type: ignore[method-assign]
    result = fed.run_round()
    assert result.stage == "published", result.reason
    noticed = sorted(str(e["participant_id"]) for e in sink.named("upload.noticed"))
    assert noticed == ["bank-2", "hospital-1", "hospital-3"]
    assert len(_released(sink)) == 1
    assert [e for e in sink.named("access.denied") if e.get("op") == "roster"] == []


def test_a_participant_without_a_budget_receipt_sends_no_notice_and_the_round_publishes(
    tmp_path: Path,
) -> None:
    """Its upload is refused for the missing receipt: noticed, it would abort the round."""
    from privacy_ledger.budget.service import PrivacyLedger
    from secure_fed.federation.config import ASSET_ID, plan_participants

    config = FederationConfig(
        participants=4,
        rounds=1,
        mode="shares",
        architectures=("logreg",),
        epochs_per_round=1,
        baseline=False,
        distill=DistillSettings(epochs=1),
    )
    ledger = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    plan = plan_participants(config)
    for p in plan:
        ledger.register_participant(p.participant_id, institution=p.institution, kind=p.kind)
        ledger.register_asset(p.participant_id, ASSET_ID)
        budget = "0.001" if p.participant_id == VICTIM else "8"  # it cannot train: no receipt
        ledger.set_budget(p.participant_id, ASSET_ID, epsilon=budget, delta=1e-5)
    sink = MemoryAuditSink()
    fed = Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=ledger,
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        audit=sink,
    )
    try:
        result = fed.run_round()
    finally:
        ledger.engine.dispose()
    assert result.stage == "published", result.reason
    refused = [e["code"] for e in sink.named("upload.rejected")]
    assert refused == ["UPLOAD_RECEIPT_MISSING"]
    noticed = sorted(str(e["participant_id"]) for e in sink.named("upload.noticed"))
    assert noticed == ["bank-2", "hospital-1", "hospital-3"]


def test_a_noticed_participant_the_exclusion_rule_removes_does_not_abort_the_round(
    tmp_path: Path,
) -> None:
    """The policy's reasons still apply once the roster is fixed: scored far, excluded."""
    from secure_fed.evaluation.attacks import AttackSpec

    config = FederationConfig(
        participants=5,
        rounds=1,
        mode="shares",
        architectures=("logreg",),
        epochs_per_round=1,
        baseline=False,
        distill=DistillSettings(epochs=1),
        attack=AttackSpec("gaussian", 1),
        exclude_outliers=True,
    )
    sink = MemoryAuditSink()
    fed = Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        audit=sink,
    )
    result = fed.run_round()
    assert result.stage == "published", result.reason
    assert len(sink.named("upload.noticed")) == 5  # everybody noticed, the attacker too
    attacker = next(r for r in result.rows if r.attacker)
    assert attacker.decision == "exclude" and not attacker.weight, attacker
    assert [e for e in sink.named("access.denied") if e.get("op") == "roster"] == []

"""A whole federation weighs by registered base shares and by evidence on its labeled slice."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.scoring.evidence import plain_evidence

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _fed(tmp_path: Path, **kw: object) -> Federation:
    config = FederationConfig(
        participants=4,
        rounds=1,
        architectures=("logreg", "mlp"),
        distill=DistillSettings(epochs=2),
        baseline=False,
        **kw,  # type: ignore[arg-type]
    )
    return Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
    )


def test_the_round_weighs_by_registered_counts_and_evidence(tmp_path: Path) -> None:
    fed = _fed(tmp_path)
    assert fed.evidence is not None and fed.evidence.size == 100
    fed.run()
    assert isinstance(fed.audit, MemoryAuditSink)
    events = {str(e["participant_id"]): e for e in fed.audit.named("outlier.decision")}
    counts = {m.participant.participant_id: m.participant.num_samples for m in fed.members}
    assert fed.engine.weighting.registered == counts  # the operator's split, not a header
    total = sum(counts.values())
    assert {p: e["base_share"] for p, e in events.items()} == pytest.approx(
        {p: n / total for p, n in counts.items()}
    )
    # the evidence recorded is the public linear function of what each participant sent
    state = fed.engine.state(1)
    uploads = {p: fed.engine.aggregator.load(u.payload) for p, u in state.uploads.items()}
    mats = {p: h.matrix for p, h in uploads.items()}  # type: ignore[attr-defined]
    assert fed.engine.evidence is not None
    mask = fed.engine.evidence.for_round(1).mask(fed.engine.aggregator.shape)
    expected = plain_evidence(mats, mask)  # type: ignore[arg-type]
    assert {p: e["evidence"] for p, e in events.items()} == pytest.approx(expected)
    assert all(0.05 <= float(e["merit"]) <= 1.0 for e in events.values())  # type: ignore[arg-type]


def test_without_a_slice_every_merit_is_one(tmp_path: Path) -> None:
    fed = _fed(tmp_path, evidence_rows=0)
    assert fed.evidence is None and fed.engine.evidence is None
    fed.run()
    events = fed.audit.named("outlier.decision")  # type: ignore[attr-defined]
    assert all(e["evidence"] is None and e["merit"] == 1.0 for e in events)


def test_every_round_row_carries_the_weight_terms_the_engine_applied(tmp_path: Path) -> None:
    """The round table (terminal, results.json, report.html) reads the audited terms."""
    fed = _fed(tmp_path)
    (result,) = fed.run()
    assert isinstance(fed.audit, MemoryAuditSink)
    events = {str(e["participant_id"]): e for e in fed.audit.named("outlier.decision")}
    assert {r.participant_id for r in result.rows} == set(events)
    for row in result.rows:
        e = events[row.participant_id]
        assert (row.base_share, row.merit, row.copies) == (
            e["base_share"],
            e["merit"],
            e["copies"],
        )
        assert row.applied_factor == e["applied_factor"] == e["factor"] == row.factor
        assert row.max_weight == e["max_weight"] and row.weight == e["weight"]
        assert row.smoothed_score == e["smoothed"]
        assert row.downweight_threshold == e["downweight_threshold"]
    assert fed.decisions.of_round(2) == {}

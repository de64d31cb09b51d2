"""The audit log records the weights that were applied: the publication is recomputed from it.

Scores -> decisions -> weights is one path (docs/federation.md, section 5). The
test below reads only the ``outlier.decision`` events of a two-round run and the
weighting parameters, recomputes every published weight from them, and
compares with the weights inside the publication bytes: a factor that is
audited but not applied (or applied but not audited) fails it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.budget.participants import ParticipantRegistry
from privacy_ledger.db import create_ledger_engine, upgrade
from secure_fed.errors import TooFewParticipants
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.messages import Publication, decode_publication
from secure_fed.federation.schema import SchemaRegistry
from secure_fed.federation.stages import RoundStore
from secure_fed.federation.store import JsonFileRoundStore, LedgerRoundStore
from secure_fed.federation.weighting import DynamicWeighting
from secure_fed.secure.audit import AuditSink, LedgerAuditSink, MemoryAuditSink
from secure_fed.secure.modes.plaintext import InsecurePlaintextAggregator
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy
from tests.secure_fed.federation.helpers import (
    BOUND,
    N_PUB,
    C,
    Clock,
    honest,
    make_config,
    make_upload,
)

ALPHA, BETA = 5.0, 0.5
# declared sample counts: recorded in the events, but they move no weight
SAMPLES = {"a": 100, "b": 200, "c": 150, "d": 100, "e": 10**9}
# what the administrator registered: the base shares (a's is above the cap)
REGISTERED = {"a": 300, "b": 100, "c": 100, "d": 100, "e": 100}
CAP = 1 / 3  # the public cap of one weight (1 / min_participants): it binds in both rounds


def _matrices(round_id: int) -> dict[str, np.ndarray]:
    """a, b, c honest; d a little off (down-weighted); e far off in round 1, honest in round 2.

    Scores (robust pooled Mahalanobis): a, b, c below 7; d about 12 in both
    rounds; e about 670 in round 1 and 1.5 in round 2.
    """
    mats = {p: honest(10 * round_id + i) for i, p in enumerate("abc")}
    off = honest(10 * round_id + 3) + np.array([-0.4, 0.4, 0.0])
    mats["d"] = np.clip(off, -BOUND, BOUND).astype(np.float32)
    far = np.clip(honest(10 * round_id + 4) + np.array([3.0, 0.0, -3.0]), -BOUND, BOUND)
    mats["e"] = far.astype(np.float32) if round_id == 1 else honest(10 * round_id + 4)
    return mats


def _engine(
    store: RoundStore, registry: SchemaRegistry, audit: AuditSink, *, policy: bool = True
) -> RoundEngine:
    return RoundEngine(
        store=store,
        aggregator=InsecurePlaintextAggregator(shape=(N_PUB, C), bound=BOUND),
        mode="plaintext",
        registry=registry,
        weighting=DynamicWeighting(alpha=ALPHA, beta=BETA, registered=dict(REGISTERED)),
        # C - 1 = 2 degrees of freedom: down-weighting from 9.2, exclusion from 18.4
        # (with history) or 55 (at once); the model's own cuts (no dispersion scaling)
        outlier_filter=(
            OutlierPolicy(
                dof=C - 1, config=OutlierConfig(exclude_quantile=0.9999, dispersion=False)
            )
            if policy
            else None
        ),
        audit=audit,
        clock=Clock(),
    )


def _filtered(engine: RoundEngine, rid: int, *, min_participants: int = 3) -> None:
    engine.open(
        make_config(rid, min_participants=min_participants, max_weight=1 / min_participants)
    )
    engine.start_collecting(rid)
    for pid, matrix in _matrices(rid).items():
        engine.submit(
            make_upload(pid, matrix, round_id=rid, num_samples=SAMPLES[pid]), round_id=rid
        )
    engine.close(rid)
    engine.filter(rid)


def _run(store: RoundStore, registry: SchemaRegistry, audit: AuditSink) -> dict[int, Publication]:
    engine = _engine(store, registry, audit)
    publications = {}
    for rid in (1, 2):
        _filtered(engine, rid)
        publications[rid] = decode_publication(engine.publish(rid), max_bytes=10**6)
    return publications


def _num(value: object) -> float:
    """A number from an event field (a float in memory, a decimal string in the ledger)."""
    return float(value)  # type: ignore[arg-type]


def _recompute(
    events: list[dict[str, object]], previous: dict[str, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Published weights of one round from its events alone, and the EMA state after it.

    ``v_k = b_k m_k f_k / (1 + copies_k)`` with ``b_k`` from the registered counts
    and no labeled slice (merit 1) in this engine; the evidence EMA stays empty.
    """
    kept = {str(e["participant_id"]): e for e in events if e["action"] != "exclude"}
    assert all(e["evidence"] is None and _num(e["merit"]) == 1.0 for e in kept.values())
    raw = {
        p: _num(e["base_share"]) * _num(e["applied_factor"]) / (1 + int(str(e["copies"])))
        for p, e in kept.items()
    }
    total = sum(REGISTERED[p] for p in kept)
    assert {p: _num(e["base_share"]) for p, e in kept.items()} == pytest.approx(
        {p: REGISTERED[p] / total for p in kept}
    )
    scaled = {p: v / sum(raw.values()) for p, v in raw.items()}
    caps = {_num(e["max_weight"]) for e in events}
    assert len(caps) == 1
    return _capped(scaled, caps.pop()), previous


def _capped(raw: dict[str, float], cap: float) -> dict[str, float]:
    """``min(cap, lambda v)`` summing to 1, by trying how many of the largest are capped."""
    order = sorted(raw, key=raw.__getitem__, reverse=True)
    for top in range(len(order)):
        rest = order[top:]
        scale = (1 - cap * top) / sum(raw[p] for p in rest)
        if scale * raw[rest[0]] <= cap:
            return {p: cap if p in order[:top] else scale * raw[p] for p in raw}
    raise AssertionError("the cap cannot be met")


def _check(events: list[dict[str, object]], publications: dict[int, Publication]) -> None:
    history: dict[str, float] = {}
    for rid, pub in publications.items():
        mine = [e for e in events if e["round_id"] == rid]
        assert sorted(str(e["participant_id"]) for e in mine) == sorted(SAMPLES)
        expected, history = _recompute(mine, history)
        assert pub.weights == pytest.approx(expected, rel=1e-12)
        recorded = {str(e["participant_id"]): _num(e["weight"]) for e in mine}
        assert {p: w for p, w in recorded.items() if p not in pub.excluded} == pytest.approx(
            pub.weights, rel=1e-12
        )
        assert all(recorded[p] == 0.0 for p in pub.excluded)
        assert sorted(pub.excluded) == sorted(
            str(e["participant_id"]) for e in mine if e["action"] == "exclude"
        )


def _actions(events: list[dict[str, object]], rid: int) -> dict[str, str]:
    return {str(e["participant_id"]): str(e["action"]) for e in events if e["round_id"] == rid}


def test_published_weights_follow_from_the_audit_events(
    tmp_path: Path, registry: SchemaRegistry
) -> None:
    sink = MemoryAuditSink()
    publications = _run(JsonFileRoundStore(directory=tmp_path / "rounds"), registry, sink)
    events = sink.named("outlier.decision")
    # the scenario exercises every action, a factor between min_factor and 1, and an
    # honest round after an exclusion (history high, score low: factor min_factor)
    assert _actions(events, 1) == {
        "a": "keep",
        "b": "keep",
        "c": "keep",
        "d": "downweight",
        "e": "exclude",
    }
    assert _actions(events, 2)["d"] == "downweight" and _actions(events, 2)["e"] == "downweight"
    assert any(0.05 < _num(e["factor"]) < 1 for e in events)
    assert [
        _num(e["factor"]) for e in events if e["round_id"] == 2 and e["participant_id"] == "e"
    ] == [0.05]
    _check(events, publications)
    # the cap is applied: it binds in both rounds, and no weight exceeds it
    for pub in publications.values():
        assert max(pub.weights.values()) == CAP and sum(pub.weights.values()) == pytest.approx(1)
    # the declared 1e9 rows of e buy nothing: in round 2 its weight is its factor's
    assert publications[2].weights["e"] < 0.05
    # the down-weighting really lowers the published weight, by the factor's ratio
    # (b and d are below the cap in round 1, so the cap's common scale cancels)
    first = {str(e["participant_id"]): e for e in events if e["round_id"] == 1}
    assert publications[1].weights["b"] < CAP
    ratio = publications[1].weights["d"] / publications[1].weights["b"]
    assert ratio == pytest.approx(
        _num(first["d"]["factor"]) / _num(first["b"]["factor"]), rel=1e-12
    )


def test_signed_ledger_log_alone_reproduces_the_published_weights(
    tmp_path: Path, registry: SchemaRegistry
) -> None:
    db = create_ledger_engine(f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}")
    upgrade(db)
    participants = ParticipantRegistry(db)
    for pid in SAMPLES:
        participants.register_participant(pid, institution=f"Bank {pid}", kind="bank")
    key = SM2PrivateKey.generate()
    log = AuditLog(signer=key, origin="test.example/weights", checkpoint_every=1)
    store = LedgerRoundStore(engine=db, namespace="weights")
    publications = _run(store, registry, LedgerAuditSink(engine=db, log=log))
    verify_log(db, public_key=key.public_key)  # the events are in an intact, signed log
    with Session(db) as session:
        rows = session.scalars(
            select(AuditEntryRow)
            .where(AuditEntryRow.event == "outlier.decision")
            .order_by(AuditEntryRow.entry_index)
        ).all()
        events = [json.loads(row.entry)["fields"] for row in rows]
    assert len(events) == 2 * len(SAMPLES)
    _check(events, publications)
    db.dispose()


def test_decisions_survive_a_restart_between_filter_and_publish(
    tmp_path: Path, registry: SchemaRegistry
) -> None:
    want_sink, got_sink = MemoryAuditSink(), MemoryAuditSink()
    uncrashed = _engine(JsonFileRoundStore(directory=tmp_path / "one"), registry, want_sink)
    _filtered(uncrashed, 1)
    want = decode_publication(uncrashed.publish(1), max_bytes=10**6)
    store = JsonFileRoundStore(directory=tmp_path / "two")
    _filtered(_engine(store, registry, MemoryAuditSink()), 1)  # crashes after filtering
    fresh = _engine(store, registry, got_sink)  # its policy has no history at all
    assert fresh.recover() == {1: "resumed:aggregating"}
    got = decode_publication(fresh.publish(1), max_bytes=10**6)
    assert got.weights == pytest.approx(want.weights, rel=1e-12) and got.excluded == ("e",)
    _check(got_sink.named("outlier.decision"), {1: got})


def test_abort_at_the_filter_records_decisions_without_weights(
    tmp_path: Path, registry: SchemaRegistry
) -> None:
    sink = MemoryAuditSink()
    engine = _engine(JsonFileRoundStore(directory=tmp_path), registry, sink)
    with pytest.raises(TooFewParticipants, match="filter kept 4 of the required 5"):
        _filtered(engine, 1, min_participants=5)
    events = sink.named("outlier.decision")
    assert _actions(events, 1)["e"] == "exclude" and len(events) == len(SAMPLES)
    assert all(e["weight"] is None and e["publication_sm3"] is None for e in events)


def test_keep_all_filter_records_factor_one_and_the_weights(
    tmp_path: Path, registry: SchemaRegistry
) -> None:
    sink = MemoryAuditSink()
    engine = _engine(JsonFileRoundStore(directory=tmp_path), registry, sink, policy=False)
    _filtered(engine, 1)
    pub = decode_publication(engine.publish(1), max_bytes=10**6)
    events = sink.named("outlier.decision")
    assert all(e["action"] == "keep" and e["factor"] == 1.0 for e in events)
    assert all(e["exclude_threshold"] is None for e in events)
    _check(events, {1: pub})

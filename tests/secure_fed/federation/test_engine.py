from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.budget.participants import ParticipantRegistry
from privacy_ledger.db import create_ledger_engine, upgrade
from secure_fed.errors import (
    OutlierConfigInvalid,
    OutputSpecMismatch,
    RoundConfigInvalid,
    RoundNotFound,
    RoundOutOfOrder,
    SchemaMajorMismatch,
    StaleRound,
    TooFewParticipants,
    UploadDuplicate,
    UploadLate,
    UploadMalformed,
    UploadParticipantUnknown,
    UploadPayloadStale,
    UploadReplayed,
)
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.messages import decode_publication
from secure_fed.federation.schema import OutputSpec, SchemaRegistry
from secure_fed.federation.stages import TRANSITIONS, RoundState, RoundStore, Stage, advance
from secure_fed.federation.store import JsonFileRoundStore, LedgerRoundStore
from secure_fed.secure.modes.plaintext import InsecurePlaintextAggregator
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.outlier import Decision
from tests.secure_fed.federation.helpers import (
    BOUND,
    N_PUB,
    C,
    Clock,
    honest,
    make_config,
    make_upload,
    schema,
)

ALLOWED = {
    (Stage.OPEN, Stage.COLLECTING),
    (Stage.OPEN, Stage.ABORTED),
    (Stage.COLLECTING, Stage.FILTERING),
    (Stage.COLLECTING, Stage.ABORTED),
    (Stage.FILTERING, Stage.AGGREGATING),
    (Stage.FILTERING, Stage.ABORTED),
    (Stage.AGGREGATING, Stage.PUBLISHED),
    (Stage.AGGREGATING, Stage.ABORTED),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(Stage, Stage)))
def test_every_transition(src: Stage, dst: Stage) -> None:
    state = RoundState(config=make_config(), stage=src)
    if (src, dst) in ALLOWED:
        advance(state, dst, at=1.0)
        assert state.stage is dst and state.log[-1] == (dst.value, 1.0)
    else:
        with pytest.raises(RoundOutOfOrder, match=f"cannot go from '{src.value}'"):
            advance(state, dst, at=1.0)
        assert state.stage is src


def test_transition_table_matches_the_documented_machine() -> None:
    assert {(s, d) for s, ds in TRANSITIONS.items() for d in ds} == ALLOWED


@pytest.fixture(params=["json", "ledger"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each test that keeps rounds runs on both stores (the others take no store at all)."""
    return str(request.param)


def _store(directory: Path, kind: str) -> RoundStore:
    if kind == "json":
        return JsonFileRoundStore(directory=directory / "rounds")
    directory.mkdir(parents=True, exist_ok=True)
    engine = create_ledger_engine(f"sqlite:///{(directory / 'ledger.db').as_posix()}")
    upgrade(engine)
    registry = ParticipantRegistry(engine)
    for pid in ("a", "b", "c"):
        registry.register_participant(pid, institution=f"Bank {pid}", kind="bank")
    return LedgerRoundStore(engine=engine, namespace="test-fed")


def _engine(tmp_path: Path, registry: SchemaRegistry, clock: Clock, kind: str) -> RoundEngine:
    return RoundEngine(
        store=_store(tmp_path, kind),
        aggregator=InsecurePlaintextAggregator(shape=(N_PUB, C), bound=BOUND),
        mode="plaintext",
        registry=registry,
        clock=clock,
        evidence=EvidenceSlice(rows=tuple(range(N_PUB)), labels=(0, 0, 1, 2) * (N_PUB // 4)),
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str) -> RoundEngine:
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config())
    eng.start_collecting(1)
    return eng


def test_full_round_publishes_weighted_aggregate(engine: RoundEngine) -> None:
    mats = {pid: honest(i) for i, pid in enumerate("abc")}
    for pid, m in mats.items():
        assert engine.submit(make_upload(pid, m), round_id=1) == pid
    engine.close(1)
    scores = engine.filter(1)
    assert set(scores) == set(mats) and all(s >= 0 for s in scores.values())
    pub = decode_publication(engine.publish(1), max_bytes=10**6, shape=(N_PUB, C))
    assert pub.round_id == 1 and abs(sum(pub.weights.values()) - 1) < 1e-9
    expected = sum(pub.weights[p] * mats[p].astype(np.float64) for p in mats)
    np.testing.assert_allclose(pub.aggregate, expected, atol=1e-5)
    assert engine.state(1).stage is Stage.PUBLISHED


def test_step_methods_out_of_order(engine: RoundEngine) -> None:
    with pytest.raises(RoundOutOfOrder, match="filter needs stage 'filtering'"):
        engine.filter(1)
    with pytest.raises(RoundOutOfOrder, match="publish needs stage 'aggregating'"):
        engine.publish(1)
    with pytest.raises(RoundOutOfOrder, match="start_collecting needs stage 'open'"):
        engine.start_collecting(1)
    engine.submit(make_upload("a", honest(1)), round_id=1)
    engine.submit(make_upload("b", honest(2)), round_id=1)
    engine.close(1)
    with pytest.raises(RoundOutOfOrder, match="an upload needs stage 'collecting'"):
        engine.submit(make_upload("c", honest(3)), round_id=1)
    with pytest.raises(RoundOutOfOrder, match="close needs stage 'collecting'"):
        engine.close(1)


def test_upload_before_collecting_is_out_of_order(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config())
    with pytest.raises(RoundOutOfOrder, match="needs stage 'collecting'"):
        eng.submit(make_upload("a", honest(1)), round_id=1)


def test_replay_and_duplicate(engine: RoundEngine) -> None:
    msg = make_upload("a", honest(1), nonce="ab" * 16)
    engine.submit(msg, round_id=1)
    with pytest.raises(UploadReplayed, match="already used"):
        engine.submit(msg, round_id=1)
    with pytest.raises(UploadDuplicate, match="already uploaded"):
        engine.submit(make_upload("a", honest(2)), round_id=1)
    assert list(engine.state(1).uploads) == ["a"]


def test_stale_and_unknown_round(engine: RoundEngine) -> None:
    engine.abort(1, reason="test")
    engine.open(make_config(2))
    engine.start_collecting(2)
    with pytest.raises(StaleRound, match="upload for round 1"):
        engine.submit(make_upload("a", honest(1), round_id=1), round_id=2)
    with pytest.raises(RoundNotFound, match="not open"):
        engine.submit(make_upload("a", honest(1), round_id=3), round_id=2)
    with pytest.raises(StaleRound, match="not newer"):
        engine.open(make_config(2))
    with pytest.raises(RoundNotFound, match="never opened"):
        engine.state(9)


def test_stale_round_lookup_after_restart(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config(5))
    fresh = _engine(tmp_path, registry, clock, store_kind)
    with pytest.raises(StaleRound, match="older than the current round 5"):
        fresh.state(3)


def test_schema_checks_on_upload(engine: RoundEngine, registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaMajorMismatch, match="MAJOR"):
        engine.submit(make_upload("a", honest(1), declared=schema(version="2.0.0")), round_id=1)
    wrong = schema(version="1.9.0", output=OutputSpec(num_classes=C, bound=4.0))
    registry.register(wrong)
    with pytest.raises(OutputSpecMismatch, match="output"):
        engine.submit(make_upload("b", honest(1), declared=wrong), round_id=1)
    engine.submit(make_upload("c", honest(1), declared=schema(version="1.1.0")), round_id=1)
    assert list(engine.state(1).uploads) == ["c"]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda b: b[:20], "header length"),
        (lambda b: b"XXXX" + b[4:], "frame"),
        (lambda b: b[:-4], "payload"),
        (lambda b: b + b"\0" * 4, "payload"),
        (lambda b: b"\0" * (17 * 1024 * 1024), "over the limit"),
    ],
)
def test_malformed_bytes(engine: RoundEngine, mutate, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UploadMalformed, match=fragment):
        engine.submit(mutate(make_upload("a", honest(1))), round_id=1)
    assert engine.state(1).uploads == {}


def test_out_of_bound_payload_rejected(engine: RoundEngine) -> None:
    from crypto.sm.sm3 import sm3_digest
    from secure_fed.federation.messages import UploadHeader, encode_matrix, encode_upload

    payload = encode_matrix(np.full((N_PUB, C), 50.0))
    header = UploadHeader(
        round_id=1,
        participant_id="a",
        mode="plaintext",
        schema=schema(),
        schema_hash=make_config().schema.schema_hash(),
        num_samples=3,
        nonce="cd" * 16,
        payload_sm3=sm3_digest(payload).hex(),
    )
    with pytest.raises(UploadMalformed, match="public bound"):
        engine.submit(encode_upload(header, payload), round_id=1)


def test_late_upload_and_dropout_completion(engine: RoundEngine, clock: Clock) -> None:
    engine.submit(make_upload("a", honest(1)), round_id=1)
    engine.submit(make_upload("b", honest(2)), round_id=1)
    clock.now = 2500.0
    with pytest.raises(UploadLate, match="after the deadline"):
        engine.submit(make_upload("c", honest(3)), round_id=1)
    assert engine.close_if_due(1)
    engine.filter(1)
    pub = decode_publication(engine.publish(1), max_bytes=10**6)
    assert set(pub.weights) == {"a", "b"}


def test_too_few_participants_aborts(engine: RoundEngine) -> None:
    engine.submit(make_upload("a", honest(1)), round_id=1)
    with pytest.raises(TooFewParticipants, match="only 1 of the required 2") as info:
        engine.close(1)
    assert info.value.code == "ROUND_TOO_FEW_PARTICIPANTS"
    assert engine.state(1).stage is Stage.ABORTED
    assert engine.store.load(1).stage is Stage.ABORTED  # type: ignore[union-attr]


def test_config_validation() -> None:
    with pytest.raises(RoundConfigInvalid, match="min_participants"):
        make_config(min_participants=0)
    with pytest.raises(RoundConfigInvalid, match="round_id"):
        make_config(round_id=-1)
    with pytest.raises(RoundConfigInvalid, match="deadline"):
        make_config(deadline=float("inf"))


def test_engine_refuses_config_of_other_mode(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    from dataclasses import replace

    eng = _engine(tmp_path, registry, clock, store_kind)
    with pytest.raises(RoundConfigInvalid, match="not the engine's"):
        eng.open(replace(make_config(), mode="ckks"))


def test_restart_resumes_collecting_round(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config())
    eng.start_collecting(1)
    eng.submit(make_upload("a", honest(1), nonce="11" * 16), round_id=1)
    del eng  # crash
    fresh = _engine(tmp_path, registry, clock, store_kind)
    assert fresh.recover() == {1: "resumed:collecting"}
    with pytest.raises(UploadReplayed):
        fresh.submit(make_upload("b", honest(2), nonce="11" * 16), round_id=1)
    fresh.submit(make_upload("b", honest(2)), round_id=1)
    fresh.close(1)
    fresh.filter(1)
    assert set(decode_publication(fresh.publish(1), max_bytes=10**6).weights) == {"a", "b"}


def _to_aggregating(
    directory: Path, registry: SchemaRegistry, clock: Clock, kind: str
) -> RoundEngine:
    eng = _engine(directory, registry, clock, kind)
    eng.open(make_config())
    eng.start_collecting(1)
    for i, pid in enumerate("abc"):
        eng.submit(make_upload(pid, honest(i)), round_id=1)
    eng.close(1)
    eng.filter(1)
    return eng


def test_restart_mid_aggregation_resumes_from_stored_uploads(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    expected = _to_aggregating(tmp_path / "one", registry, clock, store_kind).publish(1)
    crashed = _to_aggregating(tmp_path / "two", registry, clock, store_kind)
    del crashed  # crash between filtering and publishing
    fresh = _engine(tmp_path / "two", registry, clock, store_kind)
    assert fresh.recover() == {1: "resumed:aggregating"}
    got = decode_publication(fresh.publish(1), max_bytes=10**6)
    want = decode_publication(expected, max_bytes=10**6)
    np.testing.assert_allclose(got.aggregate, want.aggregate)
    assert got.weights == pytest.approx(want.weights)


def test_restart_after_deadline_aborts_or_completes(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config(1))
    eng.start_collecting(1)
    eng.submit(make_upload("a", honest(1)), round_id=1)
    clock.now = 3000.0
    fresh = _engine(tmp_path, registry, clock, store_kind)
    assert fresh.recover() == {1: "aborted"}
    assert fresh.state(1).stage is Stage.ABORTED and "only 1" in (fresh.state(1).reason or "")
    fresh.open(make_config(2, deadline=4000.0))
    fresh.start_collecting(2)
    for i, pid in enumerate("ab"):  # fresh predictions: round 1's payload would be stale
        fresh.submit(make_upload(pid, honest(i + 10), round_id=2), round_id=2)
    clock.now = 5000.0
    again = _engine(tmp_path, registry, clock, store_kind)
    assert again.recover() == {2: "resumed:filtering"}
    assert again.store.open_rounds()[0].round_id == 2


def test_ema_history_survives_restart(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config(1))
    eng.start_collecting(1)
    for i, pid in enumerate("abc"):
        eng.submit(make_upload(pid, honest(i)), round_id=1)
    eng.close(1)
    eng.filter(1)
    eng.publish(1)
    history = dict(eng.weighting.history)
    fresh = _engine(tmp_path, registry, clock, store_kind)
    fresh.recover()
    assert fresh.weighting.history == history and history


def test_ledger_store_refuses_unregistered_participant_and_records_evidence(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = _engine(tmp_path, registry, clock, "ledger")
    eng.open(make_config())
    eng.start_collecting(1)
    with pytest.raises(UploadParticipantUnknown, match="'mallory' is not registered"):
        eng.submit(make_upload("mallory", honest(1)), round_id=1)
    assert eng.state(1).uploads == {}
    eng.submit(make_upload("a", honest(1)), round_id=1)
    store = eng.store
    assert isinstance(store, LedgerRoundStore)
    evidence = store.rounds.uploads("test-fed:00000001")
    got = [(e.participant_id, e.kind, e.shape) for e in evidence]
    assert got == [("a", "plaintext", [N_PUB, C])]
    assert store.load(1).uploads["a"].payload.startswith(b"SFMX")  # type: ignore[union-attr]


class _ForgetfulFilter:
    """A wrong filter: decides for one participant fewer than were scored."""

    def decide(self, scores: Mapping[str, float], *, round_id: int) -> dict[str, Decision]:
        return {
            p: Decision(participant_id=p, score=s, smoothed=s, action="keep", factor=1.0)
            for p, s in sorted(scores.items())[1:]
        }


def test_filter_must_decide_for_every_scored_upload(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    eng = RoundEngine(
        store=_store(tmp_path, store_kind),
        registry=registry,
        clock=clock,
        mode="plaintext",
        aggregator=InsecurePlaintextAggregator(shape=(N_PUB, C), bound=BOUND),
        outlier_filter=_ForgetfulFilter(),
    )
    eng.open(make_config())
    eng.start_collecting(1)
    for i, pid in enumerate("abc"):
        eng.submit(make_upload(pid, honest(i)), round_id=1)
    eng.close(1)
    with pytest.raises(OutlierConfigInvalid, match=r"decided for \['b', 'c'\], but round 1 scored"):
        eng.filter(1)
    assert eng.state(1).stage is Stage.FILTERING


def test_a_payload_another_round_accepted_is_stale_on_both_stores(
    tmp_path: Path, registry: SchemaRegistry, clock: Clock, store_kind: str
) -> None:
    """The store answers which rounds accepted a payload, also after the engine restarted."""
    eng = _engine(tmp_path, registry, clock, store_kind)
    eng.open(make_config(1))
    eng.start_collecting(1)
    eng.submit(make_upload("a", honest(1)), round_id=1)
    digest = sm3_digest(eng.state(1).uploads["a"].payload).hex()
    assert eng.store.rounds_with_payload(digest, other_than=2) == [1]
    assert eng.store.rounds_with_payload(digest, other_than=1) == []
    assert eng.store.rounds_with_payload("ab" * 32, other_than=2) == []
    fresh = _engine(tmp_path, registry, clock, store_kind)
    fresh.open(make_config(2, deadline=4000.0))
    fresh.start_collecting(2)
    with pytest.raises(UploadPayloadStale, match="accepted in round 1"):
        fresh.submit(make_upload("b", honest(1), round_id=2), round_id=2)
    assert fresh.state(2).uploads == {}
    fresh.submit(make_upload("b", honest(2), round_id=2), round_id=2)  # the round goes on
    assert sorted(fresh.state(2).uploads) == ["b"]

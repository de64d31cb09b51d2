"""The round engine under any order of operations (a Hypothesis state machine).

Rounds are opened, started, uploaded to (by known participants, twice, or for
another round), closed, filtered and published in any order. The engine may
refuse a step, always with a typed error; it never moves a round along an edge
the stage machine does not have, never publishes a round with fewer uploads
than its ``min_participants``, and publishes weights only of participants whose
upload it holds.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from secure_fed.errors import SecureFedError
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.messages import decode_publication
from secure_fed.federation.schema import SchemaRegistry
from secure_fed.federation.stages import TRANSITIONS, Stage
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.secure.modes.plaintext import InsecurePlaintextAggregator
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

ROUND = st.integers(min_value=1, max_value=3)
PIDS = st.sampled_from(["a", "b", "c"])


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        registry = SchemaRegistry()
        for version in ("1.0.0", "1.1.0", "1.0.3", "2.0.0"):
            registry.register(schema(version=version))
        self.folder = Path(tempfile.mkdtemp(prefix="rounds-"))  # removed by teardown()
        self.engine = RoundEngine(
            store=JsonFileRoundStore(directory=self.folder),
            aggregator=InsecurePlaintextAggregator(shape=(N_PUB, C), bound=BOUND),
            mode="plaintext",
            registry=registry,
            clock=Clock(),
        )
        self.stages: dict[int, Stage] = {}
        self.published: dict[int, set[str]] = {}

    def _try(self, round_id: int, step: str, *args: object) -> object:
        try:
            return getattr(self.engine, step)(*args)
        except SecureFedError:
            return None
        finally:
            self._moved(round_id)

    def _moved(self, round_id: int) -> None:
        try:
            now = self.engine.state(round_id).stage
        except SecureFedError:
            return  # never opened
        before = self.stages.get(round_id)
        if before is not None and now is not before:
            assert now in TRANSITIONS[before], f"{before.value} -> {now.value}"
        self.stages[round_id] = now

    @rule(round_id=ROUND, minimum=st.integers(2, 3))
    def open(self, round_id: int, minimum: int) -> None:
        self._try(round_id, "open", make_config(round_id, min_participants=minimum))

    @rule(round_id=ROUND)
    def start(self, round_id: int) -> None:
        self._try(round_id, "start_collecting", round_id)

    @rule(round_id=ROUND, pid=PIDS, seed=st.integers(0, 3), labelled=ROUND)
    def submit(self, round_id: int, pid: str, seed: int, labelled: int) -> None:
        upload = make_upload(pid, honest(seed), round_id=labelled)
        self.engine_submit(round_id, upload)

    def engine_submit(self, round_id: int, upload: bytes) -> None:
        try:
            self.engine.submit(upload, round_id=round_id)
        except SecureFedError:
            pass
        self._moved(round_id)

    @rule(round_id=ROUND)
    def close(self, round_id: int) -> None:
        self._try(round_id, "close", round_id)

    @rule(round_id=ROUND)
    def filter(self, round_id: int) -> None:
        self._try(round_id, "filter", round_id)

    @rule(round_id=ROUND)
    def publish(self, round_id: int) -> None:
        out = self._try(round_id, "publish", round_id)
        if isinstance(out, bytes):
            state = self.engine.state(round_id)
            weights = decode_publication(out, max_bytes=10**7).weights
            assert set(weights) <= set(state.uploads)
            assert len(state.uploads) >= state.config.min_participants
            self.published[round_id] = set(weights)

    @rule(round_id=ROUND, uploaders=st.lists(PIDS, min_size=1, max_size=3, unique=True))
    def whole_round(self, round_id: int, uploaders: list[str]) -> None:
        """Every step of one round in order (so publications are reached), from any state."""
        self.open(round_id, 2)
        self.start(round_id)
        for seed, pid in enumerate(uploaders):
            self.submit(round_id, pid, seed, round_id)
        self.close(round_id)
        self.filter(round_id)
        self.publish(round_id)

    @invariant()
    def published_rounds_stay_published(self) -> None:
        for round_id in self.published:
            assert self.engine.state(round_id).stage is Stage.PUBLISHED

    def teardown(self) -> None:
        """Remove this run's round store (one per example: dozens per session)."""
        shutil.rmtree(self.folder, ignore_errors=True)


TestEngineSequences = EngineMachine.TestCase
TestEngineSequences.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)


def test_every_run_removes_its_round_store() -> None:
    made: list[Path] = []

    class Recording(EngineMachine):
        def __init__(self) -> None:
            super().__init__()
            made.append(self.folder)

    run_state_machine_as_test(
        Recording, settings=settings(max_examples=3, stateful_step_count=5, deadline=None)
    )
    assert made and not [f for f in made if f.exists()]

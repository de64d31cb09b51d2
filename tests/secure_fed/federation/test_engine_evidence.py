"""The engine's labeled slice: in every round's release plan, for the whole scored roster.

The release plan carries the slice (so the gatekeepers know the one mask they may
open); the engine asks the aggregator for the evidence of every scored participant
(the plan opens it for the roster) and weighs the accepted ones; a slice below the
gatekeepers' row minimum would make every secure round's plan refused, so the engine
drops it with a warning, in every mode.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.schema import SchemaRegistry
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.secure.mode import UploadHandle
from secure_fed.secure.modes.plaintext import InsecurePlaintextAggregator
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy
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

SLICE = EvidenceSlice(rows=tuple(range(N_PUB)), labels=(0, 0, 1) * (N_PUB // 3))


class Recording(InsecurePlaintextAggregator):
    """The plaintext reference, recording the plans it is given and whom evidence is asked of."""

    def __init__(self) -> None:
        super().__init__(shape=(N_PUB, C), bound=BOUND)
        self.plans: list[ReleasePlan] = []
        self.asked: list[list[str]] = []

    def begin_round(self, plan: ReleasePlan) -> None:
        self.plans.append(plan)

    def evidence(
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float]:
        self.asked.append(sorted(handles))
        return super().evidence(handles, mask, round_id=round_id)


def _engine(tmp_path: Path, evidence: EvidenceSlice | None, policy: object = None) -> RoundEngine:
    registry = SchemaRegistry()
    registry.register(schema())
    return RoundEngine(
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        aggregator=Recording(),
        mode="plaintext",
        registry=registry,
        clock=Clock(),
        evidence=evidence,
        outlier_filter=policy,  # type: ignore[arg-type]
    )


def test_the_plan_carries_the_slice_and_the_whole_roster_is_asked(tmp_path: Path) -> None:
    policy = OutlierPolicy(dof=C - 1, min_keep=2, config=OutlierConfig(hard_factor=1.0))
    engine = _engine(tmp_path, SLICE, policy)
    engine.open(make_config(min_participants=2))
    engine.start_collecting(1)
    uploads = {"a": honest(1), "b": honest(2), "c": -8.0 * np.ones((N_PUB, C), np.float32)}
    for pid, matrix in uploads.items():
        engine.submit(make_upload(pid, matrix), round_id=1)
    engine.close(1)
    engine.filter(1)
    engine.publish(1)
    aggregator = engine.aggregator
    assert isinstance(aggregator, Recording)
    assert [p.evidence for p in aggregator.plans] == [SLICE]
    assert aggregator.asked == [["a", "b", "c"]]  # the plan's roster, excluded or not
    assert engine.state(1).excluded == ["c"] and set(engine.state(1).weights) == {"a", "b"}


def test_a_slice_below_the_gatekeepers_minimum_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    small = EvidenceSlice(rows=tuple(range(N_PUB - 1)), labels=(0,) * (N_PUB - 1))
    with caplog.at_level(logging.WARNING, logger="secure_fed.federation.engine"):
        engine = _engine(tmp_path, small)
    assert engine.evidence is None
    assert f"slice of {N_PUB - 1} rows is below the {N_PUB}" in caplog.text
    engine.open(make_config())
    aggregator = engine.aggregator
    assert isinstance(aggregator, Recording) and aggregator.plans[0].evidence is None
    assert _engine(tmp_path / "full", SLICE).evidence == SLICE  # min(N, 64) rows: kept

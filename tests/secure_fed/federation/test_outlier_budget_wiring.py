"""The outlier budget travels from the configuration to the plan the gatekeepers pin.

A consortium whose signed policy sets ``max_flagged`` refuses every plan
without a budget (or with a larger one). The round engine writes its outlier
policy's budget into each round's plan, so a federation configured with the
policy's budget opens its rounds, and one without it is refused before any
upload.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from secure_fed.errors import FederationConfigInvalid, ModeSetupInvalid
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.messages import decode_publication
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy
from tests.secure_fed.secure.helpers import BOUND, Harness

N, C, QUORUM = 48, 4, 3
IDS = ["p0", "p1", "p2", "p3"]


def _harness(tmp: Path, budget: int | None) -> Harness:
    policy = ConsortiumPolicy(
        participant_ids=tuple(IDS), shape=(N, C), quorum=QUORUM, max_flagged=1
    )
    dep = SecureDeployment.create(
        mode="shares",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=QUORUM,
        audit=MemoryAuditSink(),
        scoring=ScoringConfig(min_subset=QUORUM),
        policy=policy,
    )
    h = Harness(dep, tmp, ids=IDS, min_participants=QUORUM, audit=None)
    h.engine.outlier_filter = OutlierPolicy(
        dof=C - 1, config=OutlierConfig(max_flagged=budget), min_keep=QUORUM
    )
    return h


def test_an_engine_with_the_policys_budget_opens_and_publishes(tmp_path: Path) -> None:
    h = _harness(tmp_path, budget=1)
    h.engine.open(dataclasses.replace(h.config(1), max_weight=1.0 / QUORUM))
    h.engine.start_collecting(1)
    rng = np.random.default_rng(0)
    for pid in IDS:
        upload = np.clip(rng.normal(0, 1, (N, C)), -BOUND, BOUND).astype(np.float32)
        h.verifier.accept(h.envelope(pid, upload, 1), round_id=1)
    h.engine.close(1)
    h.engine.filter(1)
    publication = decode_publication(h.engine.publish(1), max_bytes=1 << 24)
    assert sorted(publication.weights) == IDS


@pytest.mark.parametrize("budget", [None, 2])
def test_an_engine_without_the_policys_budget_is_refused_at_open(
    tmp_path: Path, budget: int | None
) -> None:
    h = _harness(tmp_path, budget=budget)
    with pytest.raises(ModeSetupInvalid, match="max_flagged"):
        h.engine.open(dataclasses.replace(h.config(1), max_weight=1.0 / QUORUM))


@pytest.mark.parametrize("bad", [-1, 4, 1.5, True])
def test_the_configuration_refuses_a_budget_outside_its_range(bad: object) -> None:
    with pytest.raises(FederationConfigInvalid, match="max_flagged"):
        FederationConfig(participants=4, max_flagged=bad)  # type: ignore[arg-type]

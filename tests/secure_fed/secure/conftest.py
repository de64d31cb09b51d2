from __future__ import annotations

import pytest

import secure_fed.secure.modes.ckks  # noqa: F401  (registers "ckks")
import secure_fed.secure.modes.shares  # noqa: F401  (registers "shares")
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.outlier import MemoryAuditSink

N, C, K = 300, 10, 6
IDS = [f"p{j:02d}" for j in range(K)]


@pytest.fixture(scope="module")
def ckks() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(mode="ckks", shape=(N, C), participant_ids=IDS,
                                  min_participants=3, audit=sink)
    return dep, sink


@pytest.fixture
def shares() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(mode="shares", shape=(N, C), participant_ids=IDS,
                                  min_participants=3, audit=sink)
    return dep, sink

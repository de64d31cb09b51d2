from __future__ import annotations

import pytest

from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment

N, C, K = 300, 10, 6
IDS = [f"p{j:02d}" for j in range(K)]


@pytest.fixture(scope="module")
def ckks() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks", shape=(N, C), participant_ids=IDS, min_participants=3, audit=sink
    )
    return dep, sink


@pytest.fixture
def shares() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=IDS, min_participants=3, audit=sink
    )
    return dep, sink

from __future__ import annotations

import pytest

from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy
from secure_fed.secure.deployment import SecureDeployment

N, C, K = 300, 10, 6
IDS = [f"p{j:02d}" for j in range(K)]
#: These fixtures test the parties' mechanics, some with publication-only plans: their
#: consortium does not require the scoring steps (the default policy does).
POLICY = ConsortiumPolicy(
    participant_ids=tuple(IDS), shape=(N, C), quorum=3, scored=False, ranking=False
)


@pytest.fixture(scope="module")
def ckks() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        audit=sink,
        policy=POLICY,
    )
    return dep, sink


@pytest.fixture
def shares() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        audit=sink,
        policy=POLICY,
    )
    return dep, sink


@pytest.fixture
def shares_plain() -> tuple[SecureDeployment, MemoryAuditSink]:
    """A shares deployment without MACs (the helper protocol tests craft its requests)."""
    from secure_fed.secure.deployment import DeploymentPlan
    from secure_fed.secure.inprocess.shares import SharesDeployment

    sink = MemoryAuditSink()
    plan = DeploymentPlan(
        shape=(N, C), participant_ids=tuple(IDS), min_participants=3, audit=sink, policy=POLICY
    )
    return SharesDeployment.deploy(plan, authenticated=False), sink

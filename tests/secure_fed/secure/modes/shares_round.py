"""A small shares-mode deployment for the mode's mutant tests (4 participants, 24 x 3)."""

from __future__ import annotations

from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.shares import SharesDeployment
from tests.secure_fed.secure.helpers import publication_only

N, C, BOUND = 24, 3, 8.0
IDS = [f"p{j}" for j in range(4)]


def deployment() -> SharesDeployment:
    """A fresh shares deployment over ``IDS``, quorum 3 (publication-only plans allowed)."""
    dep = SecureDeployment.create(
        mode="shares",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
    )
    assert isinstance(dep, SharesDeployment)
    return dep

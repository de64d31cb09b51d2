"""Full engine rounds for the adversarial tests (real deployment, engine, envelopes, policy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.release_policy import DecryptionRecord
from tests.secure_fed.secure.helpers import Harness, population

C = 10


def gatekeeper_log(dep: SecureDeployment) -> list[DecryptionRecord]:
    """What the mode's gatekeeper actually released or refused."""
    party = dep.helper if dep.mode == "shares" else dep.authority  # type: ignore[attr-defined]
    return list(party.log)


def run_round(
    mode: str,
    k: int,
    tmp_path: Path,
    *,
    attackers: int = 0,
    n: int = 200,
    min_participants: int | None = None,
    seed: int = 0,
) -> tuple[SecureDeployment, Harness, dict[str, np.ndarray], object]:
    """One published round of ``k`` participants (the last ``attackers`` scale their logits)."""
    quorum = min_participants if min_participants is not None else min(3, k - attackers)
    ids = [f"p{j:02d}" for j in range(k)]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode=mode, shape=(n, C), participant_ids=ids, min_participants=quorum, audit=sink
    )
    harness = Harness(dep, tmp_path, ids=ids, min_participants=quorum, audit=sink)
    attack = "scaling" if attackers else None
    preds = population(k, n, C, seed=seed, attackers=attackers, attack=attack)
    _, state, _ = harness.round(1, preds)
    return dep, harness, preds, state

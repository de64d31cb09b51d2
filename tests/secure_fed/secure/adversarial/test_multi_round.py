"""A curious aggregator subtracts publications of two rounds whose rosters differ by one.

Round 1 publishes over ``{a, b, c}``; in round 2 ``c`` drops out (or the aggregator
withholds its upload: nothing tells the two apart) and the round publishes over
``{a, b}``. With equal weights ``3 pub_1 - 2 pub_2`` is ``c``'s matrix when predictions
did not change. Under the default policy (``isolation`` 1) both publications are released
and the test measures what the aggregator learns: ``c``'s upload to the publications'
noise. Under a policy with ``isolation`` 2 the gatekeeper refuses the second publication
before releasing anything (``access.denied``), in both modes; the refusal survives a
restart of the gatekeeper (its plan journal replays the publications it made).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.errors import DecryptionRefused, OpeningRefused
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from tests.secure_fed.secure.helpers import population

N, C, BOUND = 300, 10, 8.0
IDS = ["a", "b", "c"]


def _deploy(mode: str, isolation: int, sink: MemoryAuditSink) -> SecureDeployment:
    policy = ConsortiumPolicy(
        participant_ids=tuple(IDS), shape=(N, C), quorum=2, isolation=isolation
    )
    return SecureDeployment.create(
        mode=mode,
        shape=(N, C),
        participant_ids=IDS,
        min_participants=2,
        audit=sink,
        policy=policy,
    )


def _publish(dep: SecureDeployment, round_id: int, preds: dict[str, np.ndarray]) -> np.ndarray:
    """One scored round over ``preds``'s participants, equal weights; return the publication."""
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(
        ReleasePlan.for_round(
            round_id=round_id,
            min_participants=2,
            shape=(N, C),
            scoring=ScoringConfig(min_subset=2),
        )
    )
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    agg.score(handles, round_id=round_id)
    weights = dict.fromkeys(preds, 1 / len(preds))
    return np.asarray(agg.reveal(agg.weighted_sum(handles, weights), round_id=round_id))


def _preds() -> dict[str, np.ndarray]:
    made = population(len(IDS), N, C, seed=17)
    return {p: np.clip(m, -BOUND, BOUND) for p, m in zip(IDS, made.values(), strict=True)}


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_without_the_rule_two_rounds_subtract_to_the_dropped_upload(mode: str) -> None:
    """What the default policy (isolation 1) lets a curious aggregator learn, measured."""
    preds = _preds()
    dep = _deploy(mode, 1, MemoryAuditSink())
    first = _publish(dep, 1, preds)
    second = _publish(dep, 2, {p: preds[p] for p in ("a", "b")})
    recovered = 3 * first - 2 * second
    error = float(np.sqrt(np.mean((recovered - preds["c"]) ** 2)))
    spread = float(np.sqrt(np.mean((preds["c"] - np.mean(list(preds.values()), axis=0)) ** 2)))
    assert error < 1e-2 * spread  # c's whole matrix, to the publications' noise
    agreement = np.mean(np.argmax(recovered, axis=1) == np.argmax(preds["c"], axis=1))
    assert agreement > 0.99


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_with_the_rule_the_second_publication_is_refused(mode: str, tmp_path: Path) -> None:
    preds = _preds()
    sink = MemoryAuditSink()
    dep = _deploy(mode, 2, sink)
    _publish(dep, 1, preds)
    refusal: Any = DecryptionRefused if mode == "ckks" else OpeningRefused
    with pytest.raises(refusal, match=r"single out \['c'\]"):
        _publish(dep, 2, {p: preds[p] for p in ("a", "b")})
    party = "key_authority" if mode == "ckks" else "helper"
    denied = [e for e in sink.named("access.denied") if e.get("party") == party]
    assert "single out ['c']" in str(denied[-1]["reason"])
    released = [e for e in sink.named("decryption.released") if e.get("purpose") == "aggregate"]
    assert [e.get("round_id") for e in released] == [1]
    # a round over all three again is published: it isolates nobody
    _publish(dep, 3, preds)


def test_the_rule_remembers_publications_through_a_restart(tmp_path: Path) -> None:
    preds = _preds()
    sink = MemoryAuditSink()
    dep = _deploy("shares", 2, sink)
    journal = tmp_path / "helper-plans.db"
    dep.helper = dataclasses.replace(dep.helper, plan_journal=PlanJournal(journal))  # type: ignore[attr-defined]
    _publish(dep, 1, preds)
    # the helper restarts on its journal: the round-1 publication is still counted
    dep.helper = dataclasses.replace(dep.helper, plan_journal=PlanJournal(journal))  # type: ignore[attr-defined]
    with pytest.raises(OpeningRefused, match=r"single out \['c'\]"):
        _publish(dep, 2, {p: preds[p] for p in ("a", "b")})

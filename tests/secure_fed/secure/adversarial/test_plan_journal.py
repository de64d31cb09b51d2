"""A restarted gatekeeper remembers its rounds: same plan resumed, another refused, one publication.

The attacker is the aggregator, with its own signing key and the gatekeeper's real
channel. Before, a gatekeeper kept its plans in memory: after a restart the aggregator
installed the same round's plan again with other content and published that round a
second time with other weights (two publications of a round subtract to single
uploads). With a :class:`~secure_fed.secure.plan_journal.PlanJournal` each gatekeeper
replays every installed plan and every release at start. Each test restarts the
gatekeeper as a new object over the same journal file (the real-process SIGKILL case is
``tests/api/services/test_party_services.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.errors import DecryptionRefused, ModeSetupInvalid, ReleaseRefused
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.ckks import CkksAggregator, CkksKeys
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from tests.secure_fed.secure.helpers import BOUND, population, publication_only

N, C = 120, 4
IDS = ["a", "b", "c", "d"]


class _Restartable:
    """The key authority behind a channel that survives its restarts (as a URL would)."""

    def __init__(self, dep: Any, journal: Path) -> None:
        self.dep, self.journal = dep, journal
        self.current = dataclasses.replace(dep.authority, plan_journal=PlanJournal(journal))

    def restart(self) -> None:
        self.current = dataclasses.replace(self.current, plan_journal=PlanJournal(self.journal))

    def aggregator(self) -> CkksAggregator:
        keys = self.dep.server_keys()
        channel = CkksKeys(
            public_context=keys.public_context,
            authority=lambda b: self.current.handle(b),
            signer=keys.signer,
            plans=lambda b: self.current.install_plan(b),
            publication_context=keys.publication_context,
        )
        return CkksAggregator(shape=(N, C), bound=BOUND, keys=channel, min_participants=3)


def _plan(agg: CkksAggregator, **kw: Any) -> ReleasePlan:
    return ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=(N, C),
        scoring=ScoringConfig(moment_samples=agg.samples),
        max_weight=kw.pop("max_weight", 1 / 3),
        **kw,
    )


def _setup(tmp_path: Path) -> tuple[_Restartable, MemoryAuditSink, Any, dict[str, Any]]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
    )
    ka = _Restartable(dep, tmp_path / "keyauthority-plans.db")
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=3).values(), strict=True))
    payloads = {p: dep.encoder(p, bound=BOUND).encode(m) for p, m in preds.items()}
    return ka, sink, dep, payloads


def test_a_restart_mid_round_resumes_the_plan_and_refuses_what_was_released(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ka, sink, _, payloads = _setup(tmp_path)
    agg = ka.aggregator()
    agg.begin_round(_plan(agg))
    handles = {p: agg.load(b) for p, b in payloads.items()}
    agg.score(handles, round_id=1)
    ka.restart()
    # a restarted aggregator resends the same plan: resumed, nothing recorded again
    again = ka.aggregator()
    again.begin_round(_plan(again))
    assert len(sink.named("plan.installed")) == 1
    # its scores were released before the restart: asked again, refused
    with pytest.raises(DecryptionRefused):
        again.score({p: again.load(b) for p, b in payloads.items()}, round_id=1)
    # another plan for the round (another weight cap, within the policy) is refused and audited
    other = ka.aggregator()
    with pytest.raises(ModeSetupInvalid, match="already has a release plan"):
        other.begin_round(_plan(other, max_weight=0.3))
    denied = [e for e in sink.named("access.denied") if e.get("op") == "plan"]
    assert denied and "already has a release plan" in str(denied[-1]["reason"])
    # the original aggregator goes on where the round was: it publishes once
    out = agg.reveal(agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25)), round_id=1)
    assert np.isfinite(out).all()


def test_a_published_round_is_never_published_again_after_restarts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ka, sink, _, payloads = _setup(tmp_path)
    agg = ka.aggregator()
    agg.begin_round(_plan(agg, scored=False))
    handles = {p: agg.load(b) for p, b in payloads.items()}
    agg.reveal(agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25)), round_id=1)
    for _ in range(2):  # two restarts gave three publications of one round before
        ka.restart()
        second = ka.aggregator()
        second.begin_round(_plan(second, scored=False))  # the same plan: resumed, done
        skewed = {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3 - 1e-3, "d": 1e-3}
        with pytest.raises(DecryptionRefused, match="allows 'done' now, not 'publication'"):
            second.reveal(second.weighted_sum(handles, skewed), round_id=1)
    released = [e for e in sink.named("decryption.released") if e["purpose"] == "aggregate"]
    assert len(released) == 1


def test_an_altered_journal_is_refused_at_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    ka, _, _, _ = _setup(tmp_path)
    agg = ka.aggregator()
    agg.begin_round(_plan(agg))
    with sqlite3.connect(ka.journal) as db:
        db.execute("UPDATE plans SET plan = replace(plan, '0.3333', '0.9999')")
    with pytest.raises(ModeSetupInvalid, match="altered"):
        ka.restart()


def test_a_restarted_helper_refuses_another_plan_and_a_second_publication(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from secure_fed.errors import AuthorityRequestMalformed

    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
    )
    journal = tmp_path / "helper-plans.db"
    dep.helper = dataclasses.replace(dep.helper, plan_journal=PlanJournal(journal))
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=5).values(), strict=True))
    payloads = {p: dep.encoder(p, bound=BOUND).encode(m) for p, m in preds.items()}
    agg = dep.aggregator(bound=BOUND)
    the_plan = ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=(N, C),
        scoring=ScoringConfig(),
        scored=False,
        max_weight=1 / 3,
    )
    agg.begin_round(the_plan)
    handles = {p: agg.load(b) for p, b in payloads.items()}
    agg.reveal(agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25)), round_id=1)
    dep.helper = dataclasses.replace(dep.helper, plan_journal=PlanJournal(journal))  # restart
    again = dep.aggregator(bound=BOUND)
    again.begin_round(the_plan)  # the same plan: resumed
    with pytest.raises(AuthorityRequestMalformed, match="already has a release plan"):
        dep.aggregator(bound=BOUND).begin_round(dataclasses.replace(the_plan, max_weight=0.3))
    denied = [e for e in sink.named("access.denied") if e.get("op") == "plan"]
    assert denied and denied[-1]["party"] == "helper"
    skewed = {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3 - 1e-3, "d": 1e-3}
    with pytest.raises(ReleaseRefused, match="allows 'done' now, not 'publication'"):
        again.reveal(again.weighted_sum(handles, skewed), round_id=1)
    released = [e for e in sink.named("decryption.released") if e["purpose"] == "aggregate"]
    assert len(released) == 1


def test_a_file_that_is_no_journal_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    junk = tmp_path / "plans.db"
    junk.write_bytes(b"not an sqlite file" * 100)
    with pytest.raises(ModeSetupInvalid, match="cannot be opened"):
        PlanJournal(junk)

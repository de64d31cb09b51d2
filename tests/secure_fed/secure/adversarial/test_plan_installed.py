"""``plan.installed``: each gatekeeper records the release plan it applied, once.

The event names the plan's SM3 digest, round, participant set and weight bounds
as the gatekeeper holds them (a plan sent below the gatekeeper's minimum is
recorded with the raised minimum, i.e. what was applied), and the authenticated
request it came from. A resent identical plan and a refused one record nothing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger.audit import canonical
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.db import create_ledger_engine, upgrade
from secure_fed.errors import PlanOutsidePolicy, ServerRequestUnauthenticated
from secure_fed.secure.audit import LedgerAuditSink, MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties import helper as helper_party
from secure_fed.secure.parties import key_authority
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.server_auth import ServerSigningKey
from tests.secure_fed.secure.helpers import plan, publication_only

N, C = 32, 3
IDS = ["p00", "p01", "p02", "p03"]


def _deploy(mode: str, sink: object) -> SecureDeployment:
    return SecureDeployment.create(
        mode=mode,
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,  # type: ignore[arg-type]
    )


def _install(dep: SecureDeployment, the_plan: ReleasePlan) -> ReleasePlan:
    keys = dep.server_keys()  # type: ignore[attr-defined]
    if dep.mode == "ckks":
        request = key_authority.plan_request(the_plan, signer=keys.signer)
        return ReleasePlan.from_bytes(dep.authority.install_plan(request))  # type: ignore[attr-defined]
    request = helper_party.plan_request(the_plan, key=keys.request_key)
    reply = helper_party.reply_array(dep.helper.handle(request))[1]  # type: ignore[attr-defined]
    assert isinstance(reply, bytes)
    return ReleasePlan.from_bytes(reply)


@pytest.fixture(scope="module")
def ckks() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    return _deploy("ckks", sink), sink


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_the_applied_plan_is_recorded_once(mode: str, ckks) -> None:  # type: ignore[no-untyped-def]
    if mode == "ckks":
        dep, sink = ckks
    else:
        sink = MemoryAuditSink()
        dep = _deploy(mode, sink)
    below = replace(plan(7, (N, C)), min_participants=2, max_weight=0.5)  # below the quorum
    with pytest.raises(PlanOutsidePolicy, match="quorum 2 is below the policy's 3"):
        _install(dep, below)  # refused, never raised to fit: what is applied is what was sent
    assert not [e for e in sink.named("plan.installed") if e["round_id"] == 7]
    denied = [e for e in sink.named("access.denied") if e.get("op") == "plan"]
    assert denied[-1]["code"] == "PLAN_OUTSIDE_POLICY"
    sent = replace(plan(7, (N, C)), max_weight=0.3)
    applied = _install(dep, sent)
    assert applied == sent
    events = [e for e in sink.named("plan.installed") if e["round_id"] == 7]
    assert len(events) == 1
    event = events[0]
    party = "key_authority" if mode == "ckks" else "helper"
    assert event["party"] == party
    assert event["plan_sm3"] == sm3_digest(applied.to_bytes()).hex()
    assert event["min_participants"] == 3 and event["participants"] == IDS
    assert event["max_weight"] == repr(0.3) and event["weight_floor"] == repr(applied.weight_floor)
    assert event["plan"]["moment_samples"] == applied.moment_samples  # type: ignore[index]
    assert event["request"]["signer"] == "aggregator"  # type: ignore[index]
    assert len(event["request"]["nonce"]) == 32  # type: ignore[index]
    _install(dep, sent)  # the aggregator resends the same plan (a restart): nothing applied
    assert len([e for e in sink.named("plan.installed") if e["round_id"] == 7]) == 1


def test_a_refused_plan_records_no_installation(ckks) -> None:  # type: ignore[no-untyped-def]
    dep, sink = ckks
    forger = ServerSigningKey.generate("aggregator")
    before = len(sink.named("plan.installed"))
    with pytest.raises(ServerRequestUnauthenticated):
        dep.authority.install_plan(key_authority.plan_request(plan(8, (N, C)), signer=forger))
    assert len(sink.named("plan.installed")) == before


def test_plan_installed_lands_in_the_signed_ledger_log(tmp_path: Path) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    upgrade(engine)
    signer = SM2PrivateKey.generate()
    log = AuditLog(signer=signer, origin="test.example/audit", checkpoint_every=1)
    dep = _deploy("shares", LedgerAuditSink(engine=engine, log=log))
    applied = _install(dep, plan(3, (N, C)))
    with Session(engine) as session:
        rows = session.scalars(select(AuditEntryRow).order_by(AuditEntryRow.entry_index)).all()
        entries = [canonical.decode(r.entry) for r in rows]
    installed = [e for e in entries if e["event"] == "plan.installed"]
    assert len(installed) == 1 and installed[0]["subject"] == "round:3"
    assert installed[0]["fields"]["plan_sm3"] == sm3_digest(applied.to_bytes()).hex()
    assert verify_log(engine, public_key=signer.public_key).tree_size == len(entries)
    engine.dispose()

"""A deployment folder laid out as ``secure-fed deploy local`` leaves it, written by real parties.

:func:`build_deployment` runs the key ceremony into ``<run>/keys``, starts the
key authority in process on its own audit log (``<run>/keyauthority/audit.db``,
:func:`api.services.run.party_audit`, heads signed with its ``audit.key.pem``),
runs one scored CKKS round through it (real decryptions), has it refuse a second
plan for that round (a real refusal), and writes the ledger
(``<run>/ledger.db``) with the participants and the round stored as published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sqlalchemy.orm import Session

from api.services.run import party_audit
from privacy_ledger import AuditLog, PrivacyLedger, RoundStore
from secure_fed.deploy.authority import KeyAuthorityParty
from secure_fed.deploy.ceremony import read_sm2
from secure_fed.deploy.keys import create_keys, load_aggregator, load_helper, load_key_authority
from secure_fed.deploy.verifier_party import load_verifier
from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.parties.key_authority import plan_request
from secure_fed.secure.server_auth import ServerSigningKey
from tests.secure_fed.deploy.loaded import run_round
from tests.secure_fed.secure.helpers import plan

IDS = ("h1", "h2", "b1")
SHAPE = (64, 4)
ROUND_KEY = "local:00000001"


@dataclass(frozen=True)
class Deployment:
    """The folder and what the key authority's log records."""

    run: Path

    @property
    def ledger_url(self) -> str:
        return f"sqlite:///{self.run / 'ledger.db'}"

    @property
    def authority_db(self) -> Path:
        return self.run / "keyauthority" / "audit.db"


def _ledger(run: Path, *, stage: str) -> None:
    log = AuditLog(signer=read_sm2(run / "keys" / "api", "audit"), origin="secure-fed/local")
    ledger = PrivacyLedger.from_url(f"sqlite:///{run / 'ledger.db'}", audit=log)
    for pid in IDS:
        ledger.register_participant(pid, institution=pid, kind="hospital")
        ledger.register_asset(pid, "private-train")
        ledger.set_budget(pid, "private-train", epsilon=Decimal("8"), delta=1e-5)
    RoundStore(ledger.engine).save(ROUND_KEY, stage=stage, state={"config": {"round_id": 1}})
    with Session(ledger.engine) as session:
        log.checkpoint(session, force=True)
        session.commit()
    ledger.engine.dispose()


def _helper(keys: Path, run: Path) -> Callable[[bytes], bytes]:
    state = run / "helper"
    state.mkdir(parents=True)
    audit = party_audit(keys / "helper", state, party="helper", database_url=None)
    return load_helper(keys / "helper", audit=audit, state_dir=state).handle


def build_deployment(run: Path, *, stage: str = "published", mode: str = "ckks") -> Deployment:
    """Write the folder described in the module docstring; the round is stored at ``stage``.

    In ``shares`` mode the helper runs too, on its own log (``<run>/helper/audit.db``).
    """
    keys = run / "keys"
    create_keys(keys, mode=mode, participant_ids=IDS, shape=SHAPE, min_participants=2)
    state = run / "keyauthority"
    state.mkdir(parents=True)
    audit = party_audit(keys / "keyauthority", state, party="keyauthority", database_url=None)
    ka = load_key_authority(keys / "keyauthority", audit=audit, state_dir=state)
    helper = _helper(keys, run) if mode == "shares" else None
    verifier = None  # ckks: the key authority pins the ceremony's verifier
    if mode == "ckks":
        verifier = load_verifier(keys / "verifier", audit=None).channels()
    agg = load_aggregator(
        keys / "aggregator", authority=ka.channels(), helper=helper, verifier=verifier
    )
    run_round(agg, keys, run / "round")
    if mode == "ckks":
        _refuse_second_plan(ka, keys)
    _ledger(run, stage=stage)
    return Deployment(run=run)


def _refuse_second_plan(ka: KeyAuthorityParty, keys: Path) -> None:
    signer = ServerSigningKey(name="aggregator", key=read_sm2(keys / "aggregator", "aggregator"))
    try:  # another plan for round 1: refused and audited by the key authority
        ka.plan(plan_request(plan(1, SHAPE, min_participants=3), signer=signer))
    except ModeSetupInvalid:
        pass
    else:
        raise AssertionError("the key authority accepted a second plan for round 1")

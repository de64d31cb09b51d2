"""A participant that skips its budget: the aggregator refuses uploads without the ledger's receipt.

A real SQLite privacy ledger records each participant's reservation; its
receipt key signs receipts of committed ones; the aggregator's envelope gate
checks signature, participant, round, DP plan and freshness before the round
engine sees the upload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from crypto.sm import SM2PrivateKey
from privacy_ledger import MechanismEvent, PrivacyLedger
from privacy_ledger.budget.receipts import DPPlan, ReceiptIssuer, ReceiptVerifier
from secure_fed.errors import UploadReceiptInvalid, UploadReceiptMissing
from secure_fed.federation.envelope import seal_upload
from secure_fed.federation.messages import encode_upload, training_label
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from tests.secure_fed.secure.helpers import Harness, population

N, C = 40, 4
IDS = ["a", "b", "c"]
PLAN = DPPlan(noise_multiplier=1.1, sample_rate=0.05, steps=60, delta=1e-5)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[PrivacyLedger]:
    led = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    for pid in IDS:
        led.register_participant(pid, institution=f"Hospital {pid}", kind="hospital")
        led.register_asset(pid, "train", description="records")
        led.set_budget(pid, "train", epsilon="8", delta=1e-5)
    yield led
    led.engine.dispose()


@pytest.fixture
def world(ledger: PrivacyLedger, tmp_path: Path):  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="plaintext", shape=(N, C), participant_ids=IDS, min_participants=2, audit=sink
    )
    h = Harness(dep, tmp_path, ids=IDS, min_participants=2, audit=sink)
    issuer = ReceiptIssuer(ledger=ledger, key=SM2PrivateKey.generate(), clock=h.clock)
    h.verifier.receipts = ReceiptVerifier(public_key=issuer.public_key, clock=h.clock)
    h.engine.open(h.config(1))
    h.engine.start_collecting(1)
    return h, ledger, issuer, sink


def _charge(ledger: PrivacyLedger, pid: str, round_id: int, plan: DPPlan = PLAN) -> None:
    event = MechanismEvent(
        noise_multiplier=plan.noise_multiplier,
        sample_rate=plan.sample_rate,
        steps=plan.steps,
        delta=plan.delta,
        max_grad_norm=1.0,
    )
    ledger.commit(ledger.reserve(pid, "train", event, round_id=training_label(round_id)).id)


def _envelope(h: Harness, pid: str, *, plan: DPPlan | None, receipt: bytes | None) -> bytes:
    payload = h.encoders[pid].encode(population(3, N, C)[f"p0{IDS.index(pid)}"])
    header = h.upload_header(pid, payload)
    upload = encode_upload(header, payload)
    return seal_upload(upload, key=h.keys[pid], params=h.params, plan=plan, receipt=receipt)


def _receipt(issuer: ReceiptIssuer, pid: str, round_id: int) -> bytes:
    return issuer.issue(participant_id=pid, asset_id="train", round_id=training_label(round_id))


def test_an_upload_with_the_ledgers_receipt_is_accepted(world) -> None:  # type: ignore[no-untyped-def]
    h, ledger, issuer, _ = world
    _charge(ledger, "a", 1)
    env = _envelope(h, "a", plan=PLAN, receipt=_receipt(issuer, "a", 1))
    assert h.verifier.accept(env, round_id=1) == "a"


def test_an_upload_without_reserving_is_rejected_and_audited(world) -> None:  # type: ignore[no-untyped-def]
    h, _, _, sink = world
    with pytest.raises(UploadReceiptMissing, match="no budget receipt"):
        h.verifier.accept(_envelope(h, "a", plan=PLAN, receipt=None), round_id=1)
    event = sink.named("upload.rejected")[-1]
    assert event["code"] == "UPLOAD_RECEIPT_MISSING" and event["round_id"] == 1
    assert h.engine.state(1).uploads == {}


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("other participant", "participant 'b'"),
        ("other round", "round 'r2'"),
        ("other plan", "plan"),
        ("expired", "expired"),
        ("forged", "does not verify"),
    ],
)
def test_a_receipt_for_something_else_is_rejected(world, case: str, fragment: str) -> None:  # type: ignore[no-untyped-def]
    h, ledger, issuer, sink = world
    if case == "other participant":  # b's genuine receipt, attached by a
        _charge(ledger, "b", 1)
        receipt = _receipt(issuer, "b", 1)
    elif case == "other round":  # a's genuine receipt of another round
        _charge(ledger, "a", 2)
        receipt = _receipt(issuer, "a", 2)
    elif case == "other plan":  # charged a tiny mechanism, claims to have run PLAN
        _charge(ledger, "a", 1, dataclasses.replace(PLAN, steps=1))
        receipt = _receipt(issuer, "a", 1)
    elif case == "expired":
        _charge(ledger, "a", 1)
        receipt = _receipt(issuer, "a", 1)
        h.clock.now += 3601  # the receipt is checked before the round's own deadline
    else:  # signed with a key the participant controls
        _charge(ledger, "a", 1)
        own = ReceiptIssuer(ledger=ledger, key=SM2PrivateKey.generate(), clock=h.clock)
        receipt = _receipt(own, "a", 1)
    with pytest.raises(UploadReceiptInvalid, match=fragment):
        h.verifier.accept(_envelope(h, "a", plan=PLAN, receipt=receipt), round_id=1)
    assert sink.named("upload.rejected")[-1]["code"] == "UPLOAD_RECEIPT_INVALID"
    assert h.engine.state(1).uploads == {}

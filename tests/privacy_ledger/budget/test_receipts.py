"""Budget receipts are issued only from committed ledger rows and verify only what they bind."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger
from privacy_ledger.audit import canonical
from privacy_ledger.budget.receipts import DPPlan, ReceiptIssuer, ReceiptVerifier
from privacy_ledger.errors import ReceiptInvalid, ReceiptUnavailable
from tests.privacy_ledger.helpers import event, setup_budget

PLAN = DPPlan(noise_multiplier=1.0, sample_rate=0.01, steps=500, delta=1e-5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def parts(ledger: PrivacyLedger) -> tuple[PrivacyLedger, ReceiptIssuer, ReceiptVerifier, Clock]:
    setup_budget(ledger)
    key, clock = SM2PrivateKey.generate(), Clock()
    issuer = ReceiptIssuer(ledger=ledger, key=key, ttl_seconds=60, clock=clock)
    return ledger, issuer, ReceiptVerifier(public_key=key.public_key, clock=clock), clock


def test_committed_reservation_gets_a_receipt_that_binds_it(parts) -> None:  # type: ignore[no-untyped-def]
    ledger, issuer, verifier, _ = parts
    res = ledger.reserve("h1", "ct", event(), round_id="r3")
    with pytest.raises(ReceiptUnavailable, match="no committed reservation"):
        issuer.issue(participant_id="h1", asset_id="ct", round_id="r3")  # reserved only
    ledger.commit(res.id)
    data = issuer.issue(participant_id="h1", asset_id="ct", round_id="r3")
    got = verifier.verify(data, participant_id="h1", round_id="r3", plan=PLAN)
    assert got.reservation_id == res.id and got.plan == PLAN and got.asset_id == "ct"


def test_aborted_or_other_round_reservations_get_none(parts) -> None:  # type: ignore[no-untyped-def]
    ledger, issuer, _, _ = parts
    ledger.abort(ledger.reserve("h1", "ct", event(), round_id="r1").id)
    ledger.commit(ledger.reserve("h1", "ct", event(), round_id="r2").id)
    for rid in ("r1", "r9"):
        with pytest.raises(ReceiptUnavailable):
            issuer.issue(participant_id="h1", asset_id="ct", round_id=rid)


@pytest.mark.parametrize(
    ("binding", "fragment"),
    [
        ({"participant_id": "h2"}, "participant"),
        ({"round_id": "r4"}, "round"),
        ({"plan": dataclasses.replace(PLAN, noise_multiplier=0.5)}, "plan"),
        ({"plan": dataclasses.replace(PLAN, steps=501)}, "plan"),
    ],
)
def test_a_receipt_verifies_only_for_what_it_binds(parts, binding, fragment) -> None:  # type: ignore[no-untyped-def]
    ledger, issuer, verifier, _ = parts
    ledger.commit(ledger.reserve("h1", "ct", event(), round_id="r3").id)
    data = issuer.issue(participant_id="h1", asset_id="ct", round_id="r3")
    want = {"participant_id": "h1", "round_id": "r3", "plan": PLAN, **binding}
    with pytest.raises(ReceiptInvalid, match=fragment):
        verifier.verify(data, **want)


def test_receipts_expire(parts) -> None:  # type: ignore[no-untyped-def]
    ledger, issuer, verifier, clock = parts
    ledger.commit(ledger.reserve("h1", "ct", event(), round_id="r3").id)
    data = issuer.issue(participant_id="h1", asset_id="ct", round_id="r3")
    clock.now += 61
    with pytest.raises(ReceiptInvalid, match="expired"):
        verifier.verify(data, participant_id="h1", round_id="r3", plan=PLAN)


def test_forged_or_foreign_receipts_are_refused(parts) -> None:  # type: ignore[no-untyped-def]
    ledger, issuer, verifier, _ = parts
    ledger.commit(ledger.reserve("h1", "ct", event(), round_id="r3").id)
    data = issuer.issue(participant_id="h1", asset_id="ct", round_id="r3")
    (size,) = struct.unpack(">H", data[:2])
    fields = canonical.decode(data[2 : 2 + size])
    # a participant rewrites the body (another round) and signs it with its own key
    forged_body = canonical.encode({**fields, "round_id": "r4"})
    own = SM2PrivateKey.generate()
    forged = struct.pack(">H", len(forged_body)) + forged_body + own.sign(forged_body)
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        verifier.verify(forged, participant_id="h1", round_id="r4", plan=PLAN)
    # the ledger's audit-log key (or any other key) is not the receipt key
    other = ReceiptVerifier(public_key=SM2PrivateKey.generate().public_key)
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        other.verify(data, participant_id="h1", round_id="r3", plan=PLAN)
    for bad in (b"", data[:10], data + b"x", b"\xff\xff" + data[2:]):
        with pytest.raises(ReceiptInvalid):
            verifier.verify(bad, participant_id="h1", round_id="r3", plan=PLAN)

"""A participant records its own empirical privacy audit through the API, into the signed log.

Real app, real SQLite ledger, real tokens: the audit lands as a ``budget.audited``
entry that verifies under the log's key, with the accounted epsilon the server
computed; the budget resource and the compliance checklist then show the budget as
audited (or flag a bound above the accounted epsilon). Another participant's token,
malformed bodies, rounds the ledger never charged and unknown budgets are refused
with their typed codes and write nothing; an exact resend answers the entry made.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from compliance.checklist import ChecklistEntry, run_checklist
from compliance.checklist_config import ChecklistConfig
from compliance.checklist_empirical import ITEM_ID
from crypto.sm import SM2PublicKey
from privacy_ledger import verify_log
from privacy_ledger.budget.empirical import accounted_epsilon_over, empirical_audits
from tests.api.rest.helpers import ASSET, PARTICIPANTS, ROUND, Service, denials
from tests.api.rest.matrix import AUDIT

P1, P2 = PARTICIPANTS
OWN = f"/v1/budgets/{P1}/{ASSET}/audits"


def _item(svc: Service) -> ChecklistEntry:
    result = run_checklist(ChecklistConfig(), svc.ctx.engine)
    return next(e for e in result.entries if e.id == ITEM_ID)


def _stored(svc: Service, participant: str = P1) -> int:
    return len(empirical_audits(svc.ctx.ledger, participant=participant, asset=ASSET))


def _accounted(svc: Service, participant: str = P1) -> Decimal:
    return accounted_epsilon_over(svc.ctx.ledger, participant, ASSET, ROUND, ROUND)


def test_a_participant_records_its_audit_and_every_display_shows_it(
    sqlite_service: Service,
) -> None:
    svc = sqlite_service
    before = svc.client.get(f"/v1/budgets/{P1}/{ASSET}", headers=svc.auth("officer")).json()
    assert before["empirical_label"] == "not audited" and _item(svc).status == "manual"

    answer = svc.client.post(OWN, json=AUDIT, headers=svc.auth("participant"))
    assert answer.status_code == 201, answer.text
    body = answer.json()
    accounted = str(_accounted(svc))
    assert body["created"] is True and body["participant_id"] == P1
    assert body["epsilon_accounted_stated"] == accounted == body["epsilon_accounted"]
    assert body["exceeds_accounted"] is False and body["epsilon_lower_bound"] == "0.1"

    (recorded,) = empirical_audits(svc.ctx.ledger, participant=P1, asset=ASSET)
    assert recorded.index == body["entry"]
    assert str(recorded.audit.epsilon_accounted) == accounted  # the server's figure
    key = SM2PublicKey.from_pem((svc.key_file / "log-public-key.pem").read_bytes())
    verify_log(svc.ctx.engine, public_key=key)  # signed into the log like every entry

    shown = svc.client.get(f"/v1/budgets/{P1}/{ASSET}", headers=svc.auth("officer")).json()
    assert shown["empirical_audit"]["entry"] == body["entry"]
    assert shown["empirical_label"] == "empirical lower bound (95%, 1000 canaries)"
    assert shown["empirical_audit"]["exceeds_accounted"] is False
    item = _item(svc)
    assert item.status == "pass", item.reason
    assert f"not audited: {P2}/{ASSET}" in item.reason and f"{P1}/{ASSET}" not in item.reason
    listed = svc.client.get(OWN, headers=svc.auth("participant")).json()
    assert [a["entry"] for a in listed["audits"]] == [body["entry"]]


def test_another_participants_token_is_refused_and_writes_nothing(
    sqlite_service: Service,
) -> None:
    svc = sqlite_service
    theirs = f"/v1/budgets/{P2}/{ASSET}/audits"
    answer = svc.client.post(theirs, json=AUDIT, headers=svc.auth("participant"))
    assert answer.status_code == 403 and answer.json()["code"] == "API_FORBIDDEN"
    assert denials(svc.ctx)[-1]["reason"] == "API_OTHER_PARTICIPANT"
    listing = svc.client.get(theirs, headers=svc.auth("participant"))
    assert listing.status_code == 403
    for role in ("officer", "service"):  # may read budgets, never record an audit
        assert svc.client.post(OWN, json=AUDIT, headers=svc.auth(role)).status_code == 403
    assert _stored(svc, P2) == 0 and _stored(svc, P1) == 0
    own_token = svc.token("participant", participant_id=P2)
    mine = svc.client.post(theirs, json=AUDIT, headers={"Authorization": f"Bearer {own_token}"})
    assert mine.status_code == 201 and _stored(svc, P2) == 1


def test_a_bound_above_the_accounted_epsilon_is_stored_and_flagged(
    sqlite_service: Service,
) -> None:
    svc = sqlite_service
    above = str(_accounted(svc) + 1)
    answer = svc.client.post(
        OWN, json={**AUDIT, "epsilon_lower_bound": above}, headers=svc.auth("participant")
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["exceeds_accounted"] is True and _stored(svc) == 1
    shown = svc.client.get(f"/v1/budgets/{P1}/{ASSET}", headers=svc.auth("officer")).json()
    assert shown["empirical_audit"]["exceeds_accounted"] is True
    assert shown["empirical_audit"]["epsilon_lower_bound"] == above
    item = _item(svc)
    assert item.status == "fail" and f"participant {P1}" in item.reason
    assert "differential privacy was not applied as charged" in item.reason


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"confidence": 0.95}, "API_REQUEST_INVALID"),  # a float, not a decimal string
        ({"epsilon_lower_bound": "NaN"}, "API_REQUEST_INVALID"),
        ({"epsilon_lower_bound": "-1"}, "API_REQUEST_INVALID"),
        ({"canaries": True}, "API_REQUEST_INVALID"),
        ({"canaries": "1000"}, "API_REQUEST_INVALID"),
        ({"epsilon_accounted": "99"}, "API_REQUEST_INVALID"),  # the server's figure, not yours
        ({"participant": P2}, "API_REQUEST_INVALID"),
        ({"rounds_from": None}, "API_REQUEST_INVALID"),
        ({"score": "a b"}, "API_REQUEST_INVALID"),
        ({"correct": 201}, "LEDGER_EMPIRICAL_AUDIT_INVALID"),  # more right than guessed
        ({"guesses": 1001}, "LEDGER_EMPIRICAL_AUDIT_INVALID"),
        ({"confidence": "1.5"}, "LEDGER_EMPIRICAL_AUDIT_INVALID"),
        ({"delta": "1"}, "LEDGER_EMPIRICAL_AUDIT_INVALID"),
    ],
)
def test_a_malformed_audit_is_refused_and_nothing_is_stored(
    service: Service, change: dict[str, Any], code: str
) -> None:
    before = _stored(service)
    answer = service.client.post(OWN, json={**AUDIT, **change}, headers=service.auth("participant"))
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == code
    assert _stored(service) == before


def test_a_missing_field_is_refused(service: Service) -> None:
    before = _stored(service)
    body = {k: v for k, v in AUDIT.items() if k != "correct"}
    answer = service.client.post(OWN, json=body, headers=service.auth("participant"))
    assert answer.status_code == 422 and answer.json()["code"] == "API_REQUEST_INVALID"
    assert _stored(service) == before


@pytest.mark.parametrize(
    "rounds",
    [("round-1", "round-2"), ("round-2", "round-2"), ("round-9", "round-9"), ("r1", "r1")],
)
def test_rounds_the_ledger_never_charged_are_refused(
    service: Service, rounds: tuple[str, str]
) -> None:
    before = _stored(service)
    body = {**AUDIT, "rounds_from": rounds[0], "rounds_to": rounds[1]}
    answer = service.client.post(OWN, json=body, headers=service.auth("participant"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "LEDGER_EMPIRICAL_AUDIT_INVALID"
    assert "not both committed rounds" in answer.json()["detail"]
    assert _stored(service) == before


def test_an_unknown_budget_is_404(service: Service) -> None:
    for path in (f"/v1/budgets/{P1}/imaging/audits", "/v1/budgets/nobody/records/audits"):
        posted = service.client.post(path, json=AUDIT, headers=service.auth("admin"))
        assert posted.status_code == 404 and posted.json()["code"] == "LEDGER_BUDGET_NOT_SET"
        listed = service.client.get(path, headers=service.auth("admin"))
        assert listed.status_code == 404 and listed.json()["code"] == "LEDGER_BUDGET_NOT_SET"
    mine = service.client.post(
        f"/v1/budgets/{P1}/imaging/audits", json=AUDIT, headers=service.auth("participant")
    )
    assert mine.status_code == 404


def test_an_exact_resend_answers_the_same_entry_and_a_new_audit_is_added(
    sqlite_service: Service,
) -> None:
    svc = sqlite_service
    headers = svc.auth("participant")
    first = svc.client.post(OWN, json=AUDIT, headers=headers).json()
    again = svc.client.post(OWN, json=AUDIT, headers=headers)
    assert again.status_code == 201
    assert again.json() == {**first, "created": False}
    assert _stored(svc) == 1
    later = svc.client.post(OWN, json={**AUDIT, "correct": 130}, headers=headers).json()
    assert later["created"] is True and later["entry"] > first["entry"] and _stored(svc) == 2
    listed = svc.client.get(OWN, headers=svc.auth("officer")).json()
    assert [a["entry"] for a in listed["audits"]] == [first["entry"], later["entry"]]
    assert [a["correct"] for a in listed["audits"]] == [125, 130]
    assert listed["epsilon_spent"] == str(svc.ctx.ledger.epsilon_spent(P1, ASSET))
    shown = svc.client.get(f"/v1/budgets/{P1}/{ASSET}", headers=svc.auth("officer")).json()
    assert shown["empirical_audit"]["entry"] == later["entry"]
    assert shown["empirical_audit"]["audits"] == 2

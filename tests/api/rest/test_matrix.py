"""Role x endpoint x method: the exact status of every request, and every denial audited.

Each request is sent with a token of each role, without credentials, and
with an expired, a revoked, a malformed and a wrong-secret token. A 401 or 403
must add exactly one ``access.denied`` entry to the audit log naming the
actor and reason; any other answer must add none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import select

from privacy_ledger.audit.models import AuditEntryRow
from tests.api.rest.helpers import PARTICIPANTS, Service, denials
from tests.api.rest.matrix import ALL, Row, rows


def _entry_about(svc: Service, participant: str) -> int:
    with svc.ctx.sessions() as session:
        index = session.scalar(
            select(AuditEntryRow.entry_index)
            .where(AuditEntryRow.subject.startswith(f"participant:{participant}/"))
            .order_by(AuditEntryRow.entry_index)
            .limit(1)
        )
    assert index is not None
    return int(index)


@pytest.fixture(scope="module")
def matrix(service: Service) -> list[Row]:
    bundle = service.client.get("/v1/reports/export?format=json", headers=service.auth("officer"))
    assert bundle.status_code == 200, bundle.text
    return rows(
        own_entry=_entry_about(service, PARTICIPANTS[0]),
        other_entry=_entry_about(service, PARTICIPANTS[1]),
        bundle=bundle.content,
    )


def _send(svc: Service, row: Row, headers: dict[str, str]) -> httpx.Response:
    kwargs: dict[str, object] = {"headers": headers}
    if row.json is not None:
        kwargs["json"] = row.json
    if row.content is not None:
        kwargs["content"] = row.content
        kwargs["headers"] = {**headers, "Content-Type": "application/octet-stream"}
    return svc.client.request(row.method, row.path, **kwargs)  # type: ignore[arg-type]


def _check(svc: Service, row: Row, headers: dict[str, str], expected: int, actor: str) -> None:
    before = len(denials(svc.ctx))
    response = _send(svc, row, headers)
    assert response.status_code == expected, (row.method, row.path, actor, response.text)
    after = denials(svc.ctx)
    if expected in (401, 403):
        assert response.headers["content-type"] == "application/problem+json"
        assert len(after) == before + 1, (row.method, row.path, actor)
        last = after[-1]
        assert last["actor"] == actor and last["status"] == expected
        assert last["method"] == row.method and last["resource"] == row.path.split("?")[0]
    else:
        assert len(after) == before, (row.method, row.path, actor)


@pytest.mark.parametrize("role", ALL)
def test_each_role_gets_exactly_the_matrix_status(
    service: Service, matrix: list[Row], role: str
) -> None:
    token_id = service.tokens[role].removeprefix("sft_").split(".")[0]
    for row in matrix:
        _check(service, row, service.auth(role), row.expected(role), token_id)


def _bad_credentials(svc: Service) -> Iterator[tuple[str, dict[str, str], str]]:
    expired = svc.ctx.tokens.create(name="short", role="officer", ttl_seconds=0.5)
    revoked = svc.ctx.tokens.create(name="gone", role="admin")
    svc.ctx.tokens.revoke(revoked.token.id)
    time.sleep(0.6)
    good = svc.tokens["admin"]
    wrong = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    yield "none", {}, "anonymous"
    yield "expired", {"Authorization": f"Bearer {expired.secret}"}, "anonymous"
    yield "revoked", {"Authorization": f"Bearer {revoked.secret}"}, "anonymous"
    yield "malformed", {"Authorization": "Bearer not-a-token"}, "anonymous"
    yield "wrong secret", {"Authorization": f"Bearer {wrong}"}, "anonymous"
    yield "basic scheme", {"Authorization": "Basic YWRtaW46YWRtaW4="}, "anonymous"


def test_no_valid_credentials_is_401_everywhere_but_public_routes(
    service: Service, matrix: list[Row]
) -> None:
    reasons: dict[str, set[object]] = {}
    for label, headers, actor in _bad_credentials(service):
        for row in matrix:
            if row.public or row.default == 405:
                expected = row.expected("officer") if row.public else 405
            else:
                expected = 401
            _check(service, row, headers, expected, actor)
            if expected == 401:
                reasons.setdefault(label, set()).add(denials(service.ctx)[-1]["reason"])
    assert reasons == {
        "none": {"API_UNAUTHENTICATED"},
        "expired": {"LEDGER_TOKEN_EXPIRED"},
        "revoked": {"LEDGER_TOKEN_REVOKED"},
        "malformed": {"LEDGER_TOKEN_INVALID"},
        "wrong secret": {"LEDGER_TOKEN_INVALID"},
        "basic scheme": {"API_SCHEME"},
    }


def test_another_participants_objects_are_refused_with_their_own_reason(service: Service) -> None:
    response = service.client.get(
        f"/v1/budgets/{PARTICIPANTS[1]}/records", headers=service.auth("participant")
    )
    assert response.status_code == 403
    assert response.json()["code"] == "API_FORBIDDEN"
    assert denials(service.ctx)[-1]["reason"] == "API_OTHER_PARTICIPANT"


def test_a_participant_sees_only_its_own_rows(service: Service) -> None:
    headers = service.auth("participant")
    own = PARTICIPANTS[0]
    listed = service.client.get("/v1/budgets", headers=headers).json()["budgets"]
    assert {b["participant_id"] for b in listed} == {own}
    people = service.client.get("/v1/participants", headers=headers).json()["participants"]
    assert [p["participant_id"] for p in people] == [own]
    decisions = service.client.get("/v1/rounds/round-1/outliers", headers=headers).json()
    assert [d["participant_id"] for d in decisions["decisions"]] == [own]
    entries = service.client.get("/v1/audit/entries?limit=500", headers=headers).json()
    assert entries["entries"] and all(
        e["subject"].startswith(f"participant:{own}") for e in entries["entries"]
    )
    officer = service.client.get("/v1/rounds/round-1/outliers", headers=service.auth("officer"))
    assert len(officer.json()["decisions"]) == len(PARTICIPANTS)


def test_scopes_narrow_a_role(service: Service) -> None:
    narrow = service.ctx.tokens.create(name="reader", role="admin", scopes=["budgets:read"])
    headers = {"Authorization": f"Bearer {narrow.secret}"}
    assert service.client.get("/v1/budgets", headers=headers).status_code == 200
    put = service.client.put(
        f"/v1/budgets/{PARTICIPANTS[0]}/records",
        headers=headers,
        json={"epsilon": "9", "delta": 1e-5},
    )
    assert put.status_code == 403
    assert service.client.get("/v1/rounds", headers=headers).status_code == 403


def test_a_participant_gets_a_receipt_the_aggregator_accepts(service: Service) -> None:
    import base64

    from crypto.sm import SM2PublicKey
    from privacy_ledger.budget.receipts import ReceiptVerifier
    from privacy_ledger.errors import ReceiptInvalid

    own = PARTICIPANTS[0]
    answer = service.client.get(
        f"/v1/budgets/{own}/records/receipts/round-1", headers=service.auth("participant")
    )
    assert answer.status_code == 200
    body = answer.json()
    verifier = ReceiptVerifier(public_key=SM2PublicKey.from_pem(body["public_key_pem"].encode()))
    receipt = verifier.parse(base64.b64decode(body["receipt_b64"]))
    assert (receipt.participant_id, receipt.round_id) == (own, "round-1")
    forged = bytearray(base64.b64decode(body["receipt_b64"]))
    forged[10] ^= 1
    with pytest.raises(ReceiptInvalid):
        verifier.parse(bytes(forged))
    held = service.client.get(
        f"/v1/budgets/{own}/records/receipts/round-2", headers=service.auth("participant")
    )
    assert held.status_code == 404 and held.json()["code"] == "LEDGER_RECEIPT_UNAVAILABLE"

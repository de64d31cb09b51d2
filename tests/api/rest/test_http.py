"""HTTP behaviour: problem+json for every error, size limits, security headers, no CORS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.rest.problems import STATUS_BY_CODE, status_of
from privacy_ledger.errors import BudgetNotSet, LedgerError
from tests.api.rest.helpers import Service


def _problem(response: object, status: int, code: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == "application/problem+json"  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["status"] == status and body["code"] == code == body["title"]
    assert body["type"] == f"urn:secure-fed:error:{code}" and body["detail"]


def test_errors_are_problems_with_stable_codes(service: Service) -> None:
    auth = service.auth("officer")
    client = service.client
    _problem(client.get("/v1/nothing", headers=auth), 404, "API_NOT_FOUND")
    _problem(client.delete("/v1/budgets", headers=auth), 405, "API_METHOD_NOT_ALLOWED")
    _problem(client.get("/v1/budgets/hospital-1/none", headers=auth), 404, "LEDGER_BUDGET_NOT_SET")
    _problem(client.get("/v1/budgets/nobody", headers=auth), 404, "LEDGER_PARTICIPANT_UNKNOWN")
    _problem(client.get("/v1/rounds/nope", headers=auth), 404, "LEDGER_ROUND_UNKNOWN")
    _problem(client.get("/v1/audit/entries/999999/inclusion", headers=auth), 404, "API_NOT_FOUND")
    bad = client.get("/v1/audit/consistency?first=5&second=2", headers=auth)
    _problem(bad, 422, "LEDGER_PROOF_RANGE_INVALID")
    big = client.get("/v1/audit/consistency?first=1&second=999999", headers=auth)
    _problem(big, 422, "LEDGER_PROOF_RANGE_INVALID")
    invalid = client.get("/v1/audit/entries?limit=0", headers=auth)
    _problem(invalid, 422, "API_REQUEST_INVALID")
    assert invalid.json()["errors"][0]["loc"] == ["query", "limit"]
    _problem(client.get("/v1/budgets/bad%20id", headers=auth), 422, "API_REQUEST_INVALID")
    fmt = client.get("/v1/reports/export?format=docx", headers=auth)
    _problem(fmt, 422, "API_REQUEST_INVALID")
    when = client.get("/v1/reports/export?format=html&start=yesterday", headers=auth)
    _problem(when, 422, "COMPLIANCE_PARAMETER_INVALID")


def test_bad_writes_are_refused_and_change_nothing(service: Service) -> None:
    admin = service.auth("admin")
    url = "/v1/budgets/hospital-2/records"
    before = service.client.get(url, headers=admin).json()
    for body in (
        {"epsilon": 8.0, "delta": 1e-5},
        {"epsilon": "-1", "delta": 1e-5},
        {"epsilon": "8", "delta": 2},
        {"epsilon": "8", "delta": 1e-5, "accountant": "gdp"},
        {"epsilon": "8", "delta": 1e-5, "extra": 1},
    ):
        _problem(service.client.put(url, headers=admin, json=body), 422, "API_REQUEST_INVALID")
    _problem(
        service.client.put(
            url,
            headers=admin,
            content=b"{not json",
        ),
        422,
        "API_REQUEST_INVALID",
    )
    missing = service.client.put(
        "/v1/budgets/hospital-1/nothing", headers=admin, json={"epsilon": "8", "delta": 1e-5}
    )
    _problem(missing, 404, "LEDGER_ASSET_UNKNOWN")
    clash = {"participant_id": "hospital-1", "institution": "Someone Else", "kind": "bank"}
    conflict = service.client.post("/v1/participants", headers=admin, json=clash)
    _problem(conflict, 409, "LEDGER_PARTICIPANT_CONFLICT")
    assert service.client.get(url, headers=admin).json() == before


def test_request_bodies_are_limited(service: Service) -> None:
    limit = service.ctx.settings.api_max_body_bytes
    headers = {**service.auth("admin"), "Content-Type": "application/octet-stream"}
    declared = service.client.post(
        "/v1/reports/verify", headers=headers, content=b"x" * (limit + 1)
    )
    _problem(declared, 413, "API_BODY_TOO_LARGE")

    def chunks() -> Iterator[bytes]:
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536

    streamed = service.client.post("/v1/reports/verify", headers=headers, content=chunks())
    _problem(streamed, 413, "API_BODY_TOO_LARGE")
    bad = service.client.post("/v1/reports/verify", headers=headers, content=b"{}")
    assert bad.status_code == 422 and bad.json()["code"].startswith("COMPLIANCE_BUNDLE")


def test_security_headers_and_no_cors(service: Service) -> None:
    origin = {"Origin": "https://evil.example"}
    for response in (
        service.client.get("/healthz", headers=origin),
        service.client.get("/v1/budgets", headers={**origin, **service.auth("officer")}),
        service.client.get("/v1/budgets", headers=origin),
        service.client.options(
            "/v1/budgets",
            headers={**origin, "Access-Control-Request-Method": "GET"},
        ),
    ):
        headers = {k.lower() for k in response.headers}
        assert not any(h.startswith("access-control-") for h in headers)
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"
        assert "server" not in headers or "uvicorn" not in response.headers["server"]


def test_status_table_and_fallbacks() -> None:
    assert status_of(BudgetNotSet("x")) == STATUS_BY_CODE["LEDGER_BUDGET_NOT_SET"] == 404
    assert status_of(LedgerError("x")) == 422
    assert status_of(RuntimeError("x")) == 500
    assert all(100 <= s < 600 for s in STATUS_BY_CODE.values())


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
def test_public_routes_need_no_token(service: Service, path: str) -> None:
    assert service.client.get(path).status_code == 200


def test_metrics_count_requests_denials_and_refusals(service: Service) -> None:
    service.client.get("/v1/budgets", headers=service.auth("service"))
    service.client.get("/v1/budgets")
    text = service.client.get("/metrics", headers=service.auth("service")).text
    assert 'secure_fed_api_requests_total{method="GET",route="/v1/budgets",status="200"}' in text
    assert 'secure_fed_api_denials_total{reason="API_UNAUTHENTICATED"}' in text
    assert "secure_fed_api_request_seconds_bucket" in text
    assert "secure_fed_budget_refusals " in text

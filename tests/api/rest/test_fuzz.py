"""Fuzzing against the OpenAPI document (schemathesis), with valid credentials and without.

Every operation is called with generated (valid and invalid) inputs as each
role and without a token. Nothing may answer 5xx, and nothing may succeed
that the authorization rules forbid: without a token only the public routes
answer 2xx, a participant never reads another participant's objects, and
only the roles holding a permission succeed on the routes that need it. The
example count is kept small so CI stays fast (raise ``FUZZ_EXAMPLES`` to dig).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from sqlalchemy import select

from api.rest.auth import PERMISSIONS
from privacy_ledger.audit.models import AuditEntryRow
from tests.api.rest.helpers import PARTICIPANTS, Service, make_service

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4"))
PUBLIC = {"/healthz", "/readyz", "/openapi.json"}
#: Permission each operation needs (the rule the fuzzer checks successes against).
NEEDS = {
    ("GET", "/metrics"): "metrics:read",
    ("PUT", "/v1/budgets/{participant_id}/{asset_id}"): "budgets:write",
    ("POST", "/v1/budgets/{participant_id}/{asset_id}/reservations"): "budgets:charge",
    ("POST", "/v1/budgets/{participant_id}/{asset_id}/reservations/{reservation_id}/commit"): (
        "budgets:charge"
    ),
    ("POST", "/v1/budgets/{participant_id}/{asset_id}/reservations/{reservation_id}/abort"): (
        "budgets:charge"
    ),
    ("POST", "/v1/budgets/{participant_id}/{asset_id}/audits"): "budgets:charge",
    ("POST", "/v1/participants"): "participants:write",
    ("POST", "/v1/participants/{participant_id}/assets"): "participants:write",
    ("GET", "/v1/reports/export"): "reports:read",
    ("POST", "/v1/reports/verify"): "reports:read",
    ("POST", "/console/login"): "reports:read",
}


def _area(path: str) -> str:
    if path.startswith("/console"):
        return "reports:read"  # the officer's console: officers and administrators
    for area in ("budgets", "participants", "audit", "rounds", "reports"):
        if path.startswith(f"/v1/{area}"):
            return {"participants": "budgets"}.get(area, area) + ":read"
    return "none"


@pytest.fixture(scope="module")
def fuzz_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("fuzz")
    svc = make_service(f"sqlite:///{folder / 'ledger.db'}", folder)
    try:
        yield svc
    finally:
        svc.client.close()
        svc.ctx.close()


@pytest.fixture(scope="module")
def fuzz_schema(fuzz_service: Service) -> object:
    return schemathesis.openapi.from_asgi("/openapi.json", fuzz_service.app)


schema = schemathesis.pytest.from_fixture("fuzz_schema")


def _entry_subject(svc: Service, index: object) -> str:
    with svc.ctx.sessions() as session:
        subject = session.scalar(
            select(AuditEntryRow.subject).where(AuditEntryRow.entry_index == int(str(index)))
        )
    return str(subject)


def _allowed(svc: Service, who: str, method: str, path: str, params: dict[str, object]) -> bool:
    if path in PUBLIC or (method == "GET" and path == "/console/login"):
        return True  # the log-in form is public
    if who == "none":
        return path == "/console/logout"
    needed = NEEDS.get((method, path), _area(path))
    if needed not in PERMISSIONS[who] and path != "/console/logout":
        return False
    if who != "participant":
        return True
    own = PARTICIPANTS[0]
    if "participant_id" in params and params["participant_id"] != own:
        return False
    if path.endswith("/decryptions"):
        return False
    if path == "/v1/audit/entries/{index}/inclusion":
        return _entry_subject(svc, params["index"]).startswith(f"participant:{own}")
    return True


def _fuzz(case: schemathesis.Case, who: str, svc: Service) -> None:
    headers = dict(case.headers or {})
    headers.pop("Authorization", None)
    if who != "none":
        headers.update(svc.auth(who))
    response = case.call(headers=headers)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:300])
    if response.status_code < 300:
        params = dict(case.path_parameters or {})
        allowed = _allowed(svc, who, case.method, case.path, params)
        assert allowed, (who, case.method, case.formatted_path)
    if response.status_code in (401, 403):
        assert "application/problem+json" in str(response.headers["content-type"])


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


@schema.parametrize()
@FUZZ
@pytest.mark.slow
def test_fuzz_without_credentials(case: schemathesis.Case, fuzz_service: Service) -> None:
    _fuzz(case, "none", fuzz_service)


@schema.parametrize()
@FUZZ
@pytest.mark.slow
def test_fuzz_as_participant(case: schemathesis.Case, fuzz_service: Service) -> None:
    _fuzz(case, "participant", fuzz_service)


@schema.parametrize()
@FUZZ
@pytest.mark.slow
def test_fuzz_as_officer(case: schemathesis.Case, fuzz_service: Service) -> None:
    _fuzz(case, "officer", fuzz_service)


@schema.parametrize()
@FUZZ
@pytest.mark.slow
def test_fuzz_as_admin(case: schemathesis.Case, fuzz_service: Service) -> None:
    _fuzz(case, "admin", fuzz_service)

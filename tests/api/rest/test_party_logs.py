"""The console and the report export read the key authority's own audit log.

The deployment folder is written by a real key authority on its own SQLite audit
log (:mod:`tests.compliance.parties_builder`); the service is configured as
``deploy local`` configures it (the ledger and the API's audit key of the folder),
and finds the party logs with no setting of its own.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.rest import ApiSettings, create_app
from api.rest.context import build_context
from tests.api.rest.console.pages import parse
from tests.compliance.parties_builder import ROUND_KEY, Deployment, build_deployment

REFUSAL = "round 1 already has a release plan"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return build_deployment(tmp_path_factory.mktemp("deploy") / "run")


def _settings(dep: Deployment, **extra: object) -> ApiSettings:
    values: dict[str, object] = {
        "database_url": dep.ledger_url,
        "api_audit_key_file": dep.run / "keys" / "api" / "audit.key.pem",
        "api_session_secret": "s" * 40,
        **extra,
    }
    return ApiSettings(**values)  # type: ignore[arg-type]


def _client(settings: ApiSettings) -> Iterator[tuple[TestClient, str]]:
    ctx = build_context(settings)
    token = ctx.tokens.create(name="officer", role="officer").secret
    client = TestClient(create_app(settings, context=ctx), base_url="http://testserver")
    try:
        yield client, token
    finally:
        client.close()
        ctx.close()


def _login(client: TestClient, token: str) -> None:
    answer = client.post(
        "/console/login", data={"token": token}, headers={"Accept": "text/html"},
        follow_redirects=False,
    )  # fmt: skip
    assert answer.status_code == 303, answer.text


@pytest.fixture
def officer(deployment: Deployment) -> Iterator[tuple[TestClient, str]]:
    yield from _client(_settings(deployment))


def test_the_party_logs_default_to_the_ledger_s_deployment_folder(deployment: Deployment) -> None:
    folder, origin = _settings(deployment).resolved_party_logs_dir()
    assert folder == deployment.run.resolve() and "deployment folder" in origin
    assert _settings(deployment, api_party_logs_off=True).resolved_party_logs_dir()[0] is None


def test_the_round_page_shows_the_key_authority_s_decryptions(
    officer: tuple[TestClient, str],
) -> None:
    client, token = officer
    _login(client, token)
    page = parse(client.get(f"/console/rounds/{ROUND_KEY}").text)
    rows = page.body_rows("Decryptions and refusals of this round recorded by the key authority")
    who = {(r[2], r[3], r[5], r[6]) for r in rows}
    assert ("key authority", "decryption.released", "aggregator", "aggregate") in who
    refused = [r for r in rows if r[3] == "access.denied"]
    assert refused and REFUSAL in refused[0][8]
    assert any("b1, h1, h2" in r[7] for r in rows)  # the contributors, by name
    assert "verified" in " ".join(page.texts["party-status"])
    assert "deployment folder" in " ".join(page.texts["party-logs-from"])
    listing = parse(client.get("/console/decryptions").text)
    assert listing.body_rows("What the key authority and the helper record")
    chain = parse(client.get("/console/chain").text)
    assert "verified" in " ".join(chain.texts["party-status"])


def test_the_report_export_includes_them(officer: tuple[TestClient, str]) -> None:
    client, token = officer
    answer = client.get(
        "/v1/reports/export?format=html", headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 200, answer.text
    assert "key authority (own log)" in answer.text and REFUSAL in answer.text


def test_the_export_is_refused_when_a_party_log_is_missing(
    deployment: Deployment, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(deployment.run, run)
    (run / "keyauthority" / "audit.db").unlink()
    for client, token in _client(_settings(Deployment(run=run))):
        answer = client.get(
            "/v1/reports/export?format=html", headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 409, answer.text
        problem = answer.json()
        assert problem["code"] == "API_REPORT_CROSS_CHECK_MISMATCH"
        assert "no audit database at" in problem["errors"][0]["detail"]
        _login(client, token)
        page = parse(client.get(f"/console/rounds/{ROUND_KEY}").text)
        assert "missing" in " ".join(page.texts["party-status"])
        assert "no audit database at" in page.html

"""The console's log-in: a token exchanged for an HttpOnly, SameSite=Strict session cookie."""

from __future__ import annotations

from pathlib import Path

from api.rest import create_app
from api.rest.session import COOKIE, make_cookie
from tests.api.rest.helpers import Service, denials, settings_for


def _login(svc: Service, token: str, **headers: str) -> object:
    return svc.client.post(
        "/console/login", data={"token": token}, headers=headers, follow_redirects=False
    )


def test_login_sets_a_strict_http_only_cookie_for_exports_only(sqlite_service: Service) -> None:
    svc = sqlite_service
    answer = _login(svc, svc.tokens["officer"])
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"  # type: ignore[attr-defined]
    cookie = answer.headers["set-cookie"]  # type: ignore[attr-defined]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # development; production adds it (next test)
    token_secret = svc.tokens["officer"].split(".", 1)[1]
    assert token_secret not in cookie
    assert svc.client.get("/v1/reports/export?format=html").status_code == 200
    assert svc.client.get("/v1/budgets").status_code == 401  # cookies only for console + export
    assert svc.client.post("/v1/reports/verify", content=b"{}").status_code == 401
    token_id = svc.tokens["officer"].removeprefix("sft_").split(".")[0]
    svc.ctx.tokens.revoke(token_id)
    gone = svc.client.get("/v1/reports/export?format=html")
    assert gone.status_code == 401 and denials(svc.ctx)[-1]["reason"] == "LEDGER_TOKEN_REVOKED"
    out = svc.client.post("/console/logout")
    assert out.status_code == 200 and COOKIE not in svc.client.cookies


def test_forged_cookies_are_refused_and_audited(sqlite_service: Service) -> None:
    svc = sqlite_service
    token_id = svc.tokens["officer"].removeprefix("sft_").split(".")[0]
    for value in (
        make_cookie(b"another key", token_id, 4_000_000_000),
        make_cookie(svc.ctx.session_key, token_id, 1)[:-2] + "00",
        make_cookie(svc.ctx.session_key, token_id, 1),
        "garbage",
    ):
        svc.client.cookies.set(COOKIE, value)
        answer = svc.client.get("/v1/reports/export?format=html")
        assert answer.status_code == 401
        assert denials(svc.ctx)[-1]["reason"] in ("API_SESSION_INVALID", "API_SESSION_EXPIRED")
    svc.client.cookies.clear()


def test_only_officers_and_admins_log_in(sqlite_service: Service) -> None:
    svc = sqlite_service
    assert _login(svc, svc.tokens["participant"]).status_code == 403  # type: ignore[attr-defined]
    assert _login(svc, svc.tokens["service"]).status_code == 403  # type: ignore[attr-defined]
    assert _login(svc, "sft_0000000000000000.x").status_code == 401  # type: ignore[attr-defined]
    browser = _login(svc, "wrong", Accept="text/html")
    assert browser.status_code == 303  # type: ignore[attr-defined]
    assert browser.headers["location"] == "/console/login?failed=1"  # type: ignore[attr-defined]
    assert denials(svc.ctx)[-1]["reason"] == "LEDGER_TOKEN_INVALID"
    foreign = _login(svc, svc.tokens["officer"], Origin="https://evil.example")
    assert foreign.status_code == 401  # type: ignore[attr-defined]
    assert denials(svc.ctx)[-1]["reason"] == "API_LOGIN_ORIGIN"
    empty = svc.client.post("/console/login", content=b"", follow_redirects=False)
    assert empty.status_code == 401
    assert COOKIE not in svc.client.cookies


def test_production_cookies_are_secure(sqlite_service: Service, tmp_path: Path) -> None:
    settings = settings_for(
        str(sqlite_service.ctx.engine.url.render_as_string(hide_password=False)),
        Path(sqlite_service.key_file),
        environment="production",
        api_insecure_dev=True,
    )
    from fastapi.testclient import TestClient

    app = create_app(settings, context=sqlite_service.ctx)
    client = TestClient(app, base_url="https://testserver")
    answer = client.post(
        "/console/login", data={"token": sqlite_service.tokens["admin"]}, follow_redirects=False
    )
    assert answer.status_code == 303 and "Secure" in answer.headers["set-cookie"]


def test_a_login_form_with_too_many_fields_is_refused(sqlite_service: Service) -> None:
    body = "&".join(f"f{i}=x" for i in range(20)).encode()
    answer = sqlite_service.client.post(
        "/console/login",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert answer.status_code == 401
    assert denials(sqlite_service.ctx)[-1]["reason"] == "API_LOGIN_INVALID"


def test_a_browser_logging_out_goes_back_to_the_form(sqlite_service: Service) -> None:
    svc = sqlite_service
    form = {"token": svc.tokens["officer"]}
    assert svc.client.post("/console/login", data=form).status_code in (200, 303)
    assert COOKIE in svc.client.cookies
    out = svc.client.post(
        "/console/logout", headers={"Accept": "text/html"}, follow_redirects=False
    )
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    assert COOKIE not in svc.client.cookies
    assert svc.client.get("/console/", follow_redirects=False).status_code == 303

"""Console pages over a seeded ledger (SQLite, and PostgreSQL under the marker).

Every figure a page shows is compared with what the ledger's own query layer
returns for the same object; refusals are checked for their answer (redirect
or 403 page) and for their ``access.denied`` audit entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.rest.console.audit_view import audit_rows
from api.rest.console.render import TEMPLATES, rounded
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import AuditEntryRow, TreeHeadRow
from tests.api.rest.console.pages import PAGES, logged_in, parse
from tests.api.rest.helpers import ASSET, PARTICIPANTS, ROUND, Service, denials


@pytest.fixture(scope="module")
def officer(service: Service) -> Iterator[TestClient]:
    client = logged_in(service)
    yield client
    client.close()


def anonymous(svc: Service) -> TestClient:
    return TestClient(svc.app, base_url="http://testserver")


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_for_an_officer_session(officer: TestClient, path: str) -> None:
    answer = officer.get(path, follow_redirects=False)
    assert answer.status_code == 200, answer.text[:500]
    assert answer.headers["content-type"].startswith("text/html")
    assert "style-src 'self'" in answer.headers["content-security-policy"]
    html = answer.text
    assert '<a class="skip-link" href="#main">' in html and '<main id="main"' in html
    assert html.count("<h1>") == 1 and 'lang="en"' in html
    assert 'aria-current="page"' in html
    assert "<script" not in html and " style=" not in html and "<style" not in html


def test_admin_bearer_token_reads_pages(service: Service) -> None:
    answer = anonymous(service).get("/console/budgets", headers=service.auth("admin"))
    assert answer.status_code == 200
    assert "Signed in as" in answer.text and "(admin)" in answer.text


def test_budget_table_equals_the_ledger(service: Service, officer: TestClient) -> None:
    page = parse(officer.get("/console/budgets").text)
    for pid in PARTICIPANTS:
        status = service.ctx.ledger.budget_status(pid, ASSET)
        assert status.spent > 0 and status.remaining < status.limit  # real history seeded
        expected = [
            ASSET,
            rounded(status.limit),
            rounded(status.spent),
            rounded(status.reserved),
            rounded(status.remaining),
            str(status.active_reservations),
            f"{status.accountant}, {status.delta}",
            "not audited",  # no budget.audited entry seeded
        ]
        assert page.body_rows(f"Budgets of {pid}") == [expected]
    dots = page.texts["dot"]
    assert len(dots) == sum(
        len(service.ctx.ledger.budget_status(p, ASSET).per_round) for p in PARTICIPANTS
    )


def test_budget_page_history_equals_the_ledger(service: Service, officer: TestClient) -> None:
    pid = PARTICIPANTS[0]
    status = service.ctx.ledger.budget_status(pid, ASSET)
    page = parse(officer.get(f"/console/budgets/{pid}/{ASSET}").text)
    history = page.body_rows("Cumulative epsilon after each committed round")
    assert history == [
        [str(i), str(r.round_id), rounded(r.epsilon_after)]
        for i, r in enumerate(status.per_round, 1)
    ]
    assert page.texts["remaining"] == [rounded(status.remaining)]
    events = service.ctx.ledger.events(pid, ASSET)
    rows = page.body_rows("Reservations of this budget")
    assert [(r[0], r[2], r[3]) for r in rows] == [
        (e.id[:12], e.state, rounded(e.epsilon_projected)) for e in events
    ]
    assert {e.state for e in events} == {"committed", "reserved"}


def test_chart_rises_with_each_committed_round(sqlite_service: Service) -> None:
    from privacy_ledger import MechanismEvent

    svc, pid = sqlite_service, PARTICIPANTS[0]
    event = MechanismEvent(
        noise_multiplier=1.0, sample_rate=0.02, steps=200, delta=1e-5, max_grad_norm=1.0
    )
    svc.ctx.ledger.commit(svc.ctx.ledger.reserve(pid, ASSET, event, round_id="round-3").id)
    html = logged_in(svc).get(f"/console/budgets/{pid}/{ASSET}").text
    status = svc.ctx.ledger.budget_status(pid, ASSET)
    assert [r.round_id for r in status.per_round] == [ROUND, "round-3"]
    cys = [float(part.split('cy="')[1].split('"')[0]) for part in html.split('class="dot"')[1:]]
    assert len(cys) == 2 and cys[1] < cys[0]  # higher epsilon is drawn higher
    assert "<polyline" in html
    for r in status.per_round:
        assert f"{r.round_id}: {rounded(r.epsilon_after)}</title>" in html


def test_round_page_equals_the_round_store(service: Service, officer: TestClient) -> None:
    page = parse(officer.get(f"/console/rounds/{ROUND}").text)
    state = service.ctx.rounds.load(ROUND).state
    applied = page.body_rows("Decisions stored with the round")
    assert applied == [
        [
            pid,
            rounded(state["decisions"][pid]["score"]),
            state["decisions"][pid]["action"],
            rounded(state["decisions"][pid]["factor"]),
            rounded(state["weights"][pid]),
        ]
        for pid in sorted(state["decisions"])
    ]
    requests = page.body_rows("Decryption requests of this round")
    assert [r[2:] for r in requests] == [
        [d.requester, d.kind, d.what, str(d.aggregate_size)]
        for d in service.ctx.rounds.decryptions(ROUND)
    ]
    logged = page.body_rows("outlier.decision entries of this round")
    assert [r[3] for r in logged] == list(PARTICIPANTS)


def _logged_decisions(svc: Service) -> list[tuple[str, str, str]]:
    with svc.ctx.sessions() as session:
        rows = session.execute(
            select(AuditEntryRow.entry_index, AuditEntryRow.entry)
            .where(AuditEntryRow.event == "outlier.decision")
            .order_by(AuditEntryRow.entry_index)
        ).all()
    fields = [(i, canonical.decode(e)["fields"]) for i, e in rows]
    return [(str(i), f["participant"], rounded(f["score"])) for i, f in fields]


def test_outlier_page_lists_the_logged_decisions(service: Service, officer: TestClient) -> None:
    rows = parse(officer.get("/console/outliers").text).body_rows("Outlier decisions recorded")
    expected = _logged_decisions(service)
    assert len(expected) == 2
    assert [(r[0], r[3], r[4]) for r in rows] == expected
    assert all(r[5] == "not recorded, not recorded" for r in rows)  # thresholds not in the seed


def test_decryption_log_equals_the_round_store(service: Service, officer: TestClient) -> None:
    page = parse(officer.get("/console/decryptions").text)
    rows = page.body_rows("Decryption requests recorded by the round store")
    stored = service.ctx.rounds.decryptions(ROUND)
    assert len(stored) == 1
    assert [r[1:] for r in rows] == [
        [d.round_id, d.requester, d.kind, d.what, str(d.aggregate_size)] for d in stored
    ]


def test_chain_page_shows_the_verified_log_and_latest_head(
    service: Service, officer: TestClient
) -> None:
    with service.ctx.sessions() as session:
        size = service.ctx.audit.size(session)
        head = session.scalar(select(TreeHeadRow).order_by(TreeHeadRow.seq.desc()).limit(1))
        assert head is not None
        body, head_size = head.body.decode(), head.tree_size
    page = parse(officer.get("/console/chain").text)
    assert "<strong>Verified</strong>" in page.html
    assert page.texts["tree-size"] == [str(size)]
    assert page.texts["head-size"] == [str(head_size)]
    assert page.texts["checkpoint"] == [" ".join(body.split())]


def test_chain_page_reports_a_tampered_entry(sqlite_service: Service) -> None:
    svc = sqlite_service
    with svc.ctx.sessions() as session, session.begin():
        row = session.get(AuditEntryRow, 2)
        assert row is not None
        row.entry = row.entry.replace(b'"', b"'", 1)
    html = logged_in(svc).get("/console/chain").text
    assert "<strong>Not verified</strong>" in html and "<strong>Verified</strong>" not in html
    assert "(LEDGER_" in html and "entry 2" in html


def test_pages_without_credentials_redirect_to_the_login_form(service: Service) -> None:
    client = anonymous(service)
    for path in PAGES:
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/console/login"
        denial = denials(service.ctx)[-1]
        assert (denial["resource"], denial["status"], denial["actor"]) == (path, 401, "anonymous")
    form = client.get("/console/", follow_redirects=True)
    assert form.status_code == 200 and 'name="token"' in form.text


def test_forged_cookie_redirects_and_is_audited(service: Service) -> None:
    client = anonymous(service)
    client.cookies.set("sf_session", "abc.9999999999." + "0" * 64)
    answer = client.get("/console/budgets", follow_redirects=False)
    assert answer.status_code == 303
    assert denials(service.ctx)[-1]["reason"] == "API_SESSION_INVALID"


@pytest.mark.parametrize("role", ["participant", "service"])
def test_participant_and_service_tokens_cannot_see_pages(service: Service, role: str) -> None:
    client = anonymous(service)
    for path in PAGES:
        answer = client.get(path, headers=service.auth(role), follow_redirects=False)
        assert answer.status_code == 403, path
        assert answer.headers["content-type"].startswith("text/html")
        assert f"<strong>{role}</strong>" in answer.text and "remaining" not in answer.text
        denial = denials(service.ctx)[-1]
        assert (denial["resource"], denial["status"], denial["role"]) == (path, 403, role)


def test_participant_token_cannot_log_in(service: Service) -> None:
    client = anonymous(service)
    answer = client.post(
        "/console/login",
        data={"token": service.tokens["participant"]},
        headers={"Accept": "text/html"},
        follow_redirects=False,
    )
    assert answer.headers["location"] == "/console/login?failed=1"
    assert not client.cookies.get("sf_session")
    failed = client.get("/console/login?failed=1").text
    assert 'role="alert"' in failed and 'aria-invalid="true"' in failed


def test_revoking_the_token_ends_the_console_session(sqlite_service: Service) -> None:
    svc = sqlite_service
    client = logged_in(svc)
    assert client.get("/console/", follow_redirects=False).status_code == 200
    svc.ctx.tokens.revoke(svc.ctx.tokens.authenticate(svc.tokens["officer"]).id)
    answer = client.get("/console/", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/login"


def test_login_form_is_labelled(service: Service) -> None:
    html = anonymous(service).get("/console/login").text
    assert '<form method="post" action="/console/login"' in html
    assert '<label for="token">' in html and 'id="token" name="token" type="password"' in html
    assert 'role="alert"' not in html and "Log out" not in html


def test_unknown_round_and_budget_are_404_pages(officer: TestClient) -> None:
    for path in ("/console/rounds/no-such-round", f"/console/budgets/{PARTICIPANTS[0]}/nothing"):
        answer = officer.get(path)
        assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html")


_MEDIA = {"pdf": "application/pdf", "html": "text/html", "json": "application/json"}


def test_export_buttons_download_each_format(service: Service, officer: TestClient) -> None:
    links = {h for h in parse(officer.get("/console/").text).links if "/v1/reports/" in h}
    assert {h.split("format=")[1] for h in links} == set(_MEDIA)
    budgets = parse(officer.get("/console/budgets").text).links
    own = [h for h in budgets if "/v1/reports/" in h and f"participant={PARTICIPANTS[1]}" in h]
    assert len(own) == 3
    for href in sorted(links) + [h for h in own if "format=pdf" in h]:
        answer = officer.get(href)
        fmt = href.split("format=")[1].split("&")[0]
        assert answer.status_code == 200, (href, answer.text[:300])
        assert answer.headers["content-type"].startswith(_MEDIA[fmt])
        assert "attachment" in answer.headers["content-disposition"]
        if fmt == "pdf":
            assert answer.content.startswith(b"%PDF-")
        elif fmt == "json":
            assert json.loads(answer.content)
        else:
            assert "<html" in answer.text.lower()


def test_templates_carry_no_inline_style_or_script() -> None:
    for path in Path(TEMPLATES).iterdir():
        text = path.read_text(encoding="utf-8")
        assert " style=" not in text and "<style" not in text and "<script" not in text, path.name
        assert not re.search(r"\son[a-z]+=", text), path.name


def test_stylesheet_is_served_under_the_csp(service: Service) -> None:
    answer = anonymous(service).get("/console/static/console.css")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/css")
    assert ":focus-visible" in answer.text and ".skip-link:focus" in answer.text


def test_decryption_events_come_from_the_log_without_api_denials(sqlite_service: Service) -> None:
    svc = sqlite_service
    with svc.ctx.sessions() as session, session.begin():
        released = svc.ctx.audit.append(
            session,
            event="decryption.released",
            subject=f"round:{ROUND}",
            fields={"round_id": ROUND, "party": "key_authority", "purpose": "soft labels"},
        )
        refused = svc.ctx.audit.append(
            session,
            event="access.denied",
            subject=f"round:{ROUND}",
            fields={"round_id": ROUND, "party": "helper", "reason": "SECURE_REPLAYED"},
        )
    client = logged_in(svc)
    for _ in range(3):  # API denials are newer but never read as decryption refusals
        anonymous(svc).get("/console/decryptions", follow_redirects=False)
    assert denials(svc.ctx)[-1]["resource"] == "/console/decryptions"
    newest = audit_rows(svc.ctx, limit=2)["decryptions"]
    assert [r["entry"] for r in newest] == [released, refused]
    for path, caption in (
        ("/console/decryptions", "decryption.* entries"),
        (f"/console/rounds/{ROUND}", "Decryption events of this round"),
    ):
        rows = parse(client.get(path).text).body_rows(caption)
        assert [(r[0], r[2], r[4]) for r in rows] == [
            (str(released), "decryption.released", "key_authority"),
            (str(refused), "access.denied", "helper"),
        ]


def test_round_page_finds_entries_by_the_protocol_round_number(sqlite_service: Service) -> None:
    from privacy_ledger import MechanismEvent

    svc, pid = sqlite_service, PARTICIPANTS[0]
    log = [["open", 1796050480.0], ["collecting", 1796050481.0], ["published", 1796050490.0]]
    state = {"config": {"round_id": 9}, "stage": "published", "log": log, "decisions": {}}
    svc.ctx.rounds.save("demo:00000009", stage="published", state=state)
    with svc.ctx.sessions() as session, session.begin():
        index = svc.ctx.audit.append(
            session,
            event="outlier.decision",
            subject=f"participant:{pid}",
            fields={"round_id": 9, "participant_id": pid, "score": "2.5", "action": "keep"},
        )
    event = MechanismEvent(
        noise_multiplier=1.0, sample_rate=0.02, steps=50, delta=1e-5, max_grad_norm=1.0
    )
    svc.ctx.ledger.commit(svc.ctx.ledger.reserve(pid, ASSET, event, round_id="r9").id)
    client = logged_in(svc)
    page = parse(client.get("/console/rounds/demo:00000009").text)
    rows = page.body_rows("outlier.decision entries of this round (round demo:00000009 or 9)")
    assert [(r[0], r[2], r[3]) for r in rows] == [(str(index), "9", pid)]
    assert page.texts["stage"][1:] == ["open", "collecting", "published"]  # after the facts
    history = parse(client.get(f"/console/budgets/{pid}/{ASSET}").text)
    assert "/console/rounds/round-1" in history.links
    assert not [h for h in history.links if h.endswith("/r9")]  # not a stored round: no link
    assert ["2", "r9"] == history.body_rows("Cumulative epsilon after each")[1][:2]


def test_chain_page_reports_a_budget_changed_without_its_audit_entry(
    sqlite_service: Service,
) -> None:
    """The same verdict as ``secure-fed ledger verify``: an unaudited limit is not verified."""
    from privacy_ledger import PrivacyLedger

    svc = sqlite_service
    PrivacyLedger(svc.ctx.engine).set_budget(PARTICIPANTS[0], ASSET, epsilon="0.1", delta=1e-5)
    html = logged_in(svc).get("/console/chain").text
    assert "<strong>Not verified</strong>" in html and "<strong>Verified</strong>" not in html
    assert "(LEDGER_BUDGET_UNAUDITED)" in html and "table 0.1" in html


def test_label_prior_release_is_labelled_where_rounds_are_listed(sqlite_service: Service) -> None:
    """The prior's release is committed like a round: the page says what it is."""
    from privacy_ledger import MechanismEvent

    svc, pid = sqlite_service, PARTICIPANTS[0]
    event = MechanismEvent(
        noise_multiplier=1.0, sample_rate=0.02, steps=200, delta=1e-5, max_grad_norm=1.0
    )
    for rid in ("r1-label-prior", "r1"):
        svc.ctx.ledger.commit(svc.ctx.ledger.reserve(pid, ASSET, event, round_id=rid).id)
    html = logged_in(svc).get(f"/console/budgets/{pid}/{ASSET}").text
    page = parse(html)
    history = page.body_rows("Cumulative epsilon after each committed round")
    assert [row[1] for row in history][-2:] == ["label-prior release (before round 1)", "r1"]
    reservations = page.body_rows("Reservations of this budget")
    assert "label-prior release (before round 1)" in [row[1] for row in reservations]
    assert ">prior</text>" in html  # its tick on the chart
    assert "label-prior release (before round 1): " in html  # its point's title


def test_numbers_read_to_4_significant_digits_with_the_exact_value_kept() -> None:
    from api.rest.console.render import number

    assert rounded(9.693695476445894) == "9.694"
    assert rounded(0.023247042418603644) == "0.02325"
    assert rounded("2.6") == "2.6" and rounded(8) == "8" and rounded("keep") == "keep"
    assert rounded(123456.789) == "123457"
    assert number(0.023247042418603644) == ('<data value="0.023247042418603644">0.02325</data>')
    assert number("<b>") == "&lt;b&gt;"


def test_pages_show_no_16_digit_floats(sqlite_service: Service) -> None:
    from privacy_ledger import MechanismEvent

    svc, pid = sqlite_service, PARTICIPANTS[0]
    event = MechanismEvent(
        noise_multiplier=1.1, sample_rate=0.0173, steps=137, delta=1e-5, max_grad_norm=1.0
    )
    svc.ctx.ledger.commit(svc.ctx.ledger.reserve(pid, ASSET, event, round_id="round-3").id)
    client = logged_in(svc)
    for path in ("/console/budgets", f"/console/budgets/{pid}/{ASSET}", "/console/outliers"):
        page = parse(client.get(path).text)
        cells = [cell for table in page.tables for row in table.rows for cell in row]
        long = [c for c in cells if re.fullmatch(r"-?\d+\.\d{7,}", c)]
        assert not long, (path, long)

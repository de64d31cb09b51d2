"""The console's budget pages show the empirical lower bound recorded in the ledger, or none."""

from __future__ import annotations

from api.rest.console.render import rounded
from tests.api.rest.console.pages import logged_in, parse
from tests.api.rest.helpers import ASSET, PARTICIPANTS, ROUND, Service
from tests.empirical_helpers import record_audit

LABEL = "empirical lower bound (95%, 1000 canaries)"


def test_budget_pages_show_the_recorded_bound(sqlite_service: Service) -> None:
    svc = sqlite_service
    below = record_audit(svc.ctx.ledger, PARTICIPANTS[0], ASSET, (ROUND, ROUND))
    above = record_audit(svc.ctx.ledger, PARTICIPANTS[1], ASSET, (ROUND, ROUND), above=True)
    officer = logged_in(svc)
    page = parse(officer.get("/console/budgets").text)
    first = page.body_rows(f"Budgets of {PARTICIPANTS[0]}")[0][-1]
    assert first == f"{rounded(below.epsilon_lower_bound)} ({LABEL})"
    second = page.body_rows(f"Budgets of {PARTICIPANTS[1]}")[0][-1]
    accounted = rounded(above.epsilon_accounted)
    assert (
        second == f"{rounded(above.epsilon_lower_bound)} ({LABEL}): above the accounted {accounted}"
    )
    assert page.texts["exceeds"] == [second]
    detail = parse(officer.get(f"/console/budgets/{PARTICIPANTS[0]}/{ASSET}").text)
    (shown,) = detail.texts["empirical"]
    assert shown.startswith(f"{rounded(below.epsilon_lower_bound)} ({LABEL}; rounds {ROUND}")
    assert f"accounted {rounded(below.epsilon_accounted)}" in shown and "exceeds" not in shown
    flagged = parse(officer.get(f"/console/budgets/{PARTICIPANTS[1]}/{ASSET}").text)
    assert "DP was not applied as charged" in flagged.texts["exceeds"][0]
    officer.close()


def test_unaudited_budget_says_so(sqlite_service: Service) -> None:
    officer = logged_in(sqlite_service)
    detail = parse(officer.get(f"/console/budgets/{PARTICIPANTS[0]}/{ASSET}").text)
    assert detail.texts["empirical"] == ["not audited"]
    officer.close()

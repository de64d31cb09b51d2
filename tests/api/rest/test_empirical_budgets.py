"""The budget resource shows each budget's empirical lower bound from the ledger, or none."""

from __future__ import annotations

from tests.api.rest.helpers import ASSET, PARTICIPANTS, ROUND, Service
from tests.empirical_helpers import record_audit


def test_budget_resource_shows_the_recorded_bound(sqlite_service: Service) -> None:
    svc = sqlite_service
    audit = record_audit(svc.ctx.ledger, PARTICIPANTS[0], ASSET, (ROUND, ROUND))
    officer = svc.auth("officer")
    listed = svc.client.get("/v1/budgets", headers=officer)
    assert listed.status_code == 200
    rows = {b["participant_id"]: b for b in listed.json()["budgets"]}
    shown = rows[PARTICIPANTS[0]]["empirical_audit"]
    assert shown["epsilon_lower_bound"] == str(audit.epsilon_lower_bound)
    assert shown["epsilon_accounted"] == str(audit.epsilon_accounted)
    assert shown["exceeds_accounted"] is False and shown["canaries"] == 1000
    assert rows[PARTICIPANTS[0]]["empirical_label"] == "empirical lower bound (95%, 1000 canaries)"
    assert rows[PARTICIPANTS[1]]["empirical_audit"] is None
    assert rows[PARTICIPANTS[1]]["empirical_label"] == "not audited"
    one = svc.client.get(f"/v1/budgets/{PARTICIPANTS[0]}/{ASSET}", headers=officer).json()
    assert one["empirical_audit"] == shown and one["per_round"]
    own = svc.client.get("/v1/budgets", headers=svc.auth("participant")).json()["budgets"]
    assert [b["empirical_audit"]["entry"] for b in own] == [shown["entry"]]
    theirs = svc.client.get(f"/v1/budgets/{PARTICIPANTS[1]}", headers=officer).json()
    assert theirs["budgets"][0]["empirical_label"] == "not audited"


def test_a_bound_above_the_accounted_epsilon_is_flagged(sqlite_service: Service) -> None:
    svc = sqlite_service
    record_audit(svc.ctx.ledger, PARTICIPANTS[1], ASSET, (ROUND, ROUND), above=True)
    one = svc.client.get(f"/v1/budgets/{PARTICIPANTS[1]}/{ASSET}", headers=svc.auth("admin"))
    assert one.json()["empirical_audit"]["exceeds_accounted"] is True

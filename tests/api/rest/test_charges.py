"""A participant's budget over HTTP: reserve, commit, abort, spent epsilon, calibration.

On SQLite and (marker postgres) PostgreSQL, through the real application:
each answer is compared with the ledger's own, replays hold nothing twice,
and every refusal (wrong credentials, another participant's budget, over
budget) is a typed problem with nothing held.
"""

from __future__ import annotations

import secrets
from decimal import Decimal

import httpx
import pytest

from privacy_ledger.budget.event_rows import request_reservation_id
from tests.api.rest.helpers import ASSET, PARTICIPANTS, Service, denials

P1, P2 = PARTICIPANTS
EVENT = {
    "noise_multiplier": 1.1,
    "sample_rate": 0.01,
    "steps": 100,
    "delta": 1e-5,
    "max_grad_norm": 1.0,
}
GREEDY = {**EVENT, "noise_multiplier": 0.3, "sample_rate": 0.5, "steps": 2000}


def _rid() -> str:
    return secrets.token_hex(12)


def _reserve(
    svc: Service, *, who: str = "participant", pid: str = P1, **body: object
) -> httpx.Response:
    payload = {"request_id": _rid(), "round_id": "r-http", "event": EVENT, **body}
    answer: httpx.Response = svc.client.post(
        f"/v1/budgets/{pid}/{ASSET}/reservations", json=payload, headers=svc.auth(who)
    )
    return answer


def _held(svc: Service, pid: str = P1) -> int:
    return len(svc.ctx.ledger.events(pid, ASSET, states=("reserved",)))


def test_reserve_commit_charges_the_ledger_once_even_when_repeated(service: Service) -> None:
    rid = _rid()
    before = service.ctx.ledger.epsilon_spent(P1, ASSET)
    first = _reserve(service, request_id=rid)
    assert first.status_code == 201, first.text
    held = first.json()
    assert held["state"] == "reserved" and held["id"] == request_reservation_id(P1, ASSET, rid)
    again = _reserve(service, request_id=rid)
    assert again.json()["id"] == held["id"]
    assert len([r for r in service.ctx.ledger.events(P1, ASSET) if r.id == held["id"]]) == 1
    url = f"/v1/budgets/{P1}/{ASSET}/reservations/{held['id']}/commit"
    for _ in range(2):
        done = service.client.post(url, headers=service.auth("participant"))
        assert done.status_code == 200 and done.json()["state"] == "committed"
    after = service.ctx.ledger.epsilon_spent(P1, ASSET)
    assert after > before
    spent = service.client.get(
        f"/v1/budgets/{P1}/{ASSET}/epsilon-spent", headers=service.auth("participant")
    )
    assert spent.status_code == 200 and Decimal(spent.json()["epsilon_spent"]) == after
    replay = _reserve(service, request_id=rid)
    assert replay.json()["state"] == "committed"
    assert service.ctx.ledger.epsilon_spent(P1, ASSET) == after


def test_abort_releases_and_a_committed_charge_is_never_refunded(service: Service) -> None:
    held = _reserve(service).json()
    base = f"/v1/budgets/{P1}/{ASSET}/reservations/{held['id']}"
    auth = service.auth("participant")
    for _ in range(2):
        out = service.client.post(base + "/abort", json={}, headers=auth)
        assert out.status_code == 200 and out.json()["state"] == "aborted"
    again = service.client.post(base + "/commit", headers=auth)
    assert again.status_code == 409 and again.json()["code"] == "LEDGER_RESERVATION_NOT_ACTIVE"
    released = _reserve(service).json()
    url = f"/v1/budgets/{P1}/{ASSET}/reservations/{released['id']}"
    out = service.client.post(url + "/abort", json={"released_anything": True}, headers=auth)
    assert out.json()["state"] == "committed"
    refund = service.client.post(url + "/abort", json={}, headers=auth)
    assert refund.status_code == 409
    assert refund.headers["content-type"] == "application/problem+json"


def test_over_budget_is_refused_with_the_budget_and_nothing_held(service: Service) -> None:
    held = _held(service)
    rid = _rid()
    for _ in range(2):  # a refused request may be repeated: still refused, still nothing held
        refused = _reserve(service, request_id=rid, event=GREEDY)
        assert refused.status_code == 409
        problem = refused.json()
        assert problem["code"] == "LEDGER_BUDGET_EXCEEDED"
        assert Decimal(problem["budget"]["requested"]) > 0
        assert problem["budget"]["limit"] == "8"
    assert _held(service) == held


def test_a_request_id_reused_for_another_plan_is_a_conflict(service: Service) -> None:
    rid = _rid()
    assert _reserve(service, request_id=rid).status_code == 201
    other = _reserve(service, request_id=rid, round_id="r-other")
    assert other.status_code == 409
    assert other.json()["code"] == "LEDGER_RESERVATION_CONFLICT"


@pytest.mark.parametrize("who", ["officer", "service"])
def test_readers_may_not_charge(service: Service, who: str) -> None:
    held = _held(service)
    refused = _reserve(service, who=who)
    assert refused.status_code == 403
    assert denials(service.ctx)[-1]["reason"] == "API_FORBIDDEN"
    assert _held(service) == held


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer sft_0000000000000000.wrong"}, {"Authorization": "Basic x"}],
)
def test_wrong_credentials_are_refused_and_audited(
    service: Service, headers: dict[str, str]
) -> None:
    held, before = _held(service), len(denials(service.ctx))
    payload = {"request_id": _rid(), "event": EVENT}
    answer = service.client.post(
        f"/v1/budgets/{P1}/{ASSET}/reservations", json=payload, headers=headers
    )
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"
    assert len(denials(service.ctx)) == before + 1
    assert _held(service) == held


def test_a_participant_never_touches_another_participants_budget(service: Service) -> None:
    theirs = _reserve(service, who="admin", pid=P2).json()
    auth = service.auth("participant")
    refused = _reserve(service, pid=P2)
    assert refused.status_code == 403
    assert denials(service.ctx)[-1]["reason"] == "API_OTHER_PARTICIPANT"
    for path, verb in (
        (f"/v1/budgets/{P2}/{ASSET}/reservations/{theirs['id']}/commit", "post"),
        (f"/v1/budgets/{P2}/{ASSET}/epsilon-spent", "get"),
    ):
        answer = getattr(service.client, verb)(path, headers=auth)
        assert answer.status_code == 403
    # Another budget's reservation id under one's own path is unknown, not resolved.
    sneaky = service.client.post(
        f"/v1/budgets/{P1}/{ASSET}/reservations/{theirs['id']}/abort", json={}, headers=auth
    )
    assert sneaky.status_code == 404 and sneaky.json()["code"] == "LEDGER_RESERVATION_UNKNOWN"
    assert service.ctx.ledger.events(P2, ASSET, states=("reserved",))[-1].id == theirs["id"]


def test_calibration_answers_what_the_ledger_answers(service: Service) -> None:
    plan = {"rounds": 3, "steps_per_round": 50, "sample_rate": 0.02, "max_grad_norm": 1.0}
    answer = service.client.post(
        f"/v1/budgets/{P1}/{ASSET}/calibrate-noise",
        json={**plan, "epsilon": "1.5"},
        headers=service.auth("participant"),
    )
    assert answer.status_code == 200, answer.text
    expected = service.ctx.ledger.calibrate_noise(P1, ASSET, epsilon="1.5", **plan)  # type: ignore[arg-type]
    assert answer.json()["noise_multiplier"] == expected
    impossible = service.client.post(
        f"/v1/budgets/{P1}/{ASSET}/calibrate-noise",
        json={**plan, "epsilon": "0.000000000001"},
        headers=service.auth("participant"),
    )
    assert impossible.status_code == 409
    assert impossible.json()["code"] == "LEDGER_CALIBRATION_IMPOSSIBLE"


@pytest.mark.parametrize(
    "body",
    [
        {"request_id": "short", "event": EVENT},
        {"request_id": "a" * 20, "event": {**EVENT, "steps": 0}},
        {"request_id": "a" * 20, "event": {**EVENT, "sampler": "shuffle"}},
        {"request_id": "a" * 20, "event": EVENT, "extra": 1},
        {"event": EVENT},
    ],
)
def test_malformed_requests_are_422_and_hold_nothing(
    service: Service, body: dict[str, object]
) -> None:
    held = _held(service)
    answer = service.client.post(
        f"/v1/budgets/{P1}/{ASSET}/reservations", json=body, headers=service.auth("participant")
    )
    assert answer.status_code == 422
    assert answer.json()["code"] == "API_REQUEST_INVALID"
    assert _held(service) == held


def test_unknown_budget_and_reservation_are_404(service: Service) -> None:
    auth = service.auth("admin")
    missing = _reserve(service, who="admin", pid=P1)
    assert missing.status_code == 201
    unknown = service.client.post(
        f"/v1/budgets/{P1}/{ASSET}/reservations/{'0' * 32}/commit", headers=auth
    )
    assert unknown.status_code == 404
    no_budget = service.client.post(
        f"/v1/budgets/{P1}/nothing/reservations",
        json={"request_id": _rid(), "event": EVENT},
        headers=auth,
    )
    assert no_budget.status_code == 404 and no_budget.json()["code"] == "LEDGER_BUDGET_NOT_SET"

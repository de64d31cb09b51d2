"""The authorization matrix: every endpoint and method, the status each role must get.

Shared by the matrix test and the fuzzing test (what the fuzzer may see succeed).
``P1`` is the participant the participant token speaks for, ``P2`` another one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from privacy_ledger.budget.event_rows import request_reservation_id
from tests.api.rest.helpers import ASSET, PARTICIPANTS, ROUND

P1, P2 = PARTICIPANTS
ALL = ("participant", "officer", "admin", "service")


@dataclass(frozen=True)
class Row:
    """One request and the status per role (roles not named get ``default``)."""

    method: str
    path: str
    ok: dict[str, int]
    default: int = 403
    json: object = None
    public: bool = False
    content: bytes | None = field(default=None, repr=False)

    def expected(self, role: str) -> int:
        return self.ok.get(role, self.default)


def everyone(status: int = 200) -> dict[str, int]:
    return dict.fromkeys(ALL, status)


def only(*roles: str, status: int = 200) -> dict[str, int]:
    return dict.fromkeys(roles, status)


NOT_P = ("officer", "admin", "service")
BUDGET = {"epsilon": "8", "delta": 1e-5}


def charge_rows() -> list[Row]:
    """Reserve (one request id per budget, so repeats answer the same reservation), resolve."""
    event = {"noise_multiplier": 1.1, "sample_rate": 0.01, "steps": 10, "delta": 1e-5}
    plan = {"rounds": 2, "steps_per_round": 10, "sample_rate": 0.01, "max_grad_norm": 1.0}
    found: list[Row] = []
    for pid, who in ((P1, ("participant", "admin")), (P2, ("admin",))):
        request_id = f"matrix-{pid}-0123456789"
        held = f"/v1/budgets/{pid}/{ASSET}/reservations/" + request_reservation_id(
            pid, ASSET, request_id
        )
        body = {"request_id": request_id, "event": {**event, "max_grad_norm": 1.0}}
        readers = ALL if pid == P1 else NOT_P
        found += [
            Row(
                "POST", f"/v1/budgets/{pid}/{ASSET}/reservations", only(*who, status=201), json=body
            ),
            Row("POST", held + "/commit", only(*who)),
            Row("POST", held + "/abort", only(*who), json={"released_anything": True}),
            Row("GET", f"/v1/budgets/{pid}/{ASSET}/epsilon-spent", only(*readers)),
            Row("POST", f"/v1/budgets/{pid}/{ASSET}/calibrate-noise", only(*readers), json=plan),
        ]
    return found


#: An empirical audit of the seeded committed round (each participant's own span).
AUDIT = {
    "rounds_from": ROUND,
    "rounds_to": ROUND,
    "canaries": 1000,
    "guesses": 200,
    "correct": 125,
    "score": "loss",
    "confidence": "0.95",
    "delta": "0.00001",
    "epsilon_lower_bound": "0.1",
    "method": "steinke-nasr-jagielski-2023",
}


def audit_rows() -> list[Row]:
    """Record an audit (the same body each time: a resend answers the entry made) and list them."""
    found: list[Row] = []
    for pid, who in ((P1, ("participant", "admin")), (P2, ("admin",))):
        path = f"/v1/budgets/{pid}/{ASSET}/audits"
        readers = ALL if pid == P1 else NOT_P
        found += [
            Row("POST", path, only(*who, status=201), json=AUDIT),
            Row("GET", path, only(*readers)),
        ]
    return found + [Row("DELETE", f"/v1/budgets/{P1}/{ASSET}/audits", {}, default=405)]


def rows(*, own_entry: int, other_entry: int, bundle: bytes) -> list[Row]:
    """The matrix; ``own_entry``/``other_entry`` are audit indexes about P1 / P2."""
    return [
        Row("GET", "/v1/budgets", everyone()),
        Row("GET", f"/v1/budgets/{P1}", everyone()),
        Row("GET", f"/v1/budgets/{P2}", only(*NOT_P)),
        Row("GET", f"/v1/budgets/{P1}/{ASSET}", everyone()),
        Row("GET", f"/v1/budgets/{P2}/{ASSET}", only(*NOT_P)),
        Row("GET", f"/v1/budgets/{P1}/{ASSET}/reservations", everyone()),
        Row("GET", f"/v1/budgets/{P2}/{ASSET}/reservations", only(*NOT_P)),
        Row("GET", f"/v1/budgets/{P1}/{ASSET}/receipts/{ROUND}", everyone()),
        Row("GET", f"/v1/budgets/{P2}/{ASSET}/receipts/{ROUND}", only(*NOT_P)),
        Row("PUT", f"/v1/budgets/{P1}/{ASSET}", only("admin"), json=BUDGET),
        Row("PUT", f"/v1/budgets/{P2}/{ASSET}", only("admin"), json=BUDGET),
        Row("DELETE", f"/v1/budgets/{P1}/{ASSET}", {}, default=405),
        *charge_rows(),
        *audit_rows(),
        Row("POST", "/v1/budgets", {}, default=405, json=BUDGET),
        Row("GET", "/v1/participants", everyone()),
        Row(
            "POST",
            "/v1/participants",
            only("admin", status=201),
            json={"participant_id": "bank-7", "institution": "Bank Seven", "kind": "bank"},
        ),
        Row(
            "POST",
            f"/v1/participants/{P1}/assets",
            only("admin", status=201),
            json={"asset_id": "imaging", "description": "scans"},
        ),
        Row("DELETE", "/v1/participants", {}, default=405),
        Row("GET", "/v1/audit/entries", everyone()),
        Row("GET", "/v1/audit/head", everyone()),
        Row("GET", "/v1/audit/heads", everyone()),
        Row("GET", f"/v1/audit/entries/{own_entry}/inclusion", everyone()),
        Row("GET", f"/v1/audit/entries/{other_entry}/inclusion", only(*NOT_P)),
        Row("GET", "/v1/audit/consistency?first=1&second=3", everyone()),
        Row("PUT", "/v1/audit/head", {}, default=405, json={}),
        Row("GET", "/v1/rounds", everyone()),
        Row("GET", f"/v1/rounds/{ROUND}", everyone()),
        Row("GET", f"/v1/rounds/{ROUND}/outliers", everyone()),
        Row("GET", f"/v1/rounds/{ROUND}/decryptions", only(*NOT_P)),
        Row("DELETE", f"/v1/rounds/{ROUND}", {}, default=405),
        Row("GET", "/v1/reports/export?format=html", only("officer", "admin")),
        Row("GET", "/v1/reports/export?format=pdf", only("officer", "admin")),
        Row("GET", "/v1/reports/export?format=json", only("officer", "admin")),
        Row("POST", "/v1/reports/verify", only("officer", "admin"), content=bundle),
        Row("GET", "/metrics", only("officer", "admin", "service")),
        Row("POST", "/metrics", {}, default=405),
        Row("GET", "/healthz", everyone(), public=True),
        Row("GET", "/readyz", everyone(), public=True),
        Row("GET", "/openapi.json", everyone(), public=True),
    ]

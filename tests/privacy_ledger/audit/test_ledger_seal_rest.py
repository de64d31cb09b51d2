"""The REST API answers a typed problem, not a 500, for a round row that fails its digest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.api.rest.helpers import ROUND, Service, make_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = make_service(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path)
    try:
        yield svc
    finally:
        svc.client.close()
        svc.ctx.close()


@pytest.mark.parametrize(
    "garble",
    [
        "replace(CAST(state AS TEXT), 'completed', 'c0mpleted')",  # still JSON, one byte off
        "substr(CAST(state AS TEXT), 1, length(CAST(state AS TEXT)) - 1)",  # no longer JSON
    ],
    ids=["json", "broken"],
)
def test_a_garbled_round_is_a_typed_problem(service: Service, garble: str) -> None:
    url = f"/v1/rounds/{ROUND}"
    assert service.client.get(url, headers=service.auth("admin")).status_code == 200
    with service.ctx.engine.begin() as conn:
        changed = conn.execute(
            text(f"UPDATE rounds SET state = {garble} WHERE id = :k"), {"k": ROUND}
        ).rowcount
    assert changed == 1
    for path in (url, f"{url}/outliers"):
        reply = service.client.get(path, headers=service.auth("admin"))
        assert reply.status_code == 422, reply.text
        problem = reply.json()
        assert problem["code"] == "LEDGER_ROW_ALTERED"
        assert "table rounds" in problem["detail"] and "column state" in problem["detail"]

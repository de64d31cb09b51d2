"""The OpenAPI document is complete and every one of its paths is documented in docs/api.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.api.rest.helpers import Service

DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def _documented() -> set[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"`(GET|PUT|POST|DELETE|PATCH) (/[^`?\[ ]*)", text)
    return {(method, path) for method, path in found}


def _operations(service: Service) -> dict[tuple[str, str], dict[str, object]]:
    doc = service.client.get("/openapi.json").json()
    return {
        (method.upper(), path): op
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if not path.startswith("/console/") or path in ("/console/login", "/console/logout")
        if method != "parameters"
    }


def test_every_operation_is_documented_in_api_md(service: Service) -> None:
    ops = _operations(service)
    missing = sorted(f"{m} {p}" for m, p in ops if (m, p) not in _documented())
    assert not missing, f"add these to docs/api.md: {missing}"
    stale = sorted(f"{m} {p}" for m, p in _documented() - set(ops))
    assert not stale, f"docs/api.md documents routes that do not exist: {stale}"


def test_every_operation_declares_its_answers(service: Service) -> None:
    for (method, path), op in _operations(service).items():
        responses = op["responses"]
        assert isinstance(responses, dict)
        success = [s for s in responses if s.startswith(("2", "3"))]
        assert success, (method, path)
        content = responses[success[0]].get("content", {})
        assert content or success[0] == "303", (method, path)
        if path.startswith("/v1/"):
            assert "401" in responses and "403" in responses, (method, path)
            for status in ("401", "403"):
                assert "application/problem+json" in responses[status]["content"], (method, path)
        if "application/json" in content:
            assert "schema" in content["application/json"], (method, path)

"""Every typed error code has a heading in docs/audit (STYLE.md rule 22)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "audit"
PACKAGES = ["crypto", "privacy_ledger", "secure_fed", "compliance", "api"]


def _modules() -> list[str]:
    names: list[str] = []
    for pkg in PACKAGES:
        module = importlib.import_module(pkg)
        names.append(pkg)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{pkg}."):
            if ".migrations" not in info.name:
                names.append(info.name)
    return names


ERROR_MODULES = _modules()


def _codes() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in ERROR_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            code = getattr(obj, "code", None)
            ours = obj.__module__.split(".")[0] in PACKAGES
            if ours and issubclass(obj, Exception) and isinstance(code, str):
                found[code] = f"{obj.__module__}.{obj.__qualname__}"
    return found


def _documented() -> set[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    return set(re.findall(r"^###\s+`?([A-Z][A-Z0-9_]+)`?\s*$", text, flags=re.M))


def test_some_codes_exist() -> None:
    assert "CRYPTO_ERROR" in _codes()


@pytest.mark.parametrize("code", sorted(_codes()))
def test_code_has_a_docs_audit_heading(code: str) -> None:
    assert code in _documented(), f"{code} ({_codes()[code]}) has no '### {code}' in docs/audit/"


def test_codes_are_unique() -> None:
    seen: dict[str, list[str]] = {}
    for name in ERROR_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            code = getattr(obj, "code", None)
            if (
                issubclass(obj, Exception)
                and isinstance(code, str)
                and obj.__module__ == name
                and "code" in vars(obj)
            ):
                seen.setdefault(code, []).append(obj.__qualname__)
    dupes = {c: v for c, v in seen.items() if len(v) > 1}
    assert not dupes, dupes

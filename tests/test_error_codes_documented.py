"""Every typed error code has a ``### CODE`` heading in docs/audit/errors-*.md.

Every module of our packages is imported; one that cannot be imported fails
``test_every_module_imports`` instead of silently hiding its error codes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "audit"
PACKAGES = ["crypto", "privacy_ledger", "secure_fed", "compliance", "api"]


def _walk(pkg: str, failures: dict[str, str]) -> list[str]:
    def note(name: str) -> None:
        failures[name] = "sub-package failed to import while walking"

    module = importlib.import_module(pkg)
    found = [pkg]
    for info in pkgutil.walk_packages(module.__path__, prefix=f"{pkg}.", onerror=note):
        if ".migrations" not in info.name:
            found.append(info.name)
    return found


def _import_all() -> tuple[list[ModuleType], dict[str, str]]:
    failures: dict[str, str] = {}
    names = [name for pkg in PACKAGES for name in _walk(pkg, failures)]
    modules: list[ModuleType] = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except Exception as exc:  # any failure: reported by test_every_module_imports
            failures[name] = f"{type(exc).__name__}: {exc}"
    return modules, failures


MODULES, IMPORT_FAILURES = _import_all()


def _codes() -> dict[str, str]:
    found: dict[str, str] = {}
    for module in MODULES:
        for _, obj in inspect.getmembers(module, inspect.isclass):
            code = getattr(obj, "code", None)
            ours = obj.__module__.split(".")[0] in PACKAGES
            if ours and issubclass(obj, Exception) and isinstance(code, str):
                found[code] = f"{obj.__module__}.{obj.__qualname__}"
    return found


def _documented() -> set[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    return set(re.findall(r"^###\s+`?([A-Z][A-Z0-9_]+)`?\s*$", text, flags=re.M))


def test_every_module_imports() -> None:
    assert not IMPORT_FAILURES, IMPORT_FAILURES


def test_some_codes_exist() -> None:
    codes = _codes()
    assert {"CRYPTO_ERROR", "LEDGER_ERROR", "SECURE_FED_ERROR"} <= set(codes)


@pytest.mark.parametrize("code", sorted(_codes()))
def test_code_has_a_docs_audit_heading(code: str) -> None:
    assert code in _documented(), f"{code} ({_codes()[code]}) has no '### {code}' in docs/audit/"


def test_codes_are_unique() -> None:
    seen: dict[str, list[str]] = {}
    for module in MODULES:
        for _, obj in inspect.getmembers(module, inspect.isclass):
            code = getattr(obj, "code", None)
            if (
                issubclass(obj, Exception)
                and isinstance(code, str)
                and obj.__module__ == module.__name__
                and "code" in vars(obj)
            ):
                seen.setdefault(code, []).append(obj.__qualname__)
    dupes = {c: v for c, v in seen.items() if len(v) > 1}
    assert not dupes, dupes

"""Error families: every concrete error sits in exactly one, and codes are unique."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import crypto
import privacy_ledger
import secure_fed
from crypto.errors import CryptoError
from privacy_ledger.errors import LedgerError
from secure_fed import errors
from secure_fed.errors import SecureFedError

ROOT = Path(__file__).resolve().parents[2]


def _import_all(package: ModuleType) -> None:
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        if ".migrations" not in info.name:
            importlib.import_module(info.name)


for _pkg in (crypto, privacy_ledger, secure_fed):
    _import_all(_pkg)


def _subclasses(base: type[Exception]) -> Iterator[type[Exception]]:
    sub: type[Exception]
    for sub in base.__subclasses__():
        yield sub
        yield from _subclasses(sub)


FAMILIES = {getattr(errors, name) for name in errors.__all__} - {SecureFedError}
ALL = sorted(_subclasses(SecureFedError), key=lambda cls: cls.__name__)
CONCRETE = [cls for cls in ALL if cls not in FAMILIES]


def test_families_are_the_direct_subclasses_of_the_base() -> None:
    direct = set(SecureFedError.__subclasses__())
    assert direct == FAMILIES, f"directly under the base, not a family: {direct - FAMILIES}"
    assert len(FAMILIES) >= 8


@pytest.mark.parametrize("cls", CONCRETE, ids=lambda c: c.__name__)
def test_concrete_error_belongs_to_exactly_one_family(cls: type) -> None:
    owners = [family.__name__ for family in FAMILIES if issubclass(cls, family)]
    assert len(owners) == 1, f"{cls.__name__} belongs to {owners}"


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_class_names_its_own_code(cls: type) -> None:
    assert "code" in vars(cls), f"{cls.__name__} inherits {cls.code!r} instead of naming its own"  # type: ignore[attr-defined]
    assert cls.__doc__ and cls.__doc__.strip(), f"{cls.__name__} has no docstring"


def test_codes_are_unique_across_packages() -> None:
    seen: dict[str, list[str]] = {}
    for base in (CryptoError, LedgerError, SecureFedError):
        for cls in {base, *_subclasses(base)}:
            code = vars(cls).get("code")
            if code is not None:
                seen.setdefault(code, []).append(f"{cls.__module__}.{cls.__qualname__}")
    dupes = {code: owners for code, owners in seen.items() if len(owners) > 1}
    assert not dupes, dupes
    assert len(seen) > 90  # crypto + ledger + secure_fed were all found


def _raised_names(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            if isinstance(func, ast.Name):
                yield func.id


def test_families_and_base_are_never_raised_directly() -> None:
    abstract = {cls.__name__ for cls in FAMILIES} | {"SecureFedError"}
    offenders = [
        f"{path.relative_to(ROOT)}: raise {name}"
        for path in sorted((ROOT / "secure_fed").rglob("*.py"))
        for name in _raised_names(path)
        if name in abstract
    ]
    assert not offenders, offenders


def _bad_semver() -> None:
    from secure_fed.federation.schema import SemVer

    SemVer.parse("one.two")


def _junk_upload() -> None:
    from secure_fed.federation.messages import decode_upload

    decode_upload(b"not an upload", max_bytes=1 << 20)


def _junk_authority_frame() -> None:
    from secure_fed.wire import decode_frame

    decode_frame(b"XXXX" + bytes(16), b"SFKA", max_bytes=1 << 20)


def _no_uploads() -> None:
    from secure_fed.secure.mode import check_weights

    check_weights({}, {})


def _unknown_dataset() -> None:
    from secure_fed.learning.data import load_task

    load_task("no-such-dataset", seed=0)


def _impossible_split() -> None:
    from secure_fed.learning.data import dirichlet_split

    dirichlet_split(np.zeros(4, dtype=np.int64), parts=3, alpha=0.5, min_size=2, seed=0)


@pytest.mark.parametrize(
    ("action", "family", "code"),
    [
        (_bad_semver, errors.ConfigurationInvalid, "SCHEMA_INVALID"),
        (_junk_upload, errors.UploadRejected, "UPLOAD_MALFORMED"),
        (_junk_authority_frame, errors.ReleaseRefused, "AUTHORITY_REQUEST_MALFORMED"),
        (_no_uploads, errors.AggregationFailed, "AGGREGATION_INVALID"),
        (_unknown_dataset, errors.DataError, "LEARNING_UNKNOWN_DATASET"),
        (_impossible_split, errors.DataError, "LEARNING_SPLIT_IMPOSSIBLE"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_a_caller_catches_the_project_s_own_refusals_by_family(
    action: Callable[[], None], family: type[SecureFedError], code: str
) -> None:
    with pytest.raises(family) as info:
        action()
    assert info.value.code == code

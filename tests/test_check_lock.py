"""scripts/check-lock: the installed set must equal constraints.txt, or it fails loudly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check-lock"
LOCK = ROOT / "constraints.txt"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def _lines() -> list[str]:
    return LOCK.read_text(encoding="utf-8").splitlines()


def test_the_real_lock_is_what_is_installed() -> None:
    done = _run()
    assert done.returncode == 0, done.stderr
    assert "installed exactly as" in done.stdout


def test_the_lock_pins_the_packages_that_broke_a_fresh_machine() -> None:
    pins = dict(line.split("==", 1) for line in _lines() if "==" in line)
    assert pins["torch"] == "2.13.0"
    assert {"pytest", "schemathesis", "hypothesis", "flwr"} <= set(pins)
    assert "secure-fed" not in pins


def test_a_wrong_version_fails_naming_the_package_and_both_versions(tmp_path: Path) -> None:
    wrong = [("pytest==0.0.1" if line.startswith("pytest==") else line) for line in _lines()]
    (tmp_path / "constraints.txt").write_text("\n".join(wrong) + "\n", encoding="utf-8")
    done = _run("--constraints", str(tmp_path / "constraints.txt"))
    assert done.returncode == 1
    assert "FAILED" in done.stderr
    assert "pytest: locked at 0.0.1, installed " in done.stderr
    assert "1 difference(s)" in done.stderr


def test_a_locked_package_that_is_not_installed_fails(tmp_path: Path) -> None:
    lock = tmp_path / "constraints.txt"
    lock.write_text(LOCK.read_text(encoding="utf-8") + "no-such-dist-here==1.0\n", "utf-8")
    done = _run("--constraints", str(lock))
    assert done.returncode == 1
    assert "no-such-dist-here: locked at 1.0, not installed" in done.stderr


def test_a_pulled_package_missing_from_the_lock_fails(tmp_path: Path) -> None:
    lock = tmp_path / "constraints.txt"
    lock.write_text(
        "\n".join(line for line in _lines() if not line.startswith("schemathesis==")) + "\n",
        encoding="utf-8",
    )
    done = _run("--constraints", str(lock))
    assert done.returncode == 1
    assert "schemathesis: installed " in done.stderr
    assert "pulled by the project, not locked" in done.stderr


def test_a_line_that_is_not_an_exact_pin_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "constraints.txt"
    lock.write_text(LOCK.read_text(encoding="utf-8") + "pytest>=8\n", encoding="utf-8")
    done = _run("--constraints", str(lock))
    assert done.returncode != 0
    assert "not a `name==version` line" in done.stderr


def test_write_reproduces_the_committed_lock(tmp_path: Path) -> None:
    out = tmp_path / "constraints.txt"
    done = _run("--write", "--constraints", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == LOCK.read_text(encoding="utf-8")

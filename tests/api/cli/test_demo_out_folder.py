"""``secure-fed demo`` loses nothing: the run is swapped in only once it has succeeded.

A failed run (``--dataset fashion_mnist`` without its package fails after the
run's folder exists) and an interrupted one (``KeyboardInterrupt`` from a round
callback) leave the previous run byte for byte; what a crash left does not
block the next run; ``--overwrite`` keeps aside whatever the demo did not write.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from secure_fed.demo import run_demo
from secure_fed.demo_options import MANIFEST, DemoConfig

runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
ARGS = ["demo", "--rounds", "1", "--participants", "2", "--mode", "plaintext"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished demo run (plaintext, one round), copied by each test."""
    out = tmp_path_factory.mktemp("finished") / "demo"
    result = runner.invoke(app, [*ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def previous(finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SECURE_FED_KEY_PASSPHRASE", raising=False)
    out = tmp_path / "demo"
    shutil.copytree(finished, out)
    return out


def test_a_finished_run_lists_its_files_in_a_manifest(previous: Path) -> None:
    listed = set(json.loads((previous / MANIFEST).read_text())["files"])
    assert {"ledger.db", "results.json", "report.html", "log-signing-key.pem"} <= listed


def test_failed_overwrite_leaves_the_previous_run_byte_identical(previous: Path) -> None:
    before = _snapshot(previous)
    result = runner.invoke(
        app, [*ARGS, "--out", str(previous), "--overwrite", "--dataset", "fashion_mnist"]
    )
    assert result.exit_code != 0
    assert "[LEARNING_DATASET_UNAVAILABLE]" in result.output
    assert _snapshot(previous) == before
    assert _siblings(previous) == []  # the failed run removed its own folder


def test_interrupted_run_leaves_the_previous_run_byte_identical(previous: Path) -> None:
    before = _snapshot(previous)

    def interrupt(_result: object) -> None:
        raise KeyboardInterrupt

    config = DemoConfig(rounds=2, participants=2, mode="plaintext", out=previous, overwrite=True)
    with pytest.raises(KeyboardInterrupt):
        run_demo(config, on_round=interrupt)
    assert _snapshot(previous) == before
    assert _siblings(previous) == []


def test_overwrite_replaces_an_untouched_run_and_removes_it_after_the_swap(
    previous: Path,
) -> None:
    before = _snapshot(previous)
    result = runner.invoke(app, [*ARGS, "--out", str(previous), "--overwrite", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "kept" not in result.stderr
    assert _snapshot(previous)["results.json"] != before["results.json"]
    assert '"seed": 3' in (previous / "results.json").read_text()
    assert _siblings(previous) == []  # nothing of the run it replaced is left


def test_overwrite_keeps_aside_a_ledger_changed_after_the_demo(previous: Path) -> None:
    url = f"sqlite:///{previous / 'ledger.db'}"
    token = runner.invoke(
        app, ["api", "token", "create", "--role", "officer", "--name", "o", "--db", url]
    )
    assert token.exit_code == 0, token.output
    (previous / "notes.txt").write_text("mine")
    before = _snapshot(previous)
    result = runner.invoke(app, [*ARGS, "--out", str(previous), "--overwrite"])
    assert result.exit_code == 0, result.output
    [kept] = _siblings(previous)
    assert kept.startswith("demo.kept-")
    assert _snapshot(previous.parent / kept) == before  # nothing deleted, nothing changed
    notice = " ".join(line for line in result.stderr.splitlines() if "kept" in line)
    assert kept in notice and "ledger.db changed" in notice and "notes.txt" in notice
    assert (previous / "results.json").is_file() and not (previous / "notes.txt").exists()


def test_what_a_crash_left_does_not_block_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    stale = tmp_path / f".demo.partial-{int(dead.stdout)}-00aa11bb22cc"
    stale.mkdir()
    (stale / "ledger.db").write_bytes(b"half")
    # An earlier version wrote straight into --out: a ledger, no results.json.
    out.mkdir()
    (out / "ledger.db").write_bytes(b"half-written")
    result = runner.invoke(app, [*ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    [kept] = _siblings(out)
    assert kept.startswith("demo.kept-") and kept in result.stderr
    assert (tmp_path / kept / "ledger.db").read_bytes() == b"half-written"
    assert (out / "results.json").is_file()


def test_a_folder_of_other_files_is_refused_without_overwrite(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = runner.invoke(app, [*ARGS, "--out", str(tmp_path)])
    assert result.exit_code == 2 and "[FEDERATION_CONFIG_INVALID]" in result.output
    assert "notes.txt" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_run_that_appears_meanwhile_is_kept_without_overwrite(
    finished: Path, tmp_path: Path
) -> None:
    """Two runs into one folder at once: the second to finish keeps the first aside."""
    out = tmp_path / "demo"

    def other_run_finishes(_result: object) -> None:
        if not out.exists():
            shutil.copytree(finished, out)

    config = DemoConfig(rounds=1, participants=2, mode="plaintext", out=out)
    results = run_demo(config, on_round=other_run_finishes)
    [kept] = _siblings(out)
    assert results.kept_aside == str(tmp_path / kept) and "appeared" in results.kept_because[0]
    assert _snapshot(tmp_path / kept) == _snapshot(finished)


@pytest.mark.parametrize("where", [".", "..", "home"])
def test_overwrite_never_moves_the_working_directory_or_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``--overwrite --out .`` would rename the user's own folder aside: refused first."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "mine.txt").write_text("mine")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    out = str(tmp_path / "home") if where == "home" else where
    result = runner.invoke(app, [*ARGS, "--overwrite", "--out", out])
    assert result.exit_code == 2 and "[FEDERATION_CONFIG_INVALID]" in result.output
    assert "working directory" in result.output
    assert sorted(p.name for p in work.iterdir()) == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "project"]

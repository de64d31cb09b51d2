"""``deploy local --resume RUN_DIR`` takes up a run from its directory, or refuses before anything.

A run's directory records its options and ports (``deploy-local.json``, written last by
``prepare``); its driver holds ``deploy-local.lock`` while it runs. A resume reads both
back and writes nothing until every check passed; it is refused with
``DEPLOY_RESUME_REFUSED`` for a directory that holds no complete run, one whose driver
still runs or whose ports are taken, and options that differ from the stored run's.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from secure_fed.deploy.local import LocalFederation
from secure_fed.deploy.local_files import MANIFEST, LocalOptions, ResumeRefused, read_run

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A prepared shares run of 2 participants whose driver has stopped (lock released)."""
    folder = tmp_path_factory.mktemp("resume") / "run"
    options = LocalOptions(participants=2, mode="shares", rounds=2, run_dir=folder)
    federation = LocalFederation(options=options, python=sys.executable, env={})
    federation.prepare()
    federation.stop()
    yield folder.resolve()


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _resume(folder: Path, **given: object) -> LocalFederation:
    return LocalFederation.resume(folder, python=sys.executable, env={}, given=given)


def test_the_stored_run_reads_back_as_prepared(tmp_path: Path) -> None:
    options = LocalOptions(
        participants=3, mode="ckks", rounds=2, max_retries=1, run_dir=tmp_path / "r", seed=7
    )
    federation = LocalFederation(options=options, python=sys.executable, env={})
    layout = federation.prepare()
    federation.stop()
    assert read_run(tmp_path / "r") == (
        LocalOptions(**{**vars(options), "run_dir": layout.run_dir}),
        layout,
    )


@pytest.mark.parametrize("case", ["missing", "empty", "half-prepared", "bad-manifest"])
def test_a_directory_without_a_complete_run_is_refused(
    tmp_path: Path, run: Path, case: str
) -> None:
    folder = tmp_path / "dir"
    if case != "missing":
        folder.mkdir()
    if case == "half-prepared":  # the key ceremony ran, the manifest was never written
        (folder / "keys").mkdir()
    if case == "bad-manifest":
        (folder / MANIFEST).write_text('{"version": 1, "options": {"mode": "x"}}')
    before = _snapshot(folder) if folder.exists() else None
    with pytest.raises(ResumeRefused, match="not a run directory of deploy local") as caught:
        _resume(folder)
    assert caught.value.code == "DEPLOY_RESUME_REFUSED" and caught.value.why == "not-a-run"
    assert (_snapshot(folder) if folder.exists() else None) == before


def test_a_run_whose_file_is_gone_is_refused(tmp_path: Path) -> None:
    options = LocalOptions(participants=2, mode="shares", rounds=1, run_dir=tmp_path / "r")
    federation = LocalFederation(options=options, python=sys.executable, env={})
    layout = federation.prepare()
    federation.stop()
    layout.server_toml.unlink()
    with pytest.raises(ResumeRefused, match="missing server/server.toml"):
        _resume(layout.run_dir)


def test_a_run_whose_driver_still_runs_is_refused(tmp_path: Path) -> None:
    options = LocalOptions(participants=2, mode="shares", rounds=1, run_dir=tmp_path / "r")
    live = LocalFederation(options=options, python=sys.executable, env={})
    layout = live.prepare()  # holds the lock as a running driver does
    try:
        before = _snapshot(layout.run_dir)
        with pytest.raises(ResumeRefused, match="in use: deploy local") as caught:
            _resume(layout.run_dir)
        assert caught.value.why == "in-use"
        assert _snapshot(layout.run_dir) == before
    finally:
        live.stop()
    _resume(layout.run_dir).stop()  # its driver gone: the lock is free


def test_a_run_whose_port_is_taken_is_refused(run: Path) -> None:
    _, layout = read_run(run)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", layout.helper_port))
        holder.listen()
        with pytest.raises(ResumeRefused, match=f"port {layout.helper_port} \\(helper\\)"):
            _resume(run)
    _resume(run).stop()  # nothing was left locked by the refusal


@pytest.mark.parametrize(
    "given",
    [{"mode": "ckks"}, {"participants": 3}, {"rounds": 5}, {"max_retries": 0},
     {"database_url": "sqlite:///other.db"}],
)  # fmt: skip
def test_options_that_contradict_the_run_are_refused(run: Path, given: dict[str, object]) -> None:
    before = _snapshot(run)
    with pytest.raises(ResumeRefused, match="contradict") as caught:
        _resume(run, **given)
    assert caught.value.why == "contradicts"
    assert _snapshot(run) == before
    _resume(run, mode="shares", participants=2, rounds=2).stop()  # the stored values pass


def test_the_command_line_refuses_a_contradicting_resume(run: Path) -> None:
    before = _snapshot(run)
    result = runner.invoke(app, ["deploy", "local", "--resume", str(run), "--mode", "ckks"])
    assert result.exit_code != 0
    assert "DEPLOY_RESUME_REFUSED" in result.output and "mode 'ckks'" in result.output
    other = runner.invoke(app, ["deploy", "local", "--resume", str(run), "--run-dir", "/x"])
    assert other.exit_code != 0 and "DEPLOY_RESUME_REFUSED" in other.output
    assert _snapshot(run) == before


def test_the_command_line_refuses_a_directory_that_is_no_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["deploy", "local", "--resume", str(tmp_path)])
    assert result.exit_code != 0
    assert "DEPLOY_RESUME_REFUSED" in result.output and "not a run directory" in result.output
    assert list(tmp_path.iterdir()) == []

"""Operator commands start without torch, Opacus or TenSEAL; help lists what exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import COMMANDS, app

HEAVY = ("torch", "tenseal", "opacus")
runner = CliRunner()

# Runs the CLI in this interpreter, then reports which heavy modules were imported.
PROBE = """
import sys
from api.cli import main
sys.argv = ["secure-fed", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    status = exc.code
print("HEAVY=" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def _probe(args: list[str], cwd: Path) -> tuple[str, str]:
    code = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    heavy = re.findall(r"^HEAVY=(.*)$", done.stderr, flags=re.M)
    assert heavy, done.stderr
    return heavy[-1], done.stdout + done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["keys", "--help"],
        ["keys", "generate", "--help"],
        ["budget", "--help"],
        ["budget", "show", "--help"],
        ["ledger", "--help"],
        ["ledger", "verify", "--help"],
        ["budget", "show", "--participant", "hospital-1", "--db", "sqlite:///absent.db"],
        ["ledger", "verify", "--db", "sqlite:///absent.db"],
    ],
)
def test_operator_commands_do_not_import_the_learning_stack(
    args: list[str], tmp_path: Path
) -> None:
    heavy, output = _probe(args, tmp_path)
    assert heavy == "", f"{args} imported {heavy}"
    assert "Usage" in output or "[CLI_DATABASE_MISSING]" in output
    assert not (tmp_path / "absent.db").exists()


def test_the_probe_sees_the_learning_stack_when_the_demo_loads(tmp_path: Path) -> None:
    heavy, _ = _probe(["demo", "--help"], tmp_path)
    assert set(heavy.split(",")) & set(HEAVY)


def test_lazy_help_matches_each_group_own_help() -> None:
    for name, lazy in COMMANDS.items():
        loaded = lazy.load(name)
        assert loaded.get_short_help_str(limit=500) == lazy.help, name


def test_help_names_only_commands_that_exist() -> None:
    """Every 'secure-fed GROUP CMD' and '(cmd, cmd)' a help text mentions can be run."""
    for name, lazy in COMMANDS.items():
        group = lazy.load(name)
        subcommands = set(getattr(group, "commands", {}))
        helps = [lazy.help, group.help or ""]
        for text in helps if subcommands else []:  # a group's help lists its commands
            for listed in re.findall(r"\(([a-z-]+(?:, [a-z-]+)*)\)", text):
                assert set(listed.split(", ")) <= subcommands, (name, listed)
        helps += [c.help or "" for c in getattr(group, "commands", {}).values()]
        for text in helps:
            for group_name, command in re.findall(r"secure-fed ([a-z-]+) ([a-z-]+)", text):
                assert command in set(COMMANDS[group_name].load(group_name).commands)


def test_flags_and_arguments_read_well_in_help() -> None:
    result = runner.invoke(app, ["keys", "sign", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    assert "[OPTIONS] FILE" in result.output and "{file}" not in result.output
    for args in (["budget", "show", "--help"], ["--help"], ["ledger", "--help"]):
        shown = runner.invoke(app, args, env={"COLUMNS": "120"}).output
        assert "<bool>" not in shown and "--help" in shown, args
    shown = runner.invoke(app, ["budget", "show", "--help"], env={"COLUMNS": "120"}).output
    assert re.search(r"--db\s+URL", shown) and re.search(r"--participant\s+ID", shown)

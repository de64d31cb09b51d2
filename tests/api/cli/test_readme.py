"""README.md's operator commands run exactly as written, after (a small) main command."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app

README = Path(__file__).resolve().parents[3] / "README.md"
runner = CliRunner()


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _bash_commands(section: str) -> list[str]:
    """The commands of the section's fenced bash blocks, continuation lines joined."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [line.strip() for line in joined.splitlines() if line.strip()]
    return commands


def operator_commands() -> list[str]:
    """Return the commands of README.md's "Operator commands" section."""
    return _bash_commands(_section("Operator commands"))


def main_demo_command() -> list[str]:
    """Return the ``secure-fed demo`` part of the README's main command, as argv."""
    [main] = _bash_commands(_section("Two commands"))[:1]
    demo = next(part for part in main.split("&&") if "secure-fed demo" in part)
    return shlex.split(demo)


def test_the_section_has_the_operator_commands() -> None:
    commands = operator_commands()
    assert sum(c.startswith("secure-fed ") for c in commands) >= 5
    assert sum(c.startswith("openssl ") for c in commands) == 2
    assert main_demo_command() == ["secure-fed", "demo", "--overwrite"]


@pytest.mark.parametrize("command", [c for c in operator_commands() if c.startswith("secure-")])
def test_every_command_exists_with_these_options(command: str) -> None:
    argv = shlex.split(command.split("#")[0])[1:]
    words = [a for a in argv if not a.startswith("-")][:2]
    result = runner.invoke(app, [*words, "--help"])
    assert result.exit_code == 0, result.output
    for option in (a for a in argv if a.startswith("--")):
        assert option in result.output, f"{command}: {option} is not an option of {words}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_operator_commands_run_as_written_after_the_main_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    env["SECURE_FED_KEY_PASSPHRASE"] = "readme test passphrase"
    # The main command, made small (one round, two participants): the same paths.
    small = [*main_demo_command(), "--rounds", "1", "--participants", "2", "--mode", "plaintext"]
    demo = subprocess.run(small, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert (tmp_path / "secure-fed-work" / "demo" / "ledger.db").is_file()
    served = 0
    for command in operator_commands():
        if " serve " in command:  # a service: it must come up, listen, and stop on Ctrl-C
            _serve_then_stop(command, tmp_path, env)
            served += 1
            continue
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr
    assert served >= 1
    assert not (tmp_path / "secure-fed-work" / "ledger.db").exists()  # nothing created


def _serve_then_stop(command: str, cwd: Path, env: dict[str, str]) -> None:
    """Start a README ``serve`` command, wait until its port accepts, then send SIGINT."""
    argv = shlex.split(command.split("#")[0])
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else _default_port(argv)
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not _accepts(port):
            assert proc.poll() is None, f"{command}\n{proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"{command}: port {port} never opened"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"{command}\n{err[-3000:]}"
    assert "Traceback" not in err


def _default_port(argv: list[str]) -> int:
    """The port the service's ``--help`` gives as the default of ``--port``."""
    words = [a for a in argv[1:] if not a.startswith("-")][:2]
    help_text = runner.invoke(app, [*words, "--help"]).output
    found = re.search(r"--port\s+INTEGER.*?\[default:\s*(\d+)\]", help_text, flags=re.S)
    assert found, help_text
    return int(found.group(1))


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0

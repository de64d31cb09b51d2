"""What the documented operator commands write stays private and out of git.

The key-writing commands of README.md and docs/ run exactly as written in a fresh
folder: every private key and secret must be mode 0600 (readable by its owner
only). Every path the docs tell an operator to write (keys, service state, run
folders, exported heads, signatures, reports) must be ignored by the repository's
.gitignore, so a `git add` in the work tree can never pick one up.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.api.cli.test_readme import _bash_commands, operator_commands

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Files a key-writing command may leave world-readable: public keys only.
PUBLIC = {"sm2-public.pem"}
#: Options whose value is a path the operator writes or keeps secret.
_WRITTEN = re.compile(
    r"--(?:out|keys|state|run-dir|tls-key|tls-cert|client-ca|key|signing-key|audit-key"
    r"|trusted-head|database|ssl-keyfile|ssl-certfile|auth-supernode-private-key|sig)"
    r"[ =]([^\s`'\"\\]+)"
)


def _key_commands() -> list[str]:
    readme = [
        c
        for c in operator_commands()
        if c.startswith(("secure-fed keys generate", "secure-fed deploy keys"))
    ]
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    ceremony = [c for c in _bash_commands(deploy) if c.startswith("secure-fed deploy keys")]
    assert len(readme) == 2 and len(ceremony) == 1, (readme, ceremony)
    return [*readme, *ceremony]


@pytest.mark.parametrize("commands", [_key_commands()[:2], _key_commands()[2:]])
def test_every_private_key_file_a_documented_command_writes_is_0600(
    commands: list[str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    env["SECURE_FED_KEY_PASSPHRASE"] = "operator files test passphrase"
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command.split("#")[0]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    files = [p for p in (tmp_path / "keys").rglob("*") if p.is_file()]
    private = [p for p in files if p.name not in PUBLIC]
    names = {p.name for p in private}
    assert {"node.key", "audit.key.pem", "signing.key.pem"} <= names, names
    wrong = {
        str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode))
        for p in private
        if stat.S_IMODE(p.stat().st_mode) != 0o600
    }
    assert not wrong, f"private key files not 0600: {wrong}"
    if "sm2-private.pem" in names:
        assert "ca.key" in names  # the README's ceremony: the TLS CA's own key too


def _documented_paths() -> set[str]:
    paths = {"secure-fed-work/demo/ledger.db", "secure-fed-work/demo/log-signing-key.pem"}
    for doc in DOCS:
        for value in _WRITTEN.findall(doc.read_text(encoding="utf-8")):
            value = value.rstrip(".,;:)]").replace("<id>", "h1")
            if value.startswith("/") or not re.search(r"[a-z]", value) or "..." in value:
                continue  # absolute, or a placeholder (DIR, PEM, URL)
            paths.add(value + "x" if value.endswith("/") else value)  # a file inside
    return paths


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_ignores_every_path_the_docs_write() -> None:
    paths = sorted(_documented_paths())
    assert {"keys/x", "state/ka", "run/x", "head/x", "results.sig"} <= set(paths)
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    not_ignored = [line.split("\t", 1)[1] for line in done.stdout.splitlines() if line[:2] == "::"]
    assert not not_ignored, f"documented paths git would commit: {not_ignored}"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_still_sees_the_sources() -> None:
    tracked = ["secure_fed/deploy/tls.py", "docs/deploy.md", "constraints.txt", ".ci/run"]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", *tracked], cwd=ROOT, capture_output=True, text=True
    )
    assert done.stdout == "", f"ignored by .gitignore: {done.stdout.split()}"

"""docs/api.md's curl steps work against ``secure-fed api`` on a demo's output, unconfigured.

A small real demo (plaintext, two participants, three rounds) writes its folder
under a fresh work directory; ``secure-fed api`` is started on it as a real
process on a free loopback port with no configuration but ``SECURE_FED_WORKDIR``.
The ``bash`` blocks of the page's "curl, role by role" section are then run step
by step: assignments and ``$(...)`` through bash (the real ``secure-fed api token
create``), each ``curl`` as the equivalent httpx request (status: the one its
comment names, else 2xx), and the other commands (jq, openssl) through bash.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from api.cli import app

DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def doc_steps() -> list[str]:
    """The commands of the bash blocks in the "curl, role by role" section, one per step."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## curl, role by role", 1)[1].split("\n## ", 1)[0]
    steps = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        steps += [line.strip() for line in joined.splitlines() if line.strip()]
    return steps


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A demo's output under ``<tmp>/work/demo`` and ``secure-fed api`` serving it."""
    root = tmp_path_factory.mktemp("docs-curl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    env["SECURE_FED_WORKDIR"] = str(root / "work")
    args = ["demo", "--rounds", "3", "--participants", "2", "--mode", "plaintext"]
    demo = CliRunner().invoke(app, [*args, "--out", str(root / "work" / "demo")], env=env)
    assert demo.exit_code == 0, demo.output
    port = _free_port()
    server = subprocess.Popen(
        [*CLI, "api", "--port", str(port)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[1]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "secure-fed api did not become ready"
            time.sleep(0.2)
        yield root, {**env, "API": f"http://127.0.0.1:{port}"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: env.get(m[1], m[0]), text)


def _curl(step: str, env: dict[str, str], cwd: Path) -> None:
    """Run one documented ``curl`` as the equivalent httpx request; check its status."""
    comment = step.split(" # ", 1)[1] if " # " in step else ""
    words = shlex.split(_expand(step, env), comments=True)[1:]
    method, headers, body, url = "GET", {}, None, ""
    out: Path | None = None
    remote_name = False
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-X", "-H", "-d", "--data-binary", "-o", "-w", ">"):
            value = words[i + 1]
            i += 2
            if word == "-X":
                method = value
            elif word == "-H":
                name, _, header = value.partition(":")
                headers[name.strip()] = header.strip()
            elif word == "-d":
                body = value.encode("utf-8")
                method = "POST" if method == "GET" else method
            elif word == "--data-binary":
                body = (cwd / value.removeprefix("@")).read_bytes()
                method = "POST" if method == "GET" else method
            elif word in ("-o", ">"):
                out = None if value == "/dev/null" else cwd / value
            continue
        if word == "-OJ":
            remote_name = True
        elif not word.startswith("-"):
            url = word
        i += 1
    response = httpx.request(method, url, headers=headers, content=body, timeout=60)
    wanted = re.search(r"\b([1-5]\d\d)\b", comment)
    if wanted is not None:
        assert response.status_code == int(wanted[1]), (step, response.text)
    else:
        assert response.is_success, (step, response.status_code, response.text)
    if remote_name:
        disposition = response.headers["content-disposition"]
        name = re.search(r'filename="?([^";]+)"?', disposition)
        assert name is not None, disposition
        out = cwd / name[1]
    if out is not None:
        out.write_bytes(response.content)


def test_docs_curl_steps_work_with_no_configuration(served: tuple[Path, dict[str, str]]) -> None:
    root, env = served
    steps = doc_steps()
    assert any("format=json" in s for s in steps) and any("/receipts/" in s for s in steps)
    for step in steps:
        assignment = re.fullmatch(r"(\w+)=(.*)", step)
        if assignment is not None and assignment[1] == "API":
            assert assignment[2] == "http://127.0.0.1:8000", step  # served on a free port here
        elif assignment is not None:
            done = subprocess.run(
                ["bash", "-c", f"printf %s {assignment[2]}"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0 and done.stdout.startswith("sft_"), (step, done.stderr)
            env[assignment[1]] = done.stdout.strip()
        elif step.startswith("curl "):
            _curl(step, env, root)
        else:
            done = subprocess.run(
                ["bash", "-c", step], cwd=root, env=env, capture_output=True, timeout=60
            )
            assert done.returncode == 0, (step, done.stdout, done.stderr)
    # the signed JSON bundle the console exports, with the demo's report key
    assert (root / "secure-fed-report.json").stat().st_size > 0
    assert (root / "secure-fed-report.pdf").read_bytes().startswith(b"%PDF")


def test_the_demo_leaves_the_service_keys_private(served: tuple[Path, dict[str, str]]) -> None:
    folder = served[0] / "work" / "demo"
    for name in ("log-signing-key.pem", "report-signing-key.pem", "receipt-key.pem"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    for name in ("log-public-key.pem", "report-public-key.pem", "receipt-public-key.pem"):
        assert (folder / name).read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----"), name
    names = ("log-signing", "report-signing", "receipt")
    assert len({(folder / f"{n}-key.pem").read_bytes() for n in names}) == 3  # three keys

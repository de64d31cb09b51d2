"""A fresh clone, set up and run exactly as README.md says, in a fresh virtual environment.

The repository's committed ``HEAD`` is cloned into a temporary folder; a new
virtual environment (no system site packages) is put first on ``PATH`` and the
README's "Two commands" line runs in the clone's root, word for word: it
installs ``torch`` first, then the project with ``-c constraints.txt``, then
runs ``secure-fed demo``. The demo's results are the embedded defaults' (at
least four architectures, DP on, several rounds, federation helps): this is
the suite's only run of the full default demo. The suite's REST fuzz test and central-DP test then
run with the fresh environment's Python in the clone. Nothing is installed into
the environment by hand; pip's own cache and the machine's configured indexes
are used as any pip would. Each phase's wall time is printed (``-s`` shows it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
SUITE_TESTS = ("tests/api/rest/test_fuzz.py", "tests/secure_fed/secure/test_central_dp.py")


def readme_command() -> str:
    """The README's set-up-and-demo line: the first ``bash`` block of "Two commands"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Two commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "README.md has no bash block under 'Two commands'"
    command = block.group(1).strip()
    assert "pip install torch==2.13.0" in command and "-c constraints.txt" in command, command
    assert "secure-fed demo" in command, command
    return command


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], what: str) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    print(f"fresh clone: {what}: {seconds:.1f} s (exit {done.returncode})")
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return seconds


def test_readme_set_up_demo_and_suite_tests_work_in_a_fresh_clone(tmp_path: Path) -> None:
    started = time.monotonic()
    clone, venv = tmp_path / "clone", tmp_path / "venv"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_FED_", "VIRTUAL"))}
    base.pop("PYTHONPATH", None)
    _run(["git", "clone", "--quiet", str(ROOT), str(clone)], cwd=tmp_path, env=base, what="clone")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=base, what="venv")
    env = {
        **base,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{base.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    for step in readme_command().split(" && "):  # the README's steps, each timed, in order
        _run(["bash", "-euc", step], cwd=clone, env=env, what=step)
    demo = clone / "secure-fed-work" / "demo"
    assert (demo / "results.json").is_file() and (demo / "ledger.db").is_file()
    _check_default_demo(json.loads((demo / "results.json").read_text(encoding="utf-8")))
    python = str(venv / "bin" / "python")
    found = subprocess.run(
        [python, "-c", "import api, torch; print(api.__file__, torch.__version__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert found.startswith(str(clone)) and "2.13.0" in found, found
    tests = [python, "-m", "pytest", *SUITE_TESTS, "-q", "-x", "-p", "no:cacheprovider"]
    _run(tests, cwd=clone, env=env, what="fuzz and central-DP tests")
    print(f"fresh clone: total {time.monotonic() - started:.1f} s")


def _check_default_demo(data: dict[str, object]) -> None:
    """The embedded defaults: >= 4 architectures, DP on, several rounds; federation helps."""
    rounds = data["rounds"]
    assert isinstance(rounds, list) and len(rounds) >= 3, rounds
    rows = rounds[-1]["rows"]
    assert len({r["architecture"] for r in rows}) >= 4, rows
    final = data["final_mean_accuracy"]
    assert isinstance(final, dict) and final["federated"] > final["local_only"] + 0.05, final

"""``secure-fed demo`` refuses a bad option at once: typed two-line error, nothing heavy ran.

Every case runs in one fresh interpreter (CliRunner inside a subprocess), which
then reports whether torch or Opacus were imported: a refused option must not
have started the learning stack, drawn a progress display or written a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    (["--mode", "rot13"], "[AGGREGATION_UNKNOWN_MODE] unknown aggregation mode 'rot13'"),
    (["--attack", "backdoor:1"], "[ATTACK_UNKNOWN] unknown attack 'backdoor'"),
    (["--attack", "sign_flip"], "[ATTACK_SPEC_INVALID]"),
    (["--attack", "sign_flip:4"], "leaves no honest participant"),
    (["--dataset", "cifar"], "[LEARNING_UNKNOWN_DATASET]"),
    (["--rounds", "0"], "[FEDERATION_CONFIG_INVALID] rounds"),
    (["--rounds", "-1"], "[FEDERATION_CONFIG_INVALID] rounds"),
    (["--participants", "1"], "[FEDERATION_CONFIG_INVALID] participants"),
    (["--epsilon", "-1"], "[FEDERATION_CONFIG_INVALID] epsilon"),
    (["--epsilon", "nan"], "[FEDERATION_CONFIG_INVALID] epsilon"),
    (["--alpha", "0"], "[FEDERATION_CONFIG_INVALID] alpha"),
    (["--central-dp", "1.0", "--mode", "plaintext"], "[FEDERATION_CONFIG_INVALID] central_dp"),
    (["--central-dp", "-1"], "[FEDERATION_CONFIG_INVALID] central_dp"),
]

SCRIPT = """
import json, sys
from typer.testing import CliRunner
from api.cli import app
out, cases = sys.argv[1], json.loads(sys.argv[2])
runner = CliRunner()
results = []
for k, extra in enumerate(cases):
    r = runner.invoke(app, ["demo", "--out", f"{out}/d{k}", *extra])
    results.append([r.exit_code, r.stdout, r.stderr])
heavy = [m for m in ("torch", "opacus") if m in sys.modules]
print("RESULT" + json.dumps({"results": results, "heavy": heavy}))
"""


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("demo-options")
    cases = json.dumps([extra for extra, _ in CASES])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), cases],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout[done.stdout.index("RESULT") + len("RESULT") :])
    return out, data


def test_no_bad_option_imports_the_learning_stack(
    refused: tuple[Path, dict[str, object]],
) -> None:
    _, data = refused
    assert data["heavy"] == []


@pytest.mark.parametrize(("k", "case"), list(enumerate(CASES)))
def test_bad_option_fails_with_its_code_before_anything_runs(
    refused: tuple[Path, dict[str, object]], k: int, case: tuple[list[str], str]
) -> None:
    out, data = refused
    results = data["results"]
    assert isinstance(results, list)
    status, stdout, stderr = results[k]
    assert status == 2, (case, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 2, lines  # no progress display, no notice: just the error and hint
    assert lines[0].startswith("error: [") and case[1] in lines[0]
    assert lines[1].startswith("hint: ")
    assert stdout == ""
    assert not (out / f"d{k}").exists()


def test_unknown_mode_message_lists_registered_modes(
    refused: tuple[Path, dict[str, object]],
) -> None:
    _, data = refused
    results = data["results"]
    assert isinstance(results, list)
    error = results[0][2]
    assert "registered: [" in error and "'plaintext'" in error

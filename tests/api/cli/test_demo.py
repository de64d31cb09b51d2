"""``secure-fed demo``: options, JSON output, ledger on disk, typed errors, full run (slow)."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey

runner = CliRunner()
PASSPHRASE = "demo log passphrase"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _json(output: str) -> dict[str, object]:
    return json.loads(output[output.index("{") :])  # type: ignore[no-any-return]


def test_small_demo_json(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--rounds", "1", "--participants", "3", "--out", str(out), "--json",
            "--seed", "1"]  # fmt: skip
    result = runner.invoke(app, args, env={"SECURE_FED_KEY_PASSPHRASE": PASSPHRASE})
    assert result.exit_code == 0, result.output
    data = _json(result.stdout)
    rounds = data["rounds"]
    assert isinstance(rounds, list) and [r["stage"] for r in rounds] == ["published"]
    rows = rounds[-1]["rows"]
    assert len(rows) == 3 and len({r["architecture"] for r in rows}) == 3
    assert all(0 < r["epsilon_spent"] <= 8.0 + 1e-6 for r in rows)
    assert json.loads((out / "results.json").read_text())["config"]["seed"] == 1
    budgets = data["budgets"]
    assert isinstance(budgets, dict) and all(b["spent"] <= b["limit"] for b in budgets.values())
    with sqlite3.connect(out / "ledger.db") as db:
        stages = db.execute("select id, stage from rounds order by id").fetchall()
        uploads = db.execute("select count(*) from uploads").fetchone()[0]
    assert stages == [("demo:00000001", "published")]
    assert uploads == 3
    # The demo writes a signed, verifiable audit log: budget, decryption and outlier events.
    with sqlite3.connect(out / "ledger.db") as db:
        events = {e for (e,) in db.execute("select distinct event from audit_entries")}
    assert {"budget.set", "budget.committed", "decryption.released", "outlier.decision"} <= events
    url, pem = f"sqlite:///{out / 'ledger.db'}", str(out / "log-public-key.pem")
    verified = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", pem])
    assert verified.exit_code == 0, verified.output
    assert "OK" in verified.output
    # SECURE_FED_KEY_PASSPHRASE set: the log's signing key is encrypted at rest, and usable.
    key_pem = (out / "log-signing-key.pem").read_bytes()
    assert key_pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    key = SM2PrivateKey.from_pem(key_pem, passphrase=PASSPHRASE.encode())
    assert key.public_key.to_pem() == (out / "log-public-key.pem").read_bytes()
    assert "not set" not in result.stderr


def test_table_output_and_refusal_to_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SECURE_FED_KEY_PASSPHRASE", raising=False)
    out = tmp_path / "demo"
    args = ["demo", "--rounds", "1", "--participants", "2", "--out", str(out)]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    # Without SECURE_FED_KEY_PASSPHRASE: one notice line, the key unencrypted but 0600.
    notices = [line for line in first.stderr.splitlines() if "SECURE_FED_KEY_PASSPHRASE" in line]
    assert len(notices) == 1 and "unencrypted" in notices[0]
    assert (out / "log-signing-key.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert stat.S_IMODE((out / "log-signing-key.pem").stat().st_mode) == 0o600
    assert "round 1: published" in first.output and "local-only" in first.output
    assert "mean honest accuracy" in first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "[FEDERATION_CONFIG_INVALID]" in again.output
    assert "--overwrite" in again.output
    third = runner.invoke(app, [*args, "--overwrite", "--attack", "sign_flip:1"])
    assert third.exit_code == 0, third.output
    assert "attacker" in third.output


def test_budget_refusal_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    args = ["demo", "--rounds", "2", "--participants", "2", "--epsilon", "0.01",
            "--out", str(tmp_path / "d")]  # fmt: skip
    result = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    stops = [line for line in result.output.splitlines() if ": private training stopped: " in line]
    assert len(stops) == 2 and all("[LEDGER_CALIBRATION_IMPOSSIBLE]" in line for line in stops)
    assert "round 2: published" in result.output


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--mode", "rot13"], "[AGGREGATION_UNKNOWN_MODE] unknown aggregation mode 'rot13'"),
        (["--attack", "backdoor:1"], "[ATTACK_UNKNOWN] unknown attack 'backdoor'"),
        (["--attack", "sign_flip"], "[ATTACK_SPEC_INVALID]"),
        (["--attack", "sign_flip:4"], "leaves no honest participant"),
        (["--dataset", "cifar"], "[LEARNING_UNKNOWN_DATASET]"),
        (["--rounds", "0"], "[FEDERATION_CONFIG_INVALID] rounds"),
        (["--participants", "1"], "[FEDERATION_CONFIG_INVALID] participants"),
        (["--epsilon", "-1"], "[FEDERATION_CONFIG_INVALID] epsilon"),
    ],
)
def test_bad_options_give_typed_errors(tmp_path: Path, extra: list[str], fragment: str) -> None:
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), *extra])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert not (tmp_path / "d" / "ledger.db").exists()


def test_unknown_mode_message_lists_registered_modes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), "--mode", "x"])
    assert "registered: [" in result.output and "'plaintext'" in result.output


@pytest.mark.slow
def test_full_default_demo(tmp_path: Path) -> None:
    """The embedded defaults: >= 4 architectures, DP on, several rounds; federation helps."""
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo"), "--json"])
    assert result.exit_code == 0, result.output
    data = _json(result.stdout)
    rounds = data["rounds"]
    assert isinstance(rounds, list) and len(rounds) >= 3
    rows = rounds[-1]["rows"]
    assert len({r["architecture"] for r in rows}) >= 4
    final = data["final_mean_accuracy"]
    assert isinstance(final, dict) and final["federated"] > final["local_only"] + 0.05

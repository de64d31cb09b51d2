"""``secure-fed demo``: JSON output, tables, ledger on disk, aborted rounds, full run (slow).

Option validation (fast, before torch) is in ``test_demo_options.py``; the
report, the stage events and ``--reproducible`` in ``test_demo_report.py``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey
from secure_fed.report.noise import noise_text

runner = CliRunner()
PASSPHRASE = "demo log passphrase"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _json(output: str) -> dict[str, object]:
    return json.loads(output[output.index("{") :])  # type: ignore[no-any-return]


@pytest.mark.slow  # a CKKS round with three participants: about 40 s on 2 busy cores
def test_small_demo_json(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--rounds", "1", "--participants", "3", "--out", str(out)]
    args += ["--json", "--seed", "1"]
    levels = {name: logging.getLogger(name).level for name in ("secure_fed", "privacy_ledger")}
    result = runner.invoke(app, args, env={"SECURE_FED_KEY_PASSPHRASE": PASSPHRASE})
    assert result.exit_code == 0, result.output
    # The demo quietens library logs while it draws its tables, then gives them back.
    assert {name: logging.getLogger(name).level for name in levels} == levels
    data = json.loads(result.stdout)  # stdout carries nothing but the JSON
    rounds = data["rounds"]
    assert isinstance(rounds, list) and [r["stage"] for r in rounds] == ["published"]
    rows = rounds[-1]["rows"]
    assert len(rows) == 3 and len({r["architecture"] for r in rows}) == 3
    # What the filter did, per upload: its score, decision and applied weight.
    assert all(r["upload"] == "accepted" for r in rows)
    assert all(r["decision"] in ("keep", "downweight", "exclude") for r in rows)
    assert all(r["score"] is not None and 0 < r["weight"] <= 1 for r in rows)
    assert sum(r["weight"] for r in rows) == pytest.approx(1.0)
    privacy = data["privacy"]
    assert isinstance(privacy, dict) and privacy["delta"] == 1e-5
    assert privacy["accountant"].startswith("rdp") and privacy["noise_rng"] == "secrets-seeded"
    assert privacy["secure_rng"] is False  # as every ledger event records it
    assert all(0 < r["epsilon_spent"] <= 8.0 + 1e-6 for r in rows)
    assert json.loads((out / "results.json").read_text())["config"]["seed"] == 1
    budgets = data["budgets"]
    assert isinstance(budgets, dict) and all(b["spent"] <= b["limit"] for b in budgets.values())
    with sqlite3.connect(out / "ledger.db") as db:
        stages = db.execute("select id, stage from rounds order by id").fetchall()
        uploads = db.execute("select count(*) from uploads").fetchone()[0]
    assert stages == [("demo:00000001", "published")]
    assert uploads == 3
    # results.json names the ledger's last signed tree head, as stored.
    ledger = data["ledger"]
    assert isinstance(ledger, dict)
    head = ledger["signed_tree_head"]
    with sqlite3.connect(out / "ledger.db") as db:
        size, root, sig = db.execute(
            "select tree_size, root_hash, signature from tree_heads order by seq desc limit 1"
        ).fetchone()
        entries = db.execute("select count(*) from audit_entries").fetchone()[0]
    assert (head["tree_size"], head["root_hash"], head["signature_hex"]) == (
        size,
        root.hex(),
        sig.hex(),
    )
    assert size == entries
    assert (out / "report.html").stat().st_size > 0
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
    args = ["demo", "--rounds", "1", "--participants", "2", "--mode", "plaintext"]
    args += ["--out", str(out)]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    # Without SECURE_FED_KEY_PASSPHRASE: one notice line, the key unencrypted but 0600.
    notices = [line for line in first.stderr.splitlines() if "SECURE_FED_KEY_PASSPHRASE" in line]
    assert len(notices) == 1 and "unencrypted" in notices[0]
    assert (out / "log-signing-key.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert stat.S_IMODE((out / "log-signing-key.pem").stat().st_mode) == 0o600
    assert "round 1: published" in first.output and "local-only" in first.output
    assert "mean honest accuracy" in first.output
    header = next(line for line in first.stdout.splitlines() if "participant" in line)
    assert all(col in header for col in ("truth", "score", "decision", "weight", "terms"))
    assert "report.html" in first.stdout
    # the same words as results.json, report.html and the compliance report
    assert f"DP noise: {noise_text(reproducible=False)}" in first.stdout
    # Seeded (insecure) DP noise is never the default: no event records it.
    with sqlite3.connect(out / "ledger.db") as db:
        versions = [json.loads(v) for (v,) in db.execute("select versions from privacy_events")]
    assert versions and all("noise_rng" not in v for v in versions)
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "[FEDERATION_CONFIG_INVALID]" in again.output
    assert "--overwrite" in again.output
    third = runner.invoke(app, [*args, "--overwrite", "--attack", "sign_flip:1"])
    assert third.exit_code == 0, third.output
    # Ground truth is its own column; the decision column shows what the filter did.
    row = next(line for line in third.stdout.splitlines() if "bank-2" in line)
    assert "attacker" in row and any(d in row for d in ("keep", "downweight", "exclude"))


def test_budget_refusal_aborts_the_rounds_with_the_reason_shown(tmp_path: Path) -> None:
    """epsilon 0.01 leaves no noise that fits: nobody trains, so no upload has a receipt.

    The aggregator accepts an upload only with the ledger's receipt of a committed
    charge, so every upload is refused and each round aborts below its quorum;
    the table, the notes under it and results.json say why.
    """
    out = tmp_path / "d"
    args = ["demo", "--rounds", "2", "--participants", "2", "--epsilon", "0.01"]
    args += ["--mode", "plaintext", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    stops = [line for line in lines if ": private training stopped: " in line]
    # The label prior's release (logit adjustment, on by default) is asked first and is
    # over budget on its own; without it the DP-SGD calibration is the one refused.
    refused = ("[LEDGER_CALIBRATION_IMPOSSIBLE]", "[LEDGER_BUDGET_EXCEEDED]")
    assert len(stops) == 2 and all(any(c in line for c in refused) for line in stops)
    refused = [line for line in lines if ": upload refused: [UPLOAD_RECEIPT_MISSING]" in line]
    assert len(refused) == 4  # two participants, two rounds
    for rid in (1, 2):
        assert (
            f"round {rid}: aborted (only 0 of the required 2 participants uploaded)"
            in lines[next(i for i, line in enumerate(lines) if line.startswith(f"round {rid}: "))]
        )
    assert "2 of 2 rounds aborted" in result.stdout
    data = json.loads((out / "results.json").read_text())
    assert [r["stage"] for r in data["rounds"]] == ["aborted", "aborted"]
    assert all("only 0 of the required 2" in r["reason"] for r in data["rounds"])
    rows = [row for r in data["rounds"] for row in r["rows"]]
    assert all(row["upload"].startswith("refused: [UPLOAD_RECEIPT_MISSING]") for row in rows)
    assert all(row["weight"] is None and row["decision"] is None for row in rows)
    assert all(b["spent"] == 0 for b in data["budgets"].values())

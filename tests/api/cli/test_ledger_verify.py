"""``secure-fed ledger verify / head / export-head`` on a real SQLite ledger."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.db import create_ledger_engine, upgrade

runner = CliRunner()


@pytest.fixture
def ledger_db(tmp_path: Path) -> tuple[str, SM2PrivateKey, Path]:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_ledger_engine(url)
    upgrade(engine)
    key = SM2PrivateKey.generate()
    log = AuditLog(signer=key, origin="cli.test/audit", checkpoint_every=4)
    with Session(engine) as session:
        for i in range(10):
            log.append(
                session,
                event="upload.received",
                subject=f"round:{i % 2}",
                fields={"digest": f"{i:064x}", "size": 100 + i},
            )
            log.checkpoint(session)
        session.commit()
    engine.dispose()
    pem = tmp_path / "log-pub.pem"
    pem.write_bytes(key.public_key.to_pem())
    return url, key, pem


def test_verify_ok_with_pinned_key(ledger_db: tuple[str, SM2PrivateKey, Path]) -> None:
    url, _key, pem = ledger_db
    result = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(pem)])
    assert result.exit_code == 0, result.output
    assert "OK: 10 entries, root " in result.stdout
    assert "3 signed heads checked (latest size 9, 1 entries not yet signed)" in result.stdout
    assert "warning" not in result.stderr


def test_verify_warns_when_the_key_is_not_pinned(
    ledger_db: tuple[str, SM2PrivateKey, Path],
) -> None:
    url, key, _pem = ledger_db
    result = runner.invoke(app, ["ledger", "verify", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    assert "pin the operator's key with --public-key" in result.stderr
    assert f'"key_fingerprint": "{key.public_key.fingerprint()}"' in result.stdout


def test_verify_names_the_first_bad_entry(ledger_db: tuple[str, SM2PrivateKey, Path]) -> None:
    url, _key, pem = ledger_db
    engine = create_ledger_engine(url)
    with engine.begin() as conn:
        data = conn.execute(text("SELECT entry FROM audit_entries WHERE entry_index = 5")).scalar()
        assert data is not None
        entry = canonical.decode(bytes(data))
        entry["fields"]["size"] = 1
        conn.execute(
            text("UPDATE audit_entries SET entry = :e WHERE entry_index = 5"),
            {"e": canonical.encode(entry)},
        )
    engine.dispose()
    result = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(pem)])
    assert result.exit_code == 1
    assert "TAMPERED: [LEDGER_LOG_TAMPERED] entry 5" in result.stderr
    assert "first bad entry: 5" in result.stderr


def test_verify_refuses_a_wrong_pinned_key(
    ledger_db: tuple[str, SM2PrivateKey, Path], tmp_path: Path
) -> None:
    url, _key, _pem = ledger_db
    other = tmp_path / "other.pem"
    other.write_bytes(SM2PrivateKey.generate().public_key.to_pem())
    result = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(other)])
    assert result.exit_code == 1
    assert "LEDGER_LOG_KEY_MISMATCH" in result.stderr


def test_missing_database_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ledger", "verify", "--db", f"sqlite:///{tmp_path}/none.db"])
    assert result.exit_code == 2
    assert "no ledger database at" in result.stderr


def test_head_prints_the_newest_checkpoint(ledger_db: tuple[str, SM2PrivateKey, Path]) -> None:
    url, key, pem = ledger_db
    result = runner.invoke(app, ["ledger", "head", "--db", url, "--public-key", str(pem)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("cli.test/audit\n9\n")
    assert f"key fingerprint (SM3 of SPKI): {key.public_key.fingerprint()}" in result.stdout


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_export_head_verifies_with_openssl_alone(
    ledger_db: tuple[str, SM2PrivateKey, Path], tmp_path: Path
) -> None:
    url, _key, pem = ledger_db
    out = tmp_path / "export"
    result = runner.invoke(
        app, ["ledger", "export-head", "--db", url, "--public-key", str(pem), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    cmd = (
        "openssl dgst -sm3 -verify pub.pem -signature head.sig "
        "-sigopt distid:1234567812345678 head.txt"
    )
    assert cmd in result.stdout
    done = subprocess.run(cmd.split(), cwd=out, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "Verified OK" in done.stdout, done.stdout + done.stderr
    assert (out / "head.txt").read_bytes().startswith(b"cli.test/audit\n9\n")


def test_trusted_head_reveals_a_truncation(
    ledger_db: tuple[str, SM2PrivateKey, Path], tmp_path: Path
) -> None:
    url, _key, pem = ledger_db
    out = tmp_path / "accepted"
    exported = runner.invoke(
        app, ["ledger", "export-head", "--db", url, "--public-key", str(pem), "--out", str(out)]
    )
    assert exported.exit_code == 0, exported.output
    engine = create_ledger_engine(url)
    with engine.begin() as conn:  # drop entries 5.. and the heads covering them, fix the state
        leaf = conn.execute(text("SELECT leaf_hash FROM audit_entries WHERE entry_index = 4"))
        conn.execute(text("DELETE FROM audit_entries WHERE entry_index >= 5"))
        conn.execute(text("DELETE FROM tree_heads WHERE tree_size > 5"))
        conn.execute(
            text(
                "UPDATE log_state SET tree_size = 5, last_leaf_hash = :h, "
                "head_count = 2, last_head_size = 5"
            ),
            {"h": leaf.scalar()},
        )
    engine.dispose()
    plain = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(pem)])
    assert plain.exit_code == 1, plain.output  # the ledger seal signed 10 entries, 3 heads
    assert "LEDGER_STATE_TAMPERED" in plain.stderr
    checked = runner.invoke(
        app, ["ledger", "verify", "--db", url, "--public-key", str(pem), "--trusted-head", str(out)]
    )
    assert checked.exit_code == 1
    assert "first bad entry: 5" in checked.stderr and "were removed" in checked.stderr
    (out / "head.txt").write_bytes(b"cli.test/audit\n9\n" + b"A" * 43 + b"=\n")
    forged = runner.invoke(
        app, ["ledger", "verify", "--db", url, "--public-key", str(pem), "--trusted-head", str(out)]
    )
    assert forged.exit_code == 2 and "LEDGER_CHECKPOINT_SIGNATURE_INVALID" in forged.stderr


def test_checkpoint_signs_the_unsigned_tail(
    ledger_db: tuple[str, SM2PrivateKey, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key, pem = ledger_db
    key_file = tmp_path / "log-key.pem"
    key_file.write_bytes(key.to_pem(passphrase=b"correct horse battery"))
    monkeypatch.setenv("SECURE_FED_KEY_PASSPHRASE", "correct horse battery")
    args = ["ledger", "checkpoint", "--db", url, "--signing-key", str(key_file)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "signed head of size 10, root " in result.stdout
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "nothing to sign" in again.stdout
    report = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(pem)])
    assert report.exit_code == 0, report.output
    assert "4 signed heads checked (latest size 10, 0 entries not yet signed)" in report.stdout
    other = tmp_path / "other.pem"
    other.write_bytes(SM2PrivateKey.generate().to_pem(passphrase=b"correct horse battery"))
    refused = runner.invoke(app, ["ledger", "checkpoint", "--db", url, "--signing-key", str(other)])
    assert refused.exit_code == 1 and "LEDGER_LOG_KEY_MISMATCH" in refused.stderr

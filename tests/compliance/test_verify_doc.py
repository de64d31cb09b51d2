"""docs/audit/verify.md: the OpenSSL-only commands, exactly as written, verify a real bundle.

The ``sh`` blocks under "With OpenSSL alone" are run in order in one bash
shell, in a folder holding the bundle and the two pinned public keys. A valid
bundle prints every OK line; a bundle whose entry, consistency node, head or
signature was changed (re-signed where the report key allows) loses the
corresponding line, so the commands can fail.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compliance import Scope, parse_bound
from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical
from tests.compliance.builder import Built
from tests.compliance.conftest import Exporter
from tests.compliance.mutate import resign

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit" / "verify.md"
OK_LINES = ["log key OK", "inclusion OK", "prev OK", "consistency OK"]


def openssl_script() -> str:
    text = DOC.read_text(encoding="utf-8").split("## With OpenSSL alone", 1)[1]
    text = text.split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 6, "verify.md should have six OpenSSL steps"
    return "\n".join(blocks)


def run(folder: Path, bundle: bytes, report_key: SM2PrivateKey, built: Built) -> tuple[int, str]:
    (folder / "bundle.json").write_bytes(bundle)
    (folder / "report-pub.pem").write_bytes(report_key.public_key.to_pem())
    (folder / "log-pub.pem").write_bytes(built.log_key.public_key.to_pem())
    done = subprocess.run(
        ["bash", "-c", openssl_script()],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def bundle(export: Exporter) -> bytes:
    day = "2026-01-20"
    scope = Scope(
        start=parse_bound(day, name="--from", end=False),
        end=parse_bound(day, name="--to", end=True),
    )
    return export("json", scope=scope).path.read_bytes()


def test_the_documented_commands_verify_a_bundle(
    bundle: bytes, report_key: SM2PrivateKey, built: Built, tmp_path: Path
) -> None:
    assert shutil.which("openssl")
    assert b'"consistency":[]' not in bundle  # step 6 runs the real proof
    status, output = run(tmp_path, bundle, report_key, built)
    assert status == 0, output
    assert output.count("Verified OK") == 3, output
    for line in OK_LINES:
        assert line in output, output


def _last_entry_changed(bundle: bytes) -> bytes:
    lines = bundle.splitlines(keepends=True)
    index = max(i for i, line in enumerate(lines) if line.startswith(b'{"entry":'))
    row = canonical.decode(lines[index].rstrip(b"\n"))
    entry = canonical.decode(base64.b64decode(row["entry"]))
    entry["subject"] = entry["subject"] + "-forged"
    row["entry"] = base64.b64encode(canonical.encode(entry)).decode()
    lines[index] = canonical.encode(row) + b"\n"
    return b"".join(lines)


def _consistency_changed(bundle: bytes) -> bytes:
    head = re.search(rb'"consistency":\["([^"]+)"', bundle)
    assert head
    node = bytearray(base64.b64decode(head.group(1)))
    node[0] ^= 1
    return bundle.replace(head.group(1), base64.b64encode(bytes(node)), 1)  # the heads line only


def test_the_documented_commands_fail_on_forgeries(
    bundle: bytes, report_key: SM2PrivateKey, built: Built, tmp_path: Path
) -> None:
    # the documented steps run one after the other: the exit status is the last step's
    # (the consistency proof), so each forgery is judged by the lines of its own step
    _, forged_entry = run(
        tmp_path, resign(_last_entry_changed(bundle), report_key), report_key, built
    )
    assert "inclusion OK" not in forged_entry and "prev OK" in forged_entry
    assert forged_entry.count("Verified OK") == 3  # the producer re-signed: only the log tells
    status, forged_proof = run(
        tmp_path, resign(_consistency_changed(bundle), report_key), report_key, built
    )
    assert status != 0, forged_proof
    assert "consistency OK" not in forged_proof and "inclusion OK" in forged_proof
    _, stranger = run(tmp_path, resign(bundle, SM2PrivateKey.generate()), report_key, built)
    assert stranger.count("Verified OK") == 2 and "Verification failure" in stranger

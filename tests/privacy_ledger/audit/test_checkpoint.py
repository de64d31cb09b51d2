from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit.checkpoint import (
    Checkpoint,
    parse_checkpoint,
    sign_checkpoint,
    verify_head,
)
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.errors import (
    AuditParameterInvalid,
    CheckpointMalformed,
    CheckpointSignatureInvalid,
)

ROOT = SM3_HASHER.empty_root()
B64 = base64.b64encode(ROOT)


def test_body_is_a_c2sp_checkpoint() -> None:
    cp = Checkpoint(origin="hospital-a.example/audit", tree_size=42, root_hash=ROOT)
    assert cp.body() == b"hospital-a.example/audit\n42\n" + B64 + b"\n"
    assert B64 == b"GrIdg1XPoX+OYRlIMegajyK+yMco/vt0ftA161CCqis="
    assert parse_checkpoint(cp.body()) == cp


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"o\n1\n" + B64, "end with a newline"),
        (b"o\n1\n" + B64 + b"\nextra\n", "want 3 lines"),
        (b"o\n01\n" + B64 + b"\n", "not a decimal uint64"),
        (b"o\n-1\n" + B64 + b"\n", "not a decimal uint64"),
        (b"o\n18446744073709551616\n" + B64 + b"\n", "not a decimal uint64"),
        (b"o\n1\n!!!!\n", "not standard base64"),
        (b"o\n1\n" + base64.b64encode(b"short") + b"\n", "want 32 bytes"),
        (b"\n1\n" + B64 + b"\n", "origin"),
        (b"\xff\n1\n" + B64 + b"\n", "origin"),
        (b"o" * 2000, "at most 1024"),
    ],
)
def test_malformed_bodies(body: bytes, fragment: str) -> None:
    with pytest.raises(CheckpointMalformed, match=fragment):
        parse_checkpoint(body)


@pytest.mark.parametrize("origin", ["", " padded", "two\nlines", "x" * 256])
def test_bad_origins(origin: str) -> None:
    with pytest.raises(AuditParameterInvalid, match="origin"):
        Checkpoint(origin=origin, tree_size=1, root_hash=ROOT).body()


def test_sign_and_verify() -> None:
    key = SM2PrivateKey.generate()
    head = sign_checkpoint(Checkpoint(origin="log", tree_size=7, root_hash=ROOT), key)
    assert head.key_fingerprint == key.public_key.fingerprint()
    assert verify_head(head.body, head.signature, key.public_key, origin="log") == head.checkpoint
    with pytest.raises(CheckpointSignatureInvalid, match="head of size 7 does not verify"):
        verify_head(head.body, head.signature, SM2PrivateKey.generate().public_key)
    forged = head.body.replace(b"\n7\n", b"\n8\n")
    with pytest.raises(CheckpointSignatureInvalid, match="size 8 does not verify"):
        verify_head(forged, head.signature, key.public_key)
    with pytest.raises(CheckpointSignatureInvalid, match="DER bytes"):
        verify_head(head.body, b"\x30" * 81, key.public_key)
    with pytest.raises(CheckpointMalformed, match="origin: head is for 'log', want 'other'"):
        verify_head(head.body, head.signature, key.public_key, origin="other")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_openssl_alone_verifies_a_head(tmp_path: Path) -> None:
    key = SM2PrivateKey.generate()
    cp = Checkpoint(origin="bank-b.example/audit", tree_size=3, root_hash=ROOT)
    head = sign_checkpoint(cp, key)
    (tmp_path / "head.txt").write_bytes(head.body)
    (tmp_path / "head.sig").write_bytes(head.signature)
    (tmp_path / "pub.pem").write_bytes(key.public_key.to_pem())
    cmd = (
        "openssl dgst -sm3 -verify pub.pem -signature head.sig"
        " -sigopt distid:1234567812345678 head.txt"
    )
    ok = subprocess.run(cmd.split(), cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "Verified OK" in ok.stdout, ok.stdout + ok.stderr
    (tmp_path / "head.txt").write_bytes(head.body.replace(b"\n3\n", b"\n4\n"))
    bad = subprocess.run(cmd.split(), cwd=tmp_path, capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "Verified OK" not in bad.stdout

"""``secure-fed keys``: generate / sign / verify / fingerprint, in-process and as installed."""

from __future__ import annotations

import os
import pty
import select
import shutil
import signal
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey, SM2PublicKey

PASS = "operator passphrase 42"
ENV = {"SECURE_FED_KEY_PASSPHRASE": PASS}
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_ambient_passphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SECURE_FED_KEY_PASSPHRASE", raising=False)
    monkeypatch.delenv("SECURE_FED_ENVIRONMENT", raising=False)


@pytest.fixture
def keydir(tmp_path: Path) -> Path:
    result = runner.invoke(app, ["keys", "generate", "--out", str(tmp_path / "keys")], env=ENV)
    assert result.exit_code == 0, result.output
    return tmp_path / "keys"


@pytest.fixture
def signed(keydir: Path, tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "model.bin"
    data.write_bytes(b"\x00\x01" * 5000)
    sig = tmp_path / "model.sig"
    args = ["keys", "sign", "--key", str(keydir / "sm2-private.pem"), str(data), "--out", str(sig)]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    return data, sig


def test_generate_writes_encrypted_0600_key_and_prints_fingerprint(keydir: Path) -> None:
    private, public = keydir / "sm2-private.pem", keydir / "sm2-public.pem"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    key = SM2PrivateKey.from_pem(private.read_bytes(), passphrase=PASS.encode())
    assert key.public_key == SM2PublicKey.from_pem(public.read_bytes())
    result = runner.invoke(app, ["keys", "fingerprint", str(public)])
    assert result.exit_code == 0
    assert result.stdout.strip() == key.public_key.fingerprint()


def test_generate_prints_the_fingerprint(tmp_path: Path) -> None:
    result = runner.invoke(app, ["keys", "generate", "--out", str(tmp_path)], env=ENV)
    assert result.exit_code == 0, result.output
    public = SM2PublicKey.from_pem((tmp_path / "sm2-public.pem").read_bytes())
    assert f"SM3 fingerprint: {public.fingerprint()}" in result.stdout


def test_generate_refuses_to_overwrite_then_force_replaces(keydir: Path) -> None:
    before = (keydir / "sm2-private.pem").read_bytes()
    result = runner.invoke(app, ["keys", "generate", "--out", str(keydir)], env=ENV)
    assert result.exit_code == 1
    assert "refusing to overwrite" in result.stderr and "--force" in result.stderr
    assert (keydir / "sm2-private.pem").read_bytes() == before
    os.chmod(keydir / "sm2-private.pem", 0o644)
    forced = runner.invoke(app, ["keys", "generate", "--out", str(keydir), "--force"], env=ENV)
    assert forced.exit_code == 0, forced.output
    assert (keydir / "sm2-private.pem").read_bytes() != before
    assert stat.S_IMODE((keydir / "sm2-private.pem").stat().st_mode) == 0o600


def test_generate_refuses_when_only_the_public_file_exists(tmp_path: Path) -> None:
    (tmp_path / "sm2-public.pem").write_text("keep me")
    result = runner.invoke(app, ["keys", "generate", "--out", str(tmp_path)], env=ENV)
    assert result.exit_code == 1 and "sm2-public.pem" in result.stderr
    assert not (tmp_path / "sm2-private.pem").exists()


def _in_terminal(args: list[str], answers: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``secure-fed ARGS`` on a real pseudo-terminal, typing one answer per prompt."""
    env = {k: v for k, v in os.environ.items() if k != "SECURE_FED_KEY_PASSPHRASE"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI with the pty as its controlling terminal
        os.chdir(cwd)
        code = "from api.cli import main; main()"
        os.execve(sys.executable, [sys.executable, "-c", code, *args], env)
    seen, pending, deadline = b"", list(answers), time.monotonic() + 120
    answered = 0  # where the output stood when the last answer was typed
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        # Type only once a NEW prompt reads with echo off: getpass flushes input typed
        # before it turns echo off, so an answer sent to the previous prompt's text again
        # would be lost and the child would wait for ever (a race seen under load).
        echo_off = not termios.tcgetattr(fd)[3] & termios.ECHO
        if pending and echo_off and seen[answered:].rstrip().endswith(b":"):
            os.write(fd, pending.pop(0).encode() + b"\n")
            seen += b"\n"
            answered = len(seen)
    finished, status = os.waitpid(pid, os.WNOHANG)
    if not finished:  # still waiting for input: a test failure, not a hang
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def test_generate_prompts_with_confirmation_in_a_terminal(tmp_path: Path) -> None:
    code, output = _in_terminal(
        ["keys", "generate", "--out", "k"], ["first", "second", "pw1", "pw1"], tmp_path
    )
    assert code == 0, output
    assert "do not match" in output and "first" not in output  # hidden input
    pem = (tmp_path / "k" / "sm2-private.pem").read_bytes()
    SM2PrivateKey.from_pem(pem, passphrase=b"pw1")


def test_generate_without_terminal_or_variable_is_one_typed_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["keys", "generate", "--out", str(tmp_path / "k")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: [CLI_PASSPHRASE_UNAVAILABLE] ")
    assert len(result.stderr.splitlines()) == 2 and "SECURE_FED_KEY_PASSPHRASE" in result.stderr
    assert not (tmp_path / "k").exists()


def test_sign_output_verifies_in_library_and_cli(signed: tuple[Path, Path], keydir: Path) -> None:
    data, sig = signed
    public = SM2PublicKey.from_pem((keydir / "sm2-public.pem").read_bytes())
    public.verify(data.read_bytes(), sig.read_bytes())
    pub = str(keydir / "sm2-public.pem")
    result = runner.invoke(app, ["keys", "verify", "--pub", pub, str(data), "--sig", str(sig)])
    assert result.exit_code == 0 and "Verified OK" in result.stdout


def test_verify_fails_on_tampered_file(signed: tuple[Path, Path], keydir: Path) -> None:
    data, sig = signed
    data.write_bytes(data.read_bytes() + b"!")
    pub = str(keydir / "sm2-public.pem")
    result = runner.invoke(app, ["keys", "verify", "--pub", pub, str(data), "--sig", str(sig)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: [CRYPTO_SIGNATURE_INVALID] ")


def test_verify_fails_under_another_distid(signed: tuple[Path, Path], keydir: Path) -> None:
    data, sig = signed
    args = ["keys", "verify", "--pub", str(keydir / "sm2-public.pem"), str(data)]
    result = runner.invoke(app, [*args, "--sig", str(sig), "--distid", "bob@bank"])
    assert result.exit_code == 1 and "does not verify" in result.stderr


def test_verify_rejects_garbage_signature(signed: tuple[Path, Path], keydir: Path) -> None:
    data, sig = signed
    sig.write_bytes(b"\x30\x02\x05\x00")
    args = ["keys", "verify", "--pub", str(keydir / "sm2-public.pem"), str(data)]
    result = runner.invoke(app, [*args, "--sig", str(sig)])
    assert result.exit_code == 1 and "expected 8 to 72" in result.stderr


def test_sign_with_wrong_passphrase_fails(keydir: Path, tmp_path: Path) -> None:
    data = tmp_path / "f"
    data.write_bytes(b"x")
    key = str(keydir / "sm2-private.pem")
    result = runner.invoke(
        app,
        ["keys", "sign", "--key", key, str(data), "--out", str(tmp_path / "s")],
        env={"SECURE_FED_KEY_PASSPHRASE": "wrong"},
    )
    assert result.exit_code == 1 and "wrong passphrase" in result.stderr
    assert not (tmp_path / "s").exists()


def test_sign_missing_file_fails_cleanly(keydir: Path, tmp_path: Path) -> None:
    key = str(keydir / "sm2-private.pem")
    args = ["keys", "sign", "--key", key, str(tmp_path / "absent"), "--out", str(tmp_path / "s")]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 2 and "[CLI_FILE_UNREADABLE] cannot read" in result.stderr


def test_sign_with_unencrypted_key_warns(tmp_path: Path) -> None:
    key = SM2PrivateKey.generate()
    (tmp_path / "plain.pem").write_bytes(key.to_pem_unencrypted_insecure())
    (tmp_path / "f").write_bytes(b"payload")
    args = ["keys", "sign", "--key", str(tmp_path / "plain.pem"), str(tmp_path / "f")]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "s")])
    assert result.exit_code == 0 and "not encrypted at rest" in result.stderr
    key.public_key.verify(b"payload", (tmp_path / "s").read_bytes())


def test_fingerprint_rejects_malformed_key(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("-----BEGIN PUBLIC KEY-----\nAA==\n-----END PUBLIC KEY-----")
    result = runner.invoke(app, ["keys", "fingerprint", str(tmp_path / "bad.pem")])
    assert result.exit_code == 1 and "[CRYPTO_KEY_INVALID]" in result.stderr


@pytest.mark.slow  # two cold starts of the CLI, which imports the whole platform (torch)
def test_installed_executable_output_verifies_with_openssl(tmp_path: Path) -> None:
    exe = shutil.which("secure-fed")
    assert exe is not None, "the secure-fed console script is not installed"
    env = {**os.environ, **ENV}
    keys, data, sig = tmp_path / "keys", tmp_path / "report.json", tmp_path / "report.sig"
    data.write_bytes(b'{"round": 7, "epsilon": 1.5}\n')

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)

    generated = run(exe, "keys", "generate", "--out", str(keys))
    assert generated.returncode == 0, generated.stderr
    signed = run(
        exe, "keys", "sign", "--key", str(keys / "sm2-private.pem"), str(data), "--out", str(sig)
    )
    assert signed.returncode == 0, signed.stderr
    # exactly the operator's command from the README's Operator commands
    openssl_verify = [
        "openssl",
        "dgst",
        "-sm3",
        "-verify",
        str(keys / "sm2-public.pem"),
        "-signature",
        str(sig),
        "-sigopt",
        "distid:1234567812345678",
        str(data),
    ]
    verified = run(*openssl_verify)
    assert verified.returncode == 0 and "Verified OK" in verified.stdout
    data.write_bytes(b'{"round": 7, "epsilon": 0.5}\n')
    tampered = run(*openssl_verify)
    assert tampered.returncode != 0 and "Verification failure" in tampered.stdout


def test_generate_into_a_file_path_fails_cleanly(tmp_path: Path) -> None:
    (tmp_path / "occupied").write_text("not a folder")
    result = runner.invoke(app, ["keys", "generate", "--out", str(tmp_path / "occupied")], env=ENV)
    assert result.exit_code == 1 and "cannot write keys" in result.stderr

"""``secure-fed keys``: SM2 key management for operators.

``generate`` writes an encrypted PKCS#8 private key (mode 0600) and its public
key; ``sign`` writes a DER SM2-with-SM3 signature that OpenSSL verifies with
``openssl dgst -sm3 -verify PUB -signature SIG -sigopt distid:1234567812345678 FILE``;
``verify`` and ``fingerprint`` check a signature and print a key's SM3
fingerprint. The passphrase comes from ``SECURE_FED_KEY_PASSPHRASE`` (through
:class:`api.settings.Settings`) or an interactive prompt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError

from api.settings import Settings
from crypto.errors import CryptoError
from crypto.sm import DEFAULT_SM2_ID, SM2PrivateKey, SM2PublicKey

keys_app = typer.Typer(help="Generate SM2 keys and sign files.", no_args_is_help=True)

PRIVATE_NAME = "sm2-private.pem"
PUBLIC_NAME = "sm2-public.pem"
_MAX_KEY_FILE = 1 << 16
_MAX_SIG_FILE = 1024
_DEFAULT_DISTID = DEFAULT_SM2_ID.decode("ascii")

DistId = Annotated[
    str,
    typer.Option("--distid", help="SM2 signer ID (ASCII) used in Z; OpenSSL needs it too."),
]


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _passphrase(*, confirm: bool) -> bytes:
    try:
        configured = Settings().key_passphrase
    except ValidationError as exc:
        _fail(f"invalid settings: {exc.errors()[0]['msg']}", 2)
    if configured is not None:
        return configured.get_secret_value().encode("utf-8")
    text = typer.prompt("Key passphrase", hide_input=True, confirmation_prompt=confirm)
    return str(text).encode("utf-8")


def _read_limited(path: Path, limit: int, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        _fail(f"cannot read {what} {path}: {exc.strerror}")
    if len(data) > limit:
        _fail(f"{what} {path} is larger than {limit} bytes")
    return data


def _distid(text: str) -> bytes:
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        _fail("--distid must be ASCII", 2)


def _write_private(path: Path, pem: bytes, *, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an overwritten file keeps its old mode otherwise
        os.write(fd, pem)
    finally:
        os.close(fd)


@keys_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option("--out", help="Folder for the two PEM files.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing keys.")] = False,
) -> None:
    """Generate an SM2 key pair; print its SM3 fingerprint."""
    private_path, public_path = out / PRIVATE_NAME, out / PUBLIC_NAME
    existing = [str(p) for p in (private_path, public_path) if p.exists()]
    if existing and not force:
        _fail(f"refusing to overwrite {', '.join(existing)} (use --force)")
    passphrase = _passphrase(confirm=True)
    key = SM2PrivateKey.generate()
    try:
        private_pem = key.to_pem(passphrase=passphrase)
    except CryptoError as exc:
        _fail(str(exc))
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_private(private_path, private_pem, force=force)
        public_path.write_bytes(key.public_key.to_pem())
    except OSError as exc:
        _fail(f"cannot write keys to {out}: {exc.strerror or exc}")
    typer.echo(f"private key: {private_path} (encrypted PKCS#8, mode 0600)")
    typer.echo(f"public key:  {public_path}")
    typer.echo(f"SM3 fingerprint: {key.public_key.fingerprint()}")


@keys_app.command("sign")
def sign(
    key: Annotated[Path, typer.Option("--key", help="SM2 private key PEM (PKCS#8).")],
    file: Annotated[Path, typer.Argument(help="File to sign.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the DER signature.")],
    distid: DistId = _DEFAULT_DISTID,
) -> None:
    """Sign FILE with SM2-with-SM3; write a DER signature that OpenSSL accepts."""
    pem = _read_limited(key, _MAX_KEY_FILE, "key")
    encrypted = b"ENCRYPTED PRIVATE KEY" in pem
    if not encrypted:
        typer.echo("warning: this private key is not encrypted at rest", err=True)
    try:
        private = SM2PrivateKey.from_pem(
            pem, passphrase=_passphrase(confirm=False) if encrypted else None
        )
        signature = private.sign_file(file, distid=_distid(distid))
    except CryptoError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror}")
    try:
        out.write_bytes(signature)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror or exc}")
    typer.echo(f"signature: {out} ({len(signature)} bytes DER, SM2-with-SM3)")


@keys_app.command("verify")
def verify(
    pub: Annotated[Path, typer.Option("--pub", help="SM2 public key PEM.")],
    file: Annotated[Path, typer.Argument(help="Signed file.")],
    sig: Annotated[Path, typer.Option("--sig", help="DER signature.")],
    distid: DistId = _DEFAULT_DISTID,
) -> None:
    """Verify a DER SM2-with-SM3 signature; exit 0 if valid, 1 otherwise."""
    signature = _read_limited(sig, _MAX_SIG_FILE, "signature")
    try:
        public = SM2PublicKey.from_pem(_read_limited(pub, _MAX_KEY_FILE, "public key"))
        public.verify_file(file, signature, distid=_distid(distid))
    except CryptoError as exc:
        _fail(f"verification failed: {exc}")
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror}")
    typer.echo("Verified OK")


@keys_app.command("fingerprint")
def fingerprint(
    pub: Annotated[Path, typer.Argument(help="SM2 public key PEM.")],
) -> None:
    """Print the SM3 fingerprint (hex) of a public key's DER SubjectPublicKeyInfo."""
    try:
        public = SM2PublicKey.from_pem(_read_limited(pub, _MAX_KEY_FILE, "public key"))
    except CryptoError as exc:
        _fail(str(exc))
    typer.echo(public.fingerprint())

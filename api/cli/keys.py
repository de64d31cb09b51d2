"""``secure-fed keys``: SM2 key management for operators.

``generate`` writes an encrypted PKCS#8 private key (mode 0600) and its public
key; ``sign`` writes a DER SM2-with-SM3 signature that OpenSSL verifies with
``openssl dgst -sm3 -verify PUB -signature SIG -sigopt distid:1234567812345678 FILE``;
``verify`` and ``fingerprint`` check a signature and print a key's SM3
fingerprint. The passphrase comes from ``SECURE_FED_KEY_PASSPHRASE`` (through
:class:`api.settings.Settings`) or, in a terminal, a prompt; without either the
command stops with ``CLI_PASSPHRASE_UNAVAILABLE``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import load_private_key, passphrase, read_limited
from api.cli.core import CliCommand, CliGroup
from api.cli.errors import FileExists, FileUnreadable, OptionInvalid, WriteFailed

keys_app = typer.Typer(help="Generate SM2 keys and sign files.", no_args_is_help=True, cls=CliGroup)

PRIVATE_NAME = "sm2-private.pem"
PUBLIC_NAME = "sm2-public.pem"
_MAX_KEY_FILE = 1 << 16
_MAX_SIG_FILE = 1024
_DEFAULT_DISTID = "1234567812345678"  # crypto.sm.DEFAULT_SM2_ID, the GB/T 35276 default

DistId = Annotated[
    str,
    typer.Option(
        "--distid", metavar="ID", help="SM2 signer ID (ASCII) used in Z; OpenSSL needs it too."
    ),
]


def _distid(text: str) -> bytes:
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        raise OptionInvalid(f"--distid {text!r} must be ASCII") from None


def _write_private(path: Path, pem: bytes, *, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an overwritten file keeps its old mode otherwise
        os.write(fd, pem)
    finally:
        os.close(fd)


@keys_app.command("generate", cls=CliCommand)
def generate(
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for the two PEM files.")
    ],
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing keys.")] = False,
) -> None:
    """Generate an SM2 key pair; print its SM3 fingerprint."""
    from crypto.sm import SM2PrivateKey

    private_path, public_path = out / PRIVATE_NAME, out / PUBLIC_NAME
    existing = [str(p) for p in (private_path, public_path) if p.exists()]
    if existing and not force:
        raise FileExists(f"refusing to overwrite {', '.join(existing)} (use --force)")
    secret = passphrase(confirm=True)
    key = SM2PrivateKey.generate()
    private_pem = key.to_pem(passphrase=secret)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_private(private_path, private_pem, force=force)
        public_path.write_bytes(key.public_key.to_pem())
    except OSError as exc:
        raise WriteFailed(f"cannot write keys to {out}: {exc.strerror or exc}") from None
    typer.echo(f"private key: {private_path} (encrypted PKCS#8, mode 0600)")
    typer.echo(f"public key:  {public_path}")
    typer.echo(f"SM3 fingerprint: {key.public_key.fingerprint()}")


@keys_app.command("sign", cls=CliCommand)
def sign(
    key: Annotated[
        Path, typer.Option("--key", metavar="PEM", help="SM2 private key PEM (PKCS#8).")
    ],
    file: Annotated[Path, typer.Argument(metavar="FILE", help="File to sign.")],
    out: Annotated[
        Path, typer.Option("--out", metavar="SIG", help="Where to write the DER signature.")
    ],
    distid: DistId = _DEFAULT_DISTID,
) -> None:
    """Sign FILE with SM2-with-SM3; write a DER signature that OpenSSL accepts."""
    private = load_private_key(key, limit=_MAX_KEY_FILE)
    try:
        signature = private.sign_file(file, distid=_distid(distid))
    except OSError as exc:
        raise FileUnreadable(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        out.write_bytes(signature)
    except OSError as exc:
        raise WriteFailed(f"cannot write {out}: {exc.strerror or exc}") from None
    typer.echo(f"signature: {out} ({len(signature)} bytes DER, SM2-with-SM3)")


@keys_app.command("verify", cls=CliCommand)
def verify(
    pub: Annotated[Path, typer.Option("--pub", metavar="PEM", help="SM2 public key PEM.")],
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Signed file.")],
    sig: Annotated[Path, typer.Option("--sig", metavar="SIG", help="DER signature.")],
    distid: DistId = _DEFAULT_DISTID,
) -> None:
    """Verify a DER SM2-with-SM3 signature; exit 0 if valid, 1 otherwise."""
    from crypto.sm import SM2PublicKey

    signature = read_limited(sig, _MAX_SIG_FILE, "signature")
    public = SM2PublicKey.from_pem(read_limited(pub, _MAX_KEY_FILE, "public key"))
    try:
        public.verify_file(file, signature, distid=_distid(distid))
    except OSError as exc:
        raise FileUnreadable(f"cannot read {file}: {exc.strerror or exc}") from None
    typer.echo("Verified OK")


@keys_app.command("fingerprint", cls=CliCommand)
def fingerprint(
    pub: Annotated[Path, typer.Argument(metavar="PEM", help="SM2 public key PEM.")],
) -> None:
    """Print the SM3 fingerprint (hex) of a public key's DER SubjectPublicKeyInfo."""
    from crypto.sm import SM2PublicKey

    public = SM2PublicKey.from_pem(read_limited(pub, _MAX_KEY_FILE, "public key"))
    typer.echo(public.fingerprint())

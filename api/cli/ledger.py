r"""``secure-fed ledger``: verify the tamper-evident audit log and export its signed heads.

``verify`` recomputes the Merkle tree from the rows, checks every signed
head and the consistency between consecutive heads, and exits 0, or 1 naming
the first bad entry (2 for usage or configuration errors). ``head`` prints
the newest signed head; ``export-head --out DIR`` writes ``head.txt``,
``head.sig`` and ``pub.pem`` so that an auditor checks it with OpenSSL alone::

    openssl dgst -sm3 -verify pub.pem -signature head.sig \
        -sigopt distid:1234567812345678 head.txt

``checkpoint --signing-key PEM`` signs the entries not yet under a head (the
service normally does it as it appends). ``verify --trusted-head DIR`` also
checks that the log still contains a head exported earlier (a truncation of
entries together with their heads is invisible in the database alone).

The log's public key is read from the database unless ``--public-key`` pins
it; a warning says so, because whoever can write the database could also
replace that key. The database URL comes from ``--db`` or
:meth:`api.settings.Settings.resolved_database_url`.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from api.settings import Settings
from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey
from privacy_ledger.audit.checkpoint import (
    MAX_BODY_BYTES,
    MAX_SIGNATURE_BYTES,
    Checkpoint,
    verify_head,
)
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow, TreeHeadRow
from privacy_ledger.audit.verify.log import stored_public_key, verify_log
from privacy_ledger.db import create_ledger_engine
from privacy_ledger.errors import LedgerError, LogTampered

ledger_app = typer.Typer(help="Verify the audit log and export signed tree heads.",
                         no_args_is_help=True)

OPENSSL_COMMAND = ("openssl dgst -sm3 -verify pub.pem -signature head.sig "
                   "-sigopt distid:1234567812345678 head.txt")
_MAX_PEM = 1 << 14

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Ledger database URL (default: SECURE_FED_DATABASE_URL or "
                 "the SQLite file in the work directory)."),
]
KeyOption = Annotated[
    Path | None,
    typer.Option("--public-key", help="Pin the log's SM2 public key (PEM) obtained out of band."),
]


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _engine(db: str | None) -> Engine:
    if db is None:
        try:
            db = Settings().resolved_database_url()
        except ValidationError as exc:
            _fail(f"invalid settings: {exc.errors()[0]['msg']}")
    if db.startswith("sqlite:///") and not Path(db.removeprefix("sqlite:///")).is_file():
        _fail(f"no ledger database at {db}")
    try:
        return create_ledger_engine(db)
    except LedgerError as exc:
        _fail(str(exc))


def _public_key(engine: Engine, pinned: Path | None) -> SM2PublicKey:
    if pinned is not None:
        try:
            with pinned.open("rb") as handle:
                pem = handle.read(_MAX_PEM + 1)
            if len(pem) > _MAX_PEM:
                _fail(f"{pinned} is larger than {_MAX_PEM} bytes")
            return SM2PublicKey.from_pem(pem)
        except OSError as exc:
            _fail(f"cannot read {pinned}: {exc.strerror}")
        except CryptoError as exc:
            _fail(f"{pinned}: {exc}")
    key = stored_public_key(engine)
    if key is None:
        _fail("the audit log has no entries and no key yet; pass --public-key")
    typer.echo(
        f"warning: using the public key stored in the database ({key.fingerprint()[:16]}...); "
        "pin the operator's key with --public-key: a database attacker could swap it",
        err=True,
    )
    return key


def _read(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}")
    if len(data) > limit:
        _fail(f"{path} is larger than {limit} bytes")
    return data


def _trusted(directory: Path | None, key: SM2PublicKey) -> Checkpoint | None:
    if directory is None:
        return None
    body = _read(directory / "head.txt", MAX_BODY_BYTES)
    signature = _read(directory / "head.sig", MAX_SIGNATURE_BYTES)
    try:
        return verify_head(body, signature, key)
    except LedgerError as exc:
        _fail(f"--trusted-head {directory}: {exc}")


@ledger_app.command("verify")
def verify(
    db: DbOption = None,
    public_key: KeyOption = None,
    trusted_head: Annotated[Path | None, typer.Option(
        "--trusted-head", help="Directory with head.txt/head.sig accepted earlier (export-head); "
        "the log must still contain that head.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Recompute the tree, check every signed head; exit 1 naming the first bad entry."""
    engine = _engine(db)
    try:
        key = _public_key(engine, public_key)
        trusted = _trusted(trusted_head, key)
        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("verifying audit log", total=None)
            report = verify_log(
                engine, public_key=key, trusted=trusted,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except LogTampered as exc:
        where = f"first bad entry: {exc.entry_index}" if exc.entry_index is not None else (
            f"bad signed head: size {exc.tree_size}")
        typer.echo(f"TAMPERED: {exc}\n{where}", err=True)
        raise typer.Exit(1) from None
    except LedgerError as exc:
        _fail(str(exc), 1)
    finally:
        engine.dispose()
    summary = {
        "origin": report.origin, "size": report.tree_size, "root": report.root_hash.hex(),
        "heads_checked": report.heads_checked, "latest_head_size": report.latest_head_size,
        "unsigned_entries": report.unsigned_entries, "key_fingerprint": report.key_fingerprint,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"OK: {report.tree_size} entries, root {report.root_hash.hex()}")
    typer.echo(f"{report.heads_checked} signed heads checked (latest size "
               f"{report.latest_head_size}, {report.unsigned_entries} entries not yet signed)")


def _latest(engine: Engine, key: SM2PublicKey) -> TreeHeadRow:
    with Session(engine) as session:
        try:
            row = session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq.desc())).first()
        except Exception as exc:  # noqa: BLE001 - missing tables, translated for the operator
            _fail(f"cannot read tree_heads ({type(exc).__name__}); run the migrations")
    if row is None:
        _fail("the audit log has no signed head yet")
    try:
        verify_head(row.body, row.signature, key)
    except LedgerError as exc:
        _fail(f"newest head (size {row.tree_size}) does not verify: {exc}", 1)
    return row


@ledger_app.command("head")
def head(db: DbOption = None, public_key: KeyOption = None) -> None:
    """Print the newest signed tree head (checkpoint body and DER signature, base64)."""
    engine = _engine(db)
    try:
        key = _public_key(engine, public_key)
        row = _latest(engine, key)
    finally:
        engine.dispose()
    typer.echo(row.body.decode("utf-8"), nl=False)
    typer.echo(f"\nsignature (DER, base64): {base64.b64encode(row.signature).decode('ascii')}")
    typer.echo(f"key fingerprint (SM3 of SPKI): {key.fingerprint()}")


@ledger_app.command("export-head")
def export_head(
    out: Annotated[Path, typer.Option("--out", help="Directory for head.txt, head.sig, pub.pem.")],
    db: DbOption = None,
    public_key: KeyOption = None,
) -> None:
    """Write the newest signed head for an OpenSSL-only check."""
    engine = _engine(db)
    try:
        key = _public_key(engine, public_key)
        row = _latest(engine, key)
    finally:
        engine.dispose()
    out.mkdir(parents=True, exist_ok=True)
    (out / "head.txt").write_bytes(row.body)
    (out / "head.sig").write_bytes(row.signature)
    (out / "pub.pem").write_bytes(key.to_pem())
    typer.echo(f"wrote head of size {row.tree_size} to {out}; check it with:\n"
               f"  cd {out} && {OPENSSL_COMMAND}")


def _signing_key(path: Path) -> SM2PrivateKey:
    pem = _read(path, _MAX_PEM)
    passphrase: bytes | None = None
    if b"ENCRYPTED PRIVATE KEY" in pem:
        try:
            configured = Settings().key_passphrase
        except ValidationError as exc:
            _fail(f"invalid settings: {exc.errors()[0]['msg']}")
        if configured is not None:
            passphrase = configured.get_secret_value().encode("utf-8")
        else:
            passphrase = str(typer.prompt("Key passphrase", hide_input=True)).encode("utf-8")
    else:
        typer.echo("warning: this signing key is not encrypted at rest", err=True)
    try:
        return SM2PrivateKey.from_pem(pem, passphrase=passphrase)
    except CryptoError as exc:
        _fail(f"{path}: {exc}")


@ledger_app.command("checkpoint")
def checkpoint(
    signing_key: Annotated[Path, typer.Option(
        "--signing-key", help="The log's SM2 private key (PKCS#8 PEM, from 'secure-fed keys "
        "generate'); passphrase from SECURE_FED_KEY_PASSPHRASE or a prompt.")],
    db: DbOption = None,
) -> None:
    """Sign a head over the entries not yet signed (after the same consistency checks)."""
    key = _signing_key(signing_key)
    engine = _engine(db)
    try:
        origin = _stored_origin(engine)
        log = AuditLog(signer=key, origin=origin)
        with Session(engine) as session:
            head = log.checkpoint(session, force=True)
            session.commit()
    except LedgerError as exc:
        _fail(str(exc), 1)
    finally:
        engine.dispose()
    if head is None:
        typer.echo("nothing to sign: every entry is under a signed head")
        return
    typer.echo(f"signed head of size {head.tree_size}, root {head.root_hash.hex()}")


def _stored_origin(engine: Engine) -> str:
    with Session(engine) as session:
        try:
            state = session.get(LogStateRow, LOG_STATE_ID)
        except Exception as exc:  # noqa: BLE001 - missing tables, translated for the operator
            _fail(f"cannot read log_state ({type(exc).__name__}); run the migrations")
    if state is None or state.origin is None:
        _fail("the audit log has no entries yet")
    return state.origin

r"""``secure-fed ledger``: verify the tamper-evident audit log and export its signed heads.

``verify`` recomputes the Merkle tree from the rows, checks every signed
head and the consistency between consecutive heads, then that every stored
budget (limit, delta, accountant) is what its newest ``budget.set`` entry
records, and exits 0, or 1 naming the first bad entry or each unaudited budget
(``LEDGER_BUDGET_UNAUDITED``; 2 for usage or configuration errors). ``head`` prints
the newest signed head; ``export-head --out DIR`` writes ``head.txt``,
``head.sig`` and ``pub.pem`` so that an auditor checks it with OpenSSL alone::

    openssl dgst -sm3 -verify pub.pem -signature head.sig \
        -sigopt distid:1234567812345678 head.txt

``checkpoint --signing-key PEM`` signs the entries not yet under a head (the
service normally does it as it appends) and renews the ledger seal; on a ledger
written before ledger seals it records every stored row as the baseline.
``verify`` also checks the ledger seal (:mod:`privacy_ledger.audit.verify.rows`):
``log_state`` as signed, and every row of the rounds, uploads, budgets,
reservations, participants, assets and decryption tables against its row record,
exiting 1 with ``LEDGER_ROW_ALTERED`` (table, row key, column), ``LEDGER_ROW_DELETED``,
``LEDGER_ROW_UNRECORDED``, ``LEDGER_STATE_TAMPERED`` or ``LEDGER_NOT_SEALED``
(``--allow-unsealed`` accepts an old ledger with a NOT COVERED line per table).
``verify --trusted-head DIR`` also checks that the log still contains a head
exported earlier (a rollback of the whole database to an earlier sealed moment is
invisible in the database alone).
``verify --recompute --public-context FILE`` then recomputes every CKKS
decryption the key authority served from the stored uploads
(:mod:`api.cli.recompute`) and exits 1 naming each mismatch. For a deployment,
``--authority-db URL`` names the key authority's own audit log (verified too;
default ``keyauthority/audit.db`` beside a SQLite ``--db`` file, where
``secure-fed deploy local`` puts it) and ``--keys DIR`` the folder of its public
manifest ``party.json`` (default: the public context's folder, when it holds one).

The log's public key is read from the database unless ``--public-key`` pins
it; a warning says so, because whoever can write the database could also
replace that key. The database URL comes from ``--db`` or
:meth:`api.settings.Settings.resolved_database_url`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.common import DB_HELP, load_private_key, open_engine, read_limited
from api.cli.core import CliCommand, CliGroup
from api.cli.errors import (
    AuditLogEmpty,
    OptionInvalid,
    RecomputeMismatch,
    TrustedHeadInvalid,
    WriteFailed,
)

if TYPE_CHECKING:  # the ledger and crypto modules are imported where used (fast --help)
    from sqlalchemy import Engine

    from crypto.sm import SM2PublicKey
    from privacy_ledger.audit.checkpoint import Checkpoint
    from privacy_ledger.audit.models import TreeHeadRow
    from privacy_ledger.audit.verify.log import VerificationReport
    from secure_fed.deploy.keys import KeyManifest

ledger_app = typer.Typer(
    help="Verify the audit log (verify, head, export-head) and sign new heads (checkpoint).",
    no_args_is_help=True,
    cls=CliGroup,
)

OPENSSL_COMMAND = (
    "openssl dgst -sm3 -verify pub.pem -signature head.sig -sigopt distid:1234567812345678 head.txt"
)
_MAX_PEM = 1 << 14

DbOption = Annotated[str | None, typer.Option("--db", metavar="URL", help=DB_HELP)]
KeyOption = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        metavar="PEM",
        help="Pin the log's SM2 public key (PEM) obtained out of band.",
    ),
]


@contextmanager
def _opened(db: str | None) -> Iterator[Engine]:
    """Yield a read-only engine on an existing ledger (never creates one); dispose after."""
    engine = open_engine(db, writable=False)
    try:
        yield engine
    finally:
        engine.dispose()


def _public_key(engine: Engine, pinned: Path | None) -> SM2PublicKey:
    from crypto.sm import SM2PublicKey
    from privacy_ledger.audit.verify.log import stored_public_key

    if pinned is not None:
        return SM2PublicKey.from_pem(read_limited(pinned, _MAX_PEM, "public key"))
    key = stored_public_key(engine)
    if key is None:
        raise AuditLogEmpty("the audit log of this database has no entries and no key yet")
    typer.echo(
        f"warning: using the public key stored in the database ({key.fingerprint()[:16]}...); "
        "pin the operator's key with --public-key: a database attacker could swap it",
        err=True,
    )
    return key


def _trusted(directory: Path | None, key: SM2PublicKey) -> Checkpoint | None:
    from privacy_ledger.audit.checkpoint import MAX_BODY_BYTES, MAX_SIGNATURE_BYTES, verify_head
    from privacy_ledger.errors import LedgerError

    if directory is None:
        return None
    body = read_limited(directory / "head.txt", MAX_BODY_BYTES, "trusted head")
    signature = read_limited(directory / "head.sig", MAX_SIGNATURE_BYTES, "trusted signature")
    try:
        return verify_head(body, signature, key)
    except LedgerError as exc:
        raise TrustedHeadInvalid(f"--trusted-head {directory}: {exc}") from None


def _verify(
    engine: Engine, key: SM2PublicKey, trusted: Checkpoint | None, *, allow_unsealed: bool = False
) -> VerificationReport:
    """Verify the log with a progress bar; print TAMPERED and exit 1 on a bad entry or head."""
    from rich.console import Console
    from rich.progress import Progress

    from privacy_ledger.audit.verify.log import verify_log
    from privacy_ledger.errors import LogTampered

    try:
        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("verifying audit log", total=None)
            return verify_log(
                engine,
                public_key=key,
                trusted=trusted,
                allow_unsealed=allow_unsealed,
                compare_rows=False,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except LogTampered as exc:
        where = (
            f"first bad entry: {exc.entry_index}"
            if exc.entry_index is not None
            else f"bad signed head: size {exc.tree_size}"
        )
        typer.echo(f"TAMPERED: {exc}\n{where}", err=True)
        raise typer.Exit(1) from None


@ledger_app.command("verify", cls=CliCommand)
def verify(
    db: DbOption = None,
    public_key: KeyOption = None,
    trusted_head: Annotated[
        Path | None,
        typer.Option(
            "--trusted-head",
            metavar="DIR",
            help="Directory with head.txt/head.sig accepted "
            "earlier (export-head); the log must still contain that head.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    allow_unsealed: Annotated[
        bool,
        typer.Option(
            "--allow-unsealed",
            help="Accept a ledger written before ledger seals, printing a NOT COVERED line "
            "for each table and log_state (default: refused, LEDGER_NOT_SEALED).",
        ),
    ] = False,
    recompute: Annotated[
        bool,
        typer.Option(
            "--recompute",
            help="Also recompute every CKKS decryption from the stored uploads "
            "(needs --public-context); exit 1 naming each mismatch.",
        ),
    ] = False,
    public_context: Annotated[
        Path | None,
        typer.Option(
            "--public-context",
            metavar="FILE",
            help="The CKKS public context (its SM3 must be a key.generated fingerprint).",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", metavar="NAME", help="The federation's round namespace."),
    ] = None,
    authority_db: Annotated[
        str | None,
        typer.Option(
            "--authority-db",
            metavar="URL",
            help="A deployment's key authority audit log, for --recompute (default: "
            "keyauthority/audit.db beside a SQLite --db file, if there).",
        ),
    ] = None,
    keys: Annotated[
        Path | None,
        typer.Option(
            "--keys",
            metavar="DIR",
            help="A deployment's key folder with party.json, for --recompute (default: "
            "the --public-context file's folder, if it holds one).",
        ),
    ] = None,
) -> None:
    """Recompute the tree, check every signed head; exit 1 naming the first bad entry."""
    if recompute and public_context is None:
        raise OptionInvalid("--recompute needs --public-context FILE")
    from api.cli.recompute import authority_log_url, deployment_manifest

    with _opened(db) as engine:
        key = _public_key(engine, public_key)
        report = _verify(engine, key, _trusted(trusted_head, key), allow_unsealed=allow_unsealed)
        for line in report.not_covered:
            typer.echo(line, err=True)
        rows, row_fault = _compare_rows(engine)
        budgets = _check_budgets(engine)
        if recompute and public_context is not None:
            source = _Recompute(
                context=public_context,
                namespace=namespace,
                authority_db=authority_log_url(engine, authority_db),
                manifest=deployment_manifest(keys, public_context),
            )
            source.run(engine)
        if row_fault is not None:  # after the budgets and the recomputation have named theirs
            raise row_fault
    summary = {
        "origin": report.origin,
        "size": report.tree_size,
        "root": report.root_hash.hex(),
        "heads_checked": report.heads_checked,
        "latest_head_size": report.latest_head_size,
        "unsigned_entries": report.unsigned_entries,
        "key_fingerprint": report.key_fingerprint,
        "budgets_checked": budgets,
        "sealed": report.sealed,
        "row_records": report.row_records,
        "rows_checked": rows,
        "not_covered": list(report.not_covered),
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"OK: {report.tree_size} entries, root {report.root_hash.hex()}")
    typer.echo(
        f"{report.heads_checked} signed heads checked (latest size "
        f"{report.latest_head_size}, {report.unsigned_entries} entries not yet signed)"
    )
    typer.echo(f"{budgets} budgets: limit, delta and accountant as the audit log records them")
    if report.sealed:
        typer.echo(
            f"ledger seal verified: {rows} rows of the covered tables match "
            f"their {report.row_records} row records"
        )


def _compare_rows(engine: Engine) -> tuple[int, Exception | None]:
    """Compare the covered tables with the row log; print a finding (raised after budgets)."""
    from privacy_ledger.audit.verify.rows import compare_rows
    from privacy_ledger.errors import LedgerSealError

    try:
        return compare_rows(engine), None
    except LedgerSealError as exc:
        typer.echo(f"TAMPERED: {exc}", err=True)
        return 0, exc


def _check_budgets(engine: Engine) -> int:
    """Compare every stored budget with its newest ``budget.set`` entry; print each mismatch.

    Raises
    ------
    BudgetUnaudited
        ``LEDGER_BUDGET_UNAUDITED`` (exit 1) when any budget item differs.
    """
    from privacy_ledger.audit.verify.budgets import budget_disagreements, check_budget_limits

    for d in budget_disagreements(engine):
        typer.echo(f"UNAUDITED: budget {d}", err=True)
    return check_budget_limits(engine)


@dataclass(frozen=True, kw_only=True)
class _Recompute:
    """What ``--recompute`` reads besides the ledger: the context, and a deployment's log."""

    context: Path
    namespace: str | None
    authority_db: str | None
    manifest: KeyManifest | None

    def run(self, engine: Engine) -> None:
        """Verify the key authority's log (if any), then recompute (see :func:`_recompute`)."""
        if self.authority_db is None:
            _recompute(engine, self, None)
            return
        typer.echo(f"the key authority's audit log: {self.authority_db}", err=True)
        with _opened(self.authority_db) as authority:
            report = _verify(authority, _public_key(authority, None), None)
            typer.echo(f"OK: the key authority's log, {report.tree_size} entries", err=True)
            _recompute(engine, self, authority)


def _recompute(engine: Engine, source: _Recompute, authority: Engine | None) -> None:
    """Recompute the CKKS decryptions; print each finding, raise on any (after the log check)."""
    from api.cli.recompute import recompute_ledger

    result = recompute_ledger(
        engine,
        source.context,
        source.namespace,
        authority=authority,
        manifest=source.manifest,
    )
    for f in result.findings:
        typer.echo(
            f"MISMATCH: round {f.round_id}, purpose {f.purpose}, request {f.request_sm3}: "
            f"{f.problem}",
            err=True,
        )
    if result.findings:
        raise RecomputeMismatch(
            f"{len(result.findings)} of {result.requests} decryption requests do not recompute"
        )
    typer.echo(f"recomputed {result.requests} CKKS decryption requests: all match", err=True)


def _latest(engine: Engine, key: SM2PublicKey) -> TreeHeadRow:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from privacy_ledger.audit.checkpoint import verify_head
    from privacy_ledger.audit.models import TreeHeadRow
    from privacy_ledger.errors import HeadTampered, LedgerError

    with Session(engine) as session:
        row = session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq.desc())).first()
    if row is None:
        raise AuditLogEmpty("the audit log has no signed head yet")
    try:
        verify_head(row.body, row.signature, key)
    except LedgerError as exc:
        raise HeadTampered(
            f"newest head (size {row.tree_size}) does not verify: {exc.message}",
            tree_size=row.tree_size,
        ) from None
    return row


@ledger_app.command("head", cls=CliCommand)
def head(db: DbOption = None, public_key: KeyOption = None) -> None:
    """Print the newest signed tree head (checkpoint body and DER signature, base64)."""
    with _opened(db) as engine:
        key = _public_key(engine, public_key)
        row = _latest(engine, key)
    typer.echo(row.body.decode("utf-8"), nl=False)
    typer.echo(f"\nsignature (DER, base64): {base64.b64encode(row.signature).decode('ascii')}")
    typer.echo(f"key fingerprint (SM3 of SPKI): {key.fingerprint()}")


@ledger_app.command("export-head", cls=CliCommand)
def export_head(
    out: Annotated[
        Path,
        typer.Option("--out", metavar="DIR", help="Directory for head.txt, head.sig, pub.pem."),
    ],
    db: DbOption = None,
    public_key: KeyOption = None,
) -> None:
    """Write the newest signed head for an OpenSSL-only check."""
    with _opened(db) as engine:
        key = _public_key(engine, public_key)
        row = _latest(engine, key)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "head.txt").write_bytes(row.body)
        (out / "head.sig").write_bytes(row.signature)
        (out / "pub.pem").write_bytes(key.to_pem())
    except OSError as exc:
        raise WriteFailed(f"cannot write the head to {out}: {exc.strerror or exc}") from None
    typer.echo(
        f"wrote head of size {row.tree_size} to {out}; check it with:\n"
        f"  cd {out} && {OPENSSL_COMMAND}"
    )


@ledger_app.command("checkpoint", cls=CliCommand)
def checkpoint(
    signing_key: Annotated[
        Path,
        typer.Option(
            "--signing-key",
            metavar="PEM",
            help="The log's SM2 private key (PKCS#8 PEM, from "
            "'secure-fed keys generate'); passphrase from SECURE_FED_KEY_PASSPHRASE or a prompt.",
        ),
    ],
    db: DbOption = None,
) -> None:
    """Sign a head over the entries not yet signed and renew the ledger seal."""
    from sqlalchemy.orm import Session

    from privacy_ledger.audit.log import AuditLog

    key = load_private_key(signing_key, limit=_MAX_PEM)
    with _opened(db) as engine:
        log = AuditLog(signer=key, origin=_stored_origin(engine))
        with Session(engine) as session:
            signed = log.checkpoint(session, force=True)
            log.seal(session)  # a ledger written before ledger seals gets its first one
            session.commit()
    if signed is None:
        typer.echo("nothing to sign: every entry is under a signed head")
        return
    typer.echo(f"signed head of size {signed.tree_size}, root {signed.root_hash.hex()}")


def _stored_origin(engine: Engine) -> str:
    from sqlalchemy.orm import Session

    from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow

    with Session(engine) as session:
        state = session.get(LogStateRow, LOG_STATE_ID)
    if state is None or state.origin is None:
        raise AuditLogEmpty("the audit log has no entries yet: nothing to sign")
    return state.origin

"""``secure-fed audit``: compliance reports, their offline verification, the pre-launch checklist.

``export`` verifies the ledger's audit log and writes a report as a signed
JSON bundle (``--format json``, needs ``--signing-key``), HTML or PDF;
``verify BUNDLE`` checks a bundle offline with no database and exits 1
listing every failed check; ``checklist`` evaluates the pre-launch checklist
and exits 1 when a required item fails. The work is done by the
:mod:`compliance` package, imported inside each command so ``secure-fed
--help`` stays fast.
"""

from __future__ import annotations

import getpass
import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from api.cli.core import CliCommand, CliGroup
from api.cli.errors import CrossCheckMismatch

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from compliance.parties import PartySource
    from crypto.sm import SM2PublicKey

audit_app = typer.Typer(
    cls=CliGroup,
    help="Export audit reports (json bundle, html, pdf), verify bundles offline, run the "
    "pre-launch checklist.",
    no_args_is_help=True,
)

_MAX_PEM = 1 << 16
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Ledger database URL (default: "
        "SECURE_FED_DATABASE_URL, else ledger.db in the work directory).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def _public_key(path: Path | None) -> SM2PublicKey | None:
    if path is None:
        return None
    from api.cli.common import read_limited
    from crypto.sm import SM2PublicKey

    return SM2PublicKey.from_pem(read_limited(path, _MAX_PEM, "public key"))


def _who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


@audit_app.command("export", cls=CliCommand)
def export(
    fmt: Annotated[str, typer.Option("--format", help="json (signed bundle), html or pdf.")],
    out: Annotated[Path, typer.Option("--out", help="Output file.")],
    participant: Annotated[
        str | None, typer.Option("--participant", help="Report on this participant only.")
    ] = None,
    start: Annotated[
        str | None,
        typer.Option(
            "--from", help="Period start: YYYY-MM-DD (UTC) or an ISO date-time with zone."
        ),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option(
            "--to", help="Period end: YYYY-MM-DD (that whole day) or an exclusive date-time."
        ),
    ] = None,
    db: DbOption = None,
    signing_key: Annotated[
        Path | None,
        typer.Option(
            "--signing-key",
            help="SM2 private key (PKCS#8 PEM) that signs the report; required "
            "for json. Passphrase from SECURE_FED_KEY_PASSPHRASE or a prompt.",
        ),
    ] = None,
    log_public_key: Annotated[
        Path | None,
        typer.Option(
            "--log-public-key",
            help="Pin the audit log's SM2 public key (PEM) obtained out of "
            "band (else the database's copy is used and the report says so).",
        ),
    ] = None,
    produced_by: Annotated[
        str | None,
        typer.Option("--produced-by", help="Who produces the report (default: user@host)."),
    ] = None,
    max_rows: Annotated[
        int,
        typer.Option("--max-rows", help="Rows shown per table in html/pdf (the bundle has all)."),
    ] = 1000,
    party_logs: Annotated[
        Path | None,
        typer.Option(
            "--party-logs",
            metavar="DIR",
            help="Deployment folder holding the key authority's (and helper's) audit logs "
            "(default: the 'deploy local' folder the --db SQLite file lies in).",
        ),
    ] = None,
    no_party_logs: Annotated[
        bool, typer.Option("--no-party-logs", help="Report on the ledger's own log only.")
    ] = False,
) -> None:
    """Verify the audit log and write a report for a participant and period."""
    from rich.console import Console

    from api.cli.common import load_private_key, open_engine
    from compliance import Scope, export_report, parse_bound

    scope = Scope(
        participant=participant,
        start=None if start is None else parse_bound(start, name="--from", end=False),
        end=None if end is None else parse_bound(end, name="--to", end=True),
    )
    key = None if signing_key is None else load_private_key(signing_key)
    pinned = _public_key(log_public_key)
    engine = open_engine(db, writable=False)
    sources, origin = _party_sources(engine, party_logs, no_party_logs)
    try:
        with Console(stderr=True).status(f"verifying the audit log and writing the {fmt} report"):
            result = export_report(
                engine,
                fmt=fmt,
                out=out,
                scope=scope,
                signing_key=key,
                log_public_key=pinned,
                produced_by=produced_by or _who(),
                max_rows=max_rows,
                party_logs=sources,
                party_logs_from=origin,
            )
    finally:
        engine.dispose()
    cited = result.meta["cited"]
    typer.echo(
        f"wrote {fmt} report {out}: {cited['entries']} audit entries cited under the "
        f"signed head of size {cited['head_size']}"
    )
    if fmt == "json":
        typer.echo(
            f"verify it offline with: secure-fed audit verify {out} --public-key "
            "REPORT-PUB.pem --log-public-key LOG-PUB.pem"
        )
    included = ", ".join(result.meta["federation"]["party_logs"]["included"]) or "none"
    typer.echo(f"party audit logs included: {included} (from {origin})")
    _refuse_disagreements(result.disagreements, result.party_disagreements)


def _party_sources(
    engine: Engine, folder: Path | None, off: bool
) -> tuple[tuple[PartySource, ...], str]:
    """Return the party logs to read and where they came from (as the report says it)."""
    from compliance.parties import discover_run_folder, run_folder_sources

    if off:
        return (), "none (--no-party-logs)"
    if folder is None:
        folder = discover_run_folder(database_url=engine.url.render_as_string(False))
        if folder is None:
            return (), "none found (not a 'deploy local' ledger; pass --party-logs DIR)"
        return run_folder_sources(folder), f"the deployment folder of the ledger, {folder}"
    return run_folder_sources(folder), f"--party-logs {folder}"


def _refuse_disagreements(
    rows: tuple[dict[str, Any], ...], party_rows: tuple[dict[str, Any], ...] = ()
) -> None:
    """Print every cross-check row that disagrees and exit 1 (the report stays written)."""
    for r in rows:
        typer.echo(
            f"MISMATCH: {r['participant']}/{r['asset']} {r['item']}: audit log "
            f"{r['audit_log']}, ledger tables {r['ledger_tables']}",
            err=True,
        )
    for r in party_rows:
        typer.echo(f"MISMATCH: round {r['round']} {r['rule']}: {r['detail']}", err=True)
    if rows or party_rows:
        hint = None
        if party_rows:
            hint = (
                "the report was written and shows the rows: a party log is missing or does not "
                "verify, or the party logs and the ledger record different decryptions; see "
                "docs/compliance.md, 'Every party's log', and run 'secure-fed ledger verify' "
                "on the party's audit database"
            )
        raise CrossCheckMismatch(
            f"{len(rows) + len(party_rows)} cross-check row(s) disagree: the ledger tables, "
            "the audit log and the party logs do not record the same",
            hint=hint,
        )


@audit_app.command("verify", cls=CliCommand)
def verify(
    bundle: Annotated[Path, typer.Argument(help="The signed JSON bundle.")],
    public_key: Annotated[
        Path | None,
        typer.Option("--public-key", help="Pin the report signer's SM2 public key (PEM)."),
    ] = None,
    log_public_key: Annotated[
        Path | None,
        typer.Option("--log-public-key", help="Pin the audit log's SM2 public key (PEM)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Check a bundle offline (no database); exit 1 naming every failed check."""
    from compliance import BundleInvalid, verify_bundle

    signer, log_key = _public_key(public_key), _public_key(log_public_key)
    try:
        report = verify_bundle(bundle, public_key=signer, log_public_key=log_key)
    except BundleInvalid as exc:
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "ok": False,
                        "failures": [{"code": f.code, "message": f.message} for f in exc.failures],
                    },
                    indent=2,
                )
            )
        for failure in exc.failures:
            typer.echo(f"FAILED [{failure.code}] {failure.message}", err=True)
        raise typer.Exit(1) from None
    for warning in report.warnings:
        typer.echo(f"warning: {warning}", err=True)
    summary = {
        "ok": True,
        "entries": report.entries,
        "runs": report.runs,
        "cited_head_size": report.cited_head_size,
        "newest_head_size": report.newest_head_size,
        "log_key_fingerprint": report.log_key_fingerprint,
        "signer_fingerprint": report.signer_fingerprint,
        "scope": report.meta["scope"],
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(
        f"OK: report signature, {report.entries} cited entries ({report.runs} inclusion "
        f"proofs), heads of size {report.cited_head_size} and {report.newest_head_size} "
        "and every log-backed section verify"
    )


def _checklist_engine(db: str | None, config_url: str | None) -> Engine | None:
    from api.cli.common import open_engine
    from api.cli.errors import DatabaseMissing

    try:
        return open_engine(db or config_url, writable=False)
    except DatabaseMissing as exc:
        typer.echo(f"warning: {exc.message}; items that need the ledger fail", err=True)
        return None


@audit_app.command("checklist", cls=CliCommand)
def checklist(
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Deployment description (TOML, see docs/compliance.md)."),
    ] = None,
    db: DbOption = None,
    as_json: AsJson = False,
) -> None:
    """Evaluate the pre-launch checklist; exit 1 when a required item fails."""
    from compliance.checklist import load_config, run_checklist

    settings = load_config(config)
    engine = _checklist_engine(db, settings.get("database", "url"))
    try:
        result = run_checklist(settings, engine)
    finally:
        if engine is not None:
            engine.dispose()
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        for e in result.entries:
            need = "required" if e.required else "advisory"
            typer.echo(f"{e.status.upper():6} {e.id} ({need}): {e.reason}")
        typer.echo(
            "launch blocked: a required item fails" if not result.ok else "no required item fails"
        )
    if not result.ok:
        raise typer.Exit(1)

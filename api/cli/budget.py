"""``secure-fed budget`` (and ``secure-fed ledger``): privacy-ledger commands.

``budget show`` prints a participant's limit, spent, reserved and remaining
epsilon and the epsilon after each committed round (a rich table, or JSON
with decimals as strings); ``budget set`` lets an operator create or change a
budget; with ``--audit-key`` (the log's SM2 signing key) the change is written
to the tamper-evident audit log in the same transaction, otherwise a warning
says it was not audited (production refuses that). The database URL comes
from ``--db`` or :meth:`api.settings.Settings.resolved_database_url`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from api.settings import Settings
from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog, BudgetStatus, LedgerError, PrivacyLedger
from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow

budget_app = typer.Typer(help="Show and set epsilon budgets.", no_args_is_help=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Ledger database URL (default: SECURE_FED_DATABASE_URL or "
                 "a SQLite file in the work directory)."),
]
ParticipantOption = Annotated[str, typer.Option("--participant", help="Participant id.")]


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


_MAX_PEM = 1 << 16


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        _fail(f"invalid settings: {exc.errors()[0]['msg']}", 2)


def _open(db: str | None) -> PrivacyLedger:
    if db is None:
        db = _settings().resolved_database_url()
        if db.startswith("sqlite:///"):
            Path(db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        return PrivacyLedger.from_url(db)
    except LedgerError as exc:
        _fail(str(exc), 2)


def _signing_key(path: Path) -> SM2PrivateKey:
    try:
        with path.open("rb") as handle:
            pem = handle.read(_MAX_PEM + 1)
    except OSError as exc:
        _fail(f"cannot read audit key {path}: {exc.strerror}", 2)
    if len(pem) > _MAX_PEM:
        _fail(f"audit key {path} is larger than {_MAX_PEM} bytes", 2)
    passphrase: bytes | None = None
    if b"ENCRYPTED PRIVATE KEY" in pem:
        configured = _settings().key_passphrase
        text = (configured.get_secret_value() if configured is not None
                else str(typer.prompt("Key passphrase", hide_input=True)))
        passphrase = text.encode("utf-8")
    try:
        return SM2PrivateKey.from_pem(pem, passphrase=passphrase)
    except CryptoError as exc:
        _fail(f"audit key {path}: {exc}", 2)


def _audited(ledger: PrivacyLedger, key_path: Path | None, origin: str | None) -> PrivacyLedger:
    """Return ``ledger`` writing to the audit log whose key is at ``key_path``."""
    if key_path is None:
        if _settings().environment == "production":
            _fail("production refuses unaudited budget changes: pass --audit-key", 2)
        typer.echo("warning: budget change not audited (no --audit-key)", err=True)
        return ledger
    key = _signing_key(key_path)
    with ledger.engine.connect() as conn:
        state = conn.execute(select(LogStateRow.origin).where(
            LogStateRow.id == LOG_STATE_ID)).scalar_one_or_none()
    origin = state or origin
    if origin is None:
        _fail("the audit log has no entries yet: pass --audit-origin to name it", 2)
    try:
        log = AuditLog(signer=key, origin=origin)
    except LedgerError as exc:
        _fail(str(exc), 2)
    return PrivacyLedger(ledger.engine, audit=log)


def _status_json(status: BudgetStatus) -> dict[str, object]:
    return {
        "participant": status.participant_id, "asset": status.asset_id,
        "accountant": status.accountant, "delta": repr(status.delta),
        "limit": str(status.limit), "spent": str(status.spent),
        "reserved": str(status.reserved), "remaining": str(status.remaining),
        "active_reservations": status.active_reservations,
        "per_round": [{"round": r, "epsilon_after": str(e)} for r, e in status.per_round],
    }


def _print_table(console: Console, status: BudgetStatus) -> None:
    table = Table(title=f"Budget {status.participant_id} / {status.asset_id} "
                  f"({status.accountant}, delta={status.delta!r})")
    for column in ("limit", "spent", "reserved", "remaining"):
        table.add_column(column, justify="right")
    table.add_row(*(str(v) for v in (status.limit, status.spent, status.reserved,
                                     status.remaining)))
    console.print(table)
    if status.per_round:
        rounds = Table(title="Epsilon after each round (whole-history accounting)")
        rounds.add_column("round")
        rounds.add_column("epsilon after", justify="right")
        for round_id, eps in status.per_round:
            rounds.add_row("-" if round_id is None else round_id, str(eps))
        console.print(rounds)


@budget_app.command("show")
def show(
    participant: ParticipantOption,
    asset: Annotated[str | None, typer.Option("--asset", help="One data asset.")] = None,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print limit, spent, reserved, remaining and per-round epsilon."""
    ledger = _open(db)
    try:
        assets = [asset] if asset is not None else ledger.budget_assets(participant)
        if not assets:
            _fail(f"participant {participant!r} has no budget")
        statuses = [ledger.budget_status(participant, a) for a in assets]
    except LedgerError as exc:
        _fail(str(exc))
    finally:
        ledger.engine.dispose()
    if as_json:
        typer.echo(json.dumps([_status_json(s) for s in statuses], indent=2))
        return
    console = Console()
    for status in statuses:
        _print_table(console, status)


@budget_app.command("set")
def set_budget(
    participant: ParticipantOption,
    asset: Annotated[str, typer.Option("--asset", help="Data asset id.")],
    epsilon: Annotated[str, typer.Option("--epsilon", help="Epsilon limit (exact decimal).")],
    delta: Annotated[float, typer.Option("--delta", help="Target delta, in (0, 1).")] = 1e-5,
    accountant: Annotated[str, typer.Option("--accountant", help="rdp or prv.")] = "rdp",
    institution: Annotated[str | None, typer.Option(
        "--institution", help="Register the participant with this name first.")] = None,
    kind: Annotated[str, typer.Option("--kind", help="hospital, bank or other.")] = "other",
    audit_key: Annotated[Path | None, typer.Option(
        "--audit-key", help="The audit log's SM2 private key (PKCS#8 PEM); passphrase from "
        "SECURE_FED_KEY_PASSPHRASE or a prompt.")] = None,
    audit_origin: Annotated[str | None, typer.Option(
        "--audit-origin", help="Origin of a new audit log (an existing log keeps its own).")]
    = None,
    db: DbOption = None,
) -> None:
    """Create or change a budget (registers participant and asset with --institution)."""
    ledger = _audited(_open(db), audit_key, audit_origin)
    try:
        if institution is not None:
            ledger.register_participant(participant, institution=institution, kind=kind)
        ledger.register_asset(participant, asset)
        ledger.set_budget(participant, asset, epsilon=epsilon, delta=delta,
                          accountant=accountant)
        status = ledger.budget_status(participant, asset)
    except LedgerError as exc:
        _fail(str(exc))
    finally:
        ledger.engine.dispose()
    typer.echo(f"budget {participant}/{asset}: limit {status.limit} at delta {status.delta!r} "
               f"({status.accountant}); spent {status.spent}, remaining {status.remaining}")


def register(app: typer.Typer) -> None:
    """Attach the ``budget`` group (and, from the audit log, the ``ledger`` group) to ``app``."""
    app.add_typer(budget_app, name="budget")
    from api.cli.ledger import ledger_app  # the audit log's group (verify, head, export-head)

    app.add_typer(ledger_app, name="ledger")

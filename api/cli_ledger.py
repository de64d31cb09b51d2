"""``secure-fed budget`` (and ``secure-fed ledger``): privacy-ledger commands.

``budget show`` prints a participant's limit, spent, reserved and remaining
epsilon and the epsilon after each committed round (a rich table, or JSON
with decimals as strings); ``budget set`` lets an operator create or change a
budget. The database URL comes from ``--db`` or
:meth:`api.settings.Settings.resolved_database_url`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from api.settings import Settings
from privacy_ledger import BudgetStatus, LedgerError, PrivacyLedger

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


def _open(db: str | None) -> PrivacyLedger:
    if db is None:
        try:
            settings = Settings()
        except ValidationError as exc:
            _fail(f"invalid settings: {exc.errors()[0]['msg']}", 2)
        db = settings.resolved_database_url()
        if db.startswith("sqlite:///"):
            Path(db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        return PrivacyLedger.from_url(db)
    except LedgerError as exc:
        _fail(str(exc), 2)


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
    db: DbOption = None,
) -> None:
    """Create or change a budget (registers participant and asset with --institution)."""
    ledger = _open(db)
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
    from api.cli_audit import ledger_app  # the audit log's group (verify, head, export-head)

    app.add_typer(ledger_app, name="ledger")

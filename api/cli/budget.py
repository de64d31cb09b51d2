"""``secure-fed budget``: show and set epsilon budgets in the privacy ledger.

``budget show`` prints a participant's limit, spent, reserved and remaining
epsilon and the epsilon after each committed round (a rich table, or JSON
with decimals as strings); it only reads, and never creates a database.
``budget set`` lets an operator create or change a budget. Every input is
validated before anything is written: the whole change is first rehearsed on
an empty in-memory ledger (the ledger's own checks, nothing re-implemented
here), so a refused call leaves the database untouched and the corrected
retry succeeds. Every change is written to the tamper-evident audit log in
the same transaction as the budget row, signed by ``--audit-key`` (the log's
SM2 signing key) or, without it, by the ledger's own key: ``log-signing-key.pem``
beside a SQLite ledger file (where ``secure-fed demo`` leaves it), if it is
the key of the log already there. With neither the change is refused
(:class:`~api.cli.errors.AuditKeyMissing`) before anything is written. The
database URL comes from ``--db`` or
:meth:`api.settings.Settings.resolved_database_url`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.common import DB_HELP, load_private_key, open_engine, sqlite_file
from api.cli.core import CliCommand, CliGroup
from api.cli.errors import AuditKeyMissing, AuditOriginMissing, NoBudget

if TYPE_CHECKING:  # imported where used, so that --help starts fast
    from rich.console import Console
    from sqlalchemy import Engine

    from crypto.sm import SM2PrivateKey
    from privacy_ledger import BudgetStatus, PrivacyLedger

budget_app = typer.Typer(help="Show and set epsilon budgets.", no_args_is_help=True, cls=CliGroup)

DbOption = Annotated[str | None, typer.Option("--db", metavar="URL", help=DB_HELP)]
ParticipantOption = Annotated[
    str, typer.Option("--participant", metavar="ID", help="Participant id (e.g. hospital-1).")
]


def _read_only(db: str | None) -> PrivacyLedger:
    """Open an existing ledger at the current schema without writing to it."""
    engine = open_engine(db, writable=False)
    from privacy_ledger import PrivacyLedger
    from privacy_ledger.db import current_revision, head_revision
    from privacy_ledger.errors import SchemaOutdated

    found, wanted = current_revision(engine), head_revision()
    if found != wanted:
        engine.dispose()
        raise SchemaOutdated(
            f"database {engine.url.render_as_string()} is at schema "
            f"revision {found!r}, this secure-fed needs {wanted!r}"
        )
    return PrivacyLedger(engine)


#: The ledger's own audit key, beside a SQLite ledger file (what ``secure-fed demo`` leaves).
OWN_KEY_NAME = "log-signing-key.pem"


def _audit_key(key_path: Path | None, engine: Engine, path: Path | None) -> SM2PrivateKey:
    """Load ``--audit-key``, else the ledger's own key; refuse an unaudited change.

    ``path`` is the SQLite ledger file (``None`` for another backend), whose folder
    holds the ledger's own key when ``secure-fed demo`` made it.

    Raises
    ------
    AuditKeyMissing
        No ``--audit-key``, and no own key beside the ledger (or one that is not
        the key of the log already in it). Raised before anything is written.
    """
    if key_path is not None:
        return load_private_key(key_path)
    own = None if path is None else path.parent / OWN_KEY_NAME
    if own is None or not own.is_file():
        where = "a PostgreSQL ledger has no key" if own is None else f"no {own}"
        raise AuditKeyMissing(
            f"budget changes are always audited: pass --audit-key ({where} of its own)"
        )
    key = load_private_key(own)
    logged = _log_fingerprint(engine) if path is not None and path.is_file() else None
    if logged is not None and logged != key.public_key.fingerprint():
        raise AuditKeyMissing(
            f"{own} is not the key of this ledger's audit log (fingerprint {logged[:16]}...): "
            "pass --audit-key"
        )
    return key


def _log_fingerprint(engine: Engine) -> str | None:
    """Return the key fingerprint the audit log records (``None``: no log yet)."""
    from sqlalchemy import inspect, select

    from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow

    if not inspect(engine).has_table(LogStateRow.__tablename__):
        return None
    with engine.connect() as conn:
        fingerprint: str | None = conn.execute(
            select(LogStateRow.key_fingerprint).where(LogStateRow.id == LOG_STATE_ID)
        ).scalar_one_or_none()
    return fingerprint


def _audited(engine: Engine, key: SM2PrivateKey, origin: str | None) -> PrivacyLedger:
    """Return a ledger on ``engine`` writing to the audit log signed by ``key``."""
    from sqlalchemy import select

    from privacy_ledger import AuditLog, PrivacyLedger
    from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow

    with engine.connect() as conn:
        stored = conn.execute(
            select(LogStateRow.origin).where(LogStateRow.id == LOG_STATE_ID)
        ).scalar_one_or_none()
    origin = stored or origin
    if origin is None:
        raise AuditOriginMissing("the audit log has no entries yet, so it has no name")
    return PrivacyLedger(engine, audit=AuditLog(signer=key, origin=origin))


def _status_json(status: BudgetStatus) -> dict[str, object]:
    return {
        "participant": status.participant_id,
        "asset": status.asset_id,
        "accountant": status.accountant,
        "delta": repr(status.delta),
        "limit": str(status.limit),
        "spent": str(status.spent),
        "reserved": str(status.reserved),
        "remaining": str(status.remaining),
        "active_reservations": status.active_reservations,
        "per_round": [{"round": r, "epsilon_after": str(e)} for r, e in status.per_round],
    }


def _print_table(console: Console, status: BudgetStatus) -> None:
    from rich.table import Table

    table = Table(
        title=f"Budget {status.participant_id} / {status.asset_id} "
        f"({status.accountant}, delta={status.delta!r})"
    )
    for column in ("limit", "spent", "reserved", "remaining"):
        table.add_column(column, justify="right")
    table.add_row(
        *(str(v) for v in (status.limit, status.spent, status.reserved, status.remaining))
    )
    console.print(table)
    if status.per_round:
        rounds = Table(title="Epsilon after each round (whole-history accounting)")
        rounds.add_column("round")
        rounds.add_column("epsilon after", justify="right")
        for round_id, eps in status.per_round:
            rounds.add_row("-" if round_id is None else round_id, str(eps))
        console.print(rounds)


@budget_app.command("show", cls=CliCommand)
def show(
    participant: ParticipantOption,
    asset: Annotated[
        str | None, typer.Option("--asset", metavar="ID", help="One data asset.")
    ] = None,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print limit, spent, reserved, remaining and per-round epsilon (reads only)."""
    ledger = _read_only(db)
    try:
        assets = [asset] if asset is not None else ledger.budget_assets(participant)
        if not assets:
            raise NoBudget(f"participant {participant!r} has no budget")
        statuses = [ledger.budget_status(participant, a) for a in assets]
    finally:
        ledger.engine.dispose()
    if as_json:
        typer.echo(json.dumps([_status_json(s) for s in statuses], indent=2))
        return
    from rich.console import Console

    console = Console()
    for status in statuses:
        _print_table(console, status)


@dataclass(frozen=True, kw_only=True)
class _Change:
    """One ``budget set`` call: the participant's asset and its new budget."""

    participant: str
    asset: str
    epsilon: str
    delta: float
    accountant: str
    institution: str | None
    kind: str

    def apply(self, ledger: PrivacyLedger, *, institution: str | None) -> None:
        """Register (when ``institution`` is given), then set the budget."""
        if institution is not None:
            ledger.register_participant(self.participant, institution=institution, kind=self.kind)
        ledger.register_asset(self.participant, self.asset)
        ledger.set_budget(
            self.participant,
            self.asset,
            epsilon=self.epsilon,
            delta=self.delta,
            accountant=self.accountant,
        )

    def rehearse(self) -> None:
        """Apply to an empty in-memory ledger: every input check runs, nothing real is written.

        Without ``--institution`` the rehearsal registers a placeholder so that
        the asset and budget checks still run.
        """
        from privacy_ledger import PrivacyLedger

        rehearsal = PrivacyLedger.from_url("sqlite://")
        try:
            self.apply(rehearsal, institution=self.institution or "rehearsal")
        finally:
            rehearsal.engine.dispose()


@budget_app.command("set", cls=CliCommand)
def set_budget(
    participant: ParticipantOption,
    asset: Annotated[str, typer.Option("--asset", metavar="ID", help="Data asset id.")],
    epsilon: Annotated[
        str,
        typer.Option("--epsilon", metavar="EPSILON", help="Epsilon limit (exact decimal, > 0)."),
    ],
    delta: Annotated[
        float, typer.Option("--delta", metavar="DELTA", help="Target delta, in (0, 1).")
    ] = 1e-5,
    accountant: Annotated[
        str, typer.Option("--accountant", metavar="NAME", help="rdp or prv.")
    ] = "rdp",
    institution: Annotated[
        str | None,
        typer.Option(
            "--institution", metavar="NAME", help="Register the participant with this name first."
        ),
    ] = None,
    kind: Annotated[
        str, typer.Option("--kind", metavar="KIND", help="hospital, bank or other.")
    ] = "other",
    audit_key: Annotated[
        Path | None,
        typer.Option(
            "--audit-key",
            metavar="PEM",
            help="The audit log's SM2 private key (PKCS#8 PEM; default: log-signing-key.pem "
            "beside a SQLite ledger); passphrase from SECURE_FED_KEY_PASSPHRASE or a prompt.",
        ),
    ] = None,
    audit_origin: Annotated[
        str | None,
        typer.Option(
            "--audit-origin",
            metavar="NAME",
            help="Origin of a new audit log (an existing log keeps its own).",
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Create or change a budget (registers participant and asset with --institution)."""
    change = _Change(
        participant=participant,
        asset=asset,
        epsilon=epsilon,
        delta=delta,
        accountant=accountant,
        institution=institution,
        kind=kind,
    )
    from privacy_ledger.db import upgrade

    change.rehearse()
    engine = open_engine(db, writable=True)
    try:
        path = sqlite_file(engine.url.render_as_string(hide_password=False))
        if path is None:
            with engine.connect():  # an unreachable server is named before any key is asked
                pass
        key = _audit_key(audit_key, engine, path)
        upgrade(engine)
        ledger = _audited(engine, key, audit_origin)
        change.apply(ledger, institution=institution)
        status = ledger.budget_status(participant, asset)
    finally:
        engine.dispose()
    typer.echo(
        f"budget {participant}/{asset}: limit {status.limit} at delta {status.delta!r} "
        f"({status.accountant}); spent {status.spent}, remaining {status.remaining}"
    )

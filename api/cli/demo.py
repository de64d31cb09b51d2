"""``secure-fed demo``: a whole federation on embedded defaults.

Parses options, runs :func:`secure_fed.demo.run_demo` with a rich progress
bar, and prints one table per round (each participant's accuracy local-only
vs federated, epsilon spent, aggregation weight), or the results as JSON
with ``--json``. Typed errors are printed as ``[CODE] message`` (exit 2).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from api.settings import Settings
from crypto.errors import CryptoError
from privacy_ledger.errors import LedgerError
from secure_fed.demo import DemoConfig, run_demo
from secure_fed.errors import SecureFedError
from secure_fed.evaluation.attacks import ATTACK_REGISTRY
from secure_fed.federation.federation import RoundResult
from secure_fed.learning.data import DATASET_REGISTRY
from secure_fed.secure.mode import mode_names

__all__ = ["register"]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def round_table(result: RoundResult) -> Table:
    """Render one round's per-participant rows."""
    title = f"round {result.round_id}: {result.stage}"
    if result.reason:
        title += f" ({result.reason})"
    table = Table(title=title, title_justify="left")
    for col in ("participant", "model", "local-only", "federated", "epsilon", "weight", "note"):
        left = col in ("participant", "model", "note")
        table.add_column(col, justify="left" if left else "right")
    for row in result.rows:
        note = "attacker" if row.attacker else ""
        if row.private_training.startswith("stopped"):
            note = (note + " private training stopped").strip()
        table.add_row(
            row.participant_id, row.architecture, _pct(row.accuracy_local),
            _pct(row.accuracy_federated),
            "-" if row.epsilon_spent is None else f"{row.epsilon_spent:.2f}",
            "-" if row.weight is None else f"{row.weight:.3f}", note,
        )  # fmt: skip
    fed, local = result.mean_accuracy()
    table.caption = f"mean honest accuracy: local-only {_pct(local)}, federated {_pct(fed)}"
    return table


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        typer.echo(f"error: invalid settings: {exc.errors()[0]['msg']}", err=True)
        raise typer.Exit(2) from None


def _key_passphrase() -> bytes | None:
    """SECURE_FED_KEY_PASSPHRASE for the log's signing key; a notice when it is unset."""
    configured = _settings().key_passphrase
    if configured is None:
        typer.echo(
            "notice: SECURE_FED_KEY_PASSPHRASE is not set: the demo's log signing key "
            "is written unencrypted (mode 0600)",
            err=True,
        )
        return None
    return configured.get_secret_value().encode("utf-8")


def demo(
    rounds: Annotated[int, typer.Option(help="Federation rounds.")] = 5,
    participants: Annotated[int, typer.Option(help="Participants (>= 2).")] = 4,
    dataset: Annotated[
        str, typer.Option(help=f"Built-in dataset: {', '.join(sorted(DATASET_REGISTRY))}.")
    ] = "digits",
    alpha: Annotated[float, typer.Option(help="Dirichlet label-skew concentration.")] = 0.5,
    epsilon: Annotated[float, typer.Option(help="Each participant's epsilon budget.")] = 8.0,
    attack: Annotated[
        str | None,
        typer.Option(help=f"KIND:COUNT poisoning; kinds: {', '.join(sorted(ATTACK_REGISTRY))}."),
    ] = None,
    mode: Annotated[
        str, typer.Option(help=f"Aggregation mode: {', '.join(mode_names())}.")
    ] = "ckks",
    out: Annotated[
        Path | None, typer.Option(help="Working folder (results JSON, SQLite ledger).")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier demo run in --out.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of splits, models and attacks.")] = 0,
    central_dp: Annotated[
        float | None,
        typer.Option(
            "--central-dp",
            metavar="NOISE",
            help="Central DP noise multiplier on each published aggregate (ckks: added by the "
            "key authority, charged to every contributor's epsilon budget).",
        ),
    ] = None,
) -> None:
    """Run a complete federation (all parties in one process) and show per-round tables."""
    # Opacus' RDP accountant warns whenever the optimal order is at the edge of its
    # alpha grid; the ledger already rounds epsilon up, so this is noise on a terminal.
    warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
    console = Console(stderr=as_json)
    passphrase = _key_passphrase()
    config = DemoConfig(
        rounds=rounds, participants=participants, dataset=dataset, alpha=alpha,
        epsilon=epsilon, attack=attack, mode=mode,
        out=out if out is not None else _settings().workdir / "demo", seed=seed,
        overwrite=overwrite,
        central_dp=central_dp,
    )  # fmt: skip
    progress = Progress(
        TextColumn("[bold]federation"), BarColumn(),
        TextColumn("round {task.completed}/{task.total}"), TimeElapsedColumn(),
        console=console, transient=as_json,
    )  # fmt: skip
    try:
        with progress:
            task = progress.add_task("rounds", total=rounds)

            reported: set[str] = set()

            def on_round(result: RoundResult) -> None:
                progress.advance(task)
                if as_json:
                    return
                progress.console.print(round_table(result))
                for row in result.rows:
                    stopped = row.private_training.startswith("stopped")
                    if stopped and row.participant_id not in reported:
                        reported.add(row.participant_id)
                        progress.console.print(
                            f"[yellow]{row.participant_id}: private training {row.private_training}"
                        )

            results = run_demo(config, on_round=on_round, key_passphrase=passphrase)
    except (SecureFedError, LedgerError, CryptoError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(results.to_dict(), indent=2))
        return
    final = results.final()
    console.print(
        f"done in {results.wall_seconds:.1f} s: mean honest accuracy local-only "
        f"{_pct(final['local_only'])}, federated {_pct(final['federated'])}; "
        f"results {results.results_path}, ledger {results.ledger_url}"
    )


def register(app: typer.Typer) -> None:
    """Attach the ``demo`` command to ``app``."""
    app.command("demo")(demo)

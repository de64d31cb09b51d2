"""``secure-fed demo``: a whole federation on embedded defaults.

Every option is validated first with light code
(:meth:`secure_fed.demo_options.DemoConfig.validate`): a bad option fails at
once, before torch is imported or anything is drawn, as ``error: [CODE] ...``
plus ``hint: ...`` (exit 2). Then :func:`secure_fed.demo.run_demo` runs with a
progress display on stderr naming the stage of the round (training,
encrypting, scoring, aggregating, distilling, per participant where it
applies), and one table per round on stdout: what the outlier filter did
with each upload (score, decision, applied weight), the demo's ground truth
in its own column, epsilon spent and accuracy local-only vs federated. With
``--json`` stdout carries nothing but the results JSON.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from api.cli.errors import describe
from api.settings import Settings
from secure_fed.demo_options import DemoConfig
from secure_fed.errors import SecureFedError
from secure_fed.evaluation.attacks import ATTACK_REGISTRY
from secure_fed.learning.data import DATASET_REGISTRY
from secure_fed.secure.mode import mode_names

if TYPE_CHECKING:
    from secure_fed.federation.federation import ParticipantRound, RoundResult
    from secure_fed.federation.observer import StageEvent

__all__ = ["demo", "round_table"]

#: Console width when stdout is not a terminal (tables take only the width they need).
_PIPED_WIDTH = 200
_VALIDATION_HINT = "see 'secure-fed demo --help' for the options and their ranges"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _decision(row: ParticipantRound) -> str:
    if row.decision is None:
        return "-"
    if row.decision == "downweight" and row.factor is not None:
        return f"downweight x{row.factor:.2f}"
    return row.decision


def round_table(result: RoundResult) -> Table:
    """Render one round: the filter's decision per upload, ground truth apart, accuracy."""
    title = f"round {result.round_id}: {result.stage}"
    if result.reason:
        title += f" ({result.reason.removeprefix(f'round {result.round_id} aborted: ')})"
    table = Table(title=title, title_justify="left")
    table.add_column("participant", overflow="fold")
    for col in (
        "model",
        "truth",
        "upload",
        "score",
        "decision",
        "weight",
        "epsilon",
        "local-only",
        "federated",
    ):
        right = col not in ("model", "truth", "upload", "decision")
        table.add_column(col, overflow="fold", justify="right" if right else "left")
    for row in result.rows:
        table.add_row(
            row.participant_id,
            row.architecture,
            "attacker" if row.attacker else "honest",
            row.upload.split(":", 1)[0],
            _num(row.score, 2),
            _decision(row),
            _num(row.weight, 3),
            _num(row.epsilon_spent, 2),
            _pct(row.accuracy_local),
            _pct(row.accuracy_federated),
        )
    fed, local = result.mean_accuracy()
    table.caption = f"mean honest accuracy: local-only {_pct(local)}, federated {_pct(fed)}"
    table.caption_justify = "left"
    return table


def _notes(result: RoundResult, reported: set[str]) -> list[str]:
    """Full-text lines under a table: refused uploads, newly stopped private training."""
    lines = []
    for row in result.rows:
        if row.upload != "accepted" and ": " in row.upload:
            lines.append(f"{row.participant_id}: upload {row.upload}")
        stopped = row.private_training.startswith("stopped")
        if stopped and row.participant_id not in reported:
            reported.add(row.participant_id)
            lines.append(f"{row.participant_id}: private training {row.private_training}")
    return lines


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


def _validated(config: DemoConfig) -> None:
    """Validate every option with light code; print two lines and exit 2 on the first error."""
    try:
        config.validate()
    except SecureFedError as exc:
        error, _, _ = describe(exc)
        typer.echo(error, err=True)
        typer.echo(f"hint: {_VALIDATION_HINT}", err=True)
        raise typer.Exit(2) from None


def _stdout_console() -> Console:
    """Stdout console; piped or redirected, wide enough that tables never truncate ids."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(width=max(console.width, _PIPED_WIDTH))


def _progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("round {task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


_SEED_HELP = (
    "Seed of the data split, initial models, attacks and scoring. The DP noise is NOT "
    "seeded (it comes from the secrets module, by design), so two runs differ in their "
    "figures unless --reproducible is given."
)
_REPRODUCIBLE_HELP = (
    "INSECURE: seed the DP-SGD noise from --seed too, so two runs give identical figures "
    "in plaintext mode (ckks and shares keep their encryption and masking randomness: "
    "scores and aggregates then differ at the level of their approximation error). Voids "
    "the DP guarantee; recorded in every ledger event (noise_rng) and in results.json."
)


def demo(
    ctx: typer.Context,
    rounds: Annotated[int, typer.Option(help="Federation rounds (1-1000).")] = 5,
    participants: Annotated[int, typer.Option(help="Participants (2-100).")] = 4,
    dataset: Annotated[
        str, typer.Option(help=f"Built-in dataset: {', '.join(sorted(DATASET_REGISTRY))}.")
    ] = "digits",
    alpha: Annotated[float, typer.Option(help="Dirichlet label-skew concentration (> 0).")] = 0.5,
    epsilon: Annotated[float, typer.Option(help="Each participant's epsilon budget (> 0).")] = 8.0,
    attack: Annotated[
        str | None,
        typer.Option(help=f"KIND:COUNT poisoning; kinds: {', '.join(sorted(ATTACK_REGISTRY))}."),
    ] = None,
    mode: Annotated[
        str, typer.Option(help=f"Aggregation mode: {', '.join(mode_names())}.")
    ] = "ckks",
    out: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Working folder (ledger, results.json, report.html)."),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier demo run in --out.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print only the results JSON on stdout.")
    ] = False,
    seed: Annotated[int, typer.Option(help=_SEED_HELP)] = 0,
    reproducible: Annotated[bool, typer.Option(help=_REPRODUCIBLE_HELP)] = False,
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
    config = DemoConfig(
        rounds=rounds,
        participants=participants,
        dataset=dataset,
        alpha=alpha,
        epsilon=epsilon,
        attack=attack,
        mode=mode,
        out=out if out is not None else _settings().workdir / "demo",
        seed=seed,
        overwrite=overwrite,
        central_dp=central_dp,
        reproducible=reproducible,
    )
    _validated(config)
    passphrase = _key_passphrase()
    if reproducible:
        typer.echo(
            "warning: --reproducible: DP noise seeded from --seed (INSECURE: no DP guarantee; "
            "recorded in the ledger and results.json)",
            err=True,
        )
    debug = bool(ctx.find_root().params.get("debug"))
    _run(config, as_json=as_json, passphrase=passphrase, debug=debug)


def _run(config: DemoConfig, *, as_json: bool, passphrase: bytes | None, debug: bool) -> None:
    """Import the heavy parts, run the demo with progress on stderr, print tables or JSON."""
    # Opacus' RDP accountant warns whenever the optimal order is at the edge of its
    # alpha grid; the ledger already rounds epsilon up, so this is noise on a terminal.
    warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
    from secure_fed.demo import run_demo

    if not debug:  # the tables and notes report refusals in full; logs would break the display
        for name in ("secure_fed", "privacy_ledger"):
            logging.getLogger(name).setLevel(logging.ERROR)

    out = _stdout_console()
    progress = _progress(Console(stderr=True))
    reported: set[str] = set()
    with progress:
        task = progress.add_task("starting", total=config.rounds)

        def on_stage(event: StageEvent) -> None:
            who = f" {event.participant_id}" if event.participant_id else ""
            progress.update(task, description=f"round {event.round_id}: {event.stage}{who}")

        def on_round(result: RoundResult) -> None:
            progress.advance(task)
            if not as_json:
                out.print(round_table(result))
                for line in _notes(result, reported):
                    out.print(line, style="yellow", soft_wrap=True)

        results = run_demo(config, on_round=on_round, on_stage=on_stage, key_passphrase=passphrase)
    if as_json:
        typer.echo(json.dumps(results.to_dict(), indent=2))
        return
    final = results.final()
    aborted = sum(1 for r in results.rounds if r.stage != "published")
    summary = f"{aborted} of {len(results.rounds)} rounds aborted; " if aborted else ""
    out.print(
        f"done in {results.wall_seconds:.1f} s: {summary}mean honest accuracy local-only "
        f"{_pct(final['local_only'])}, federated {_pct(final['federated'])}\n"
        f"results {results.results_path}\nreport  {results.report_path}\n"
        f"ledger  {results.ledger_url}",
        soft_wrap=True,
    )

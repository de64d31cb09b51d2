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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from api.cli.errors import describe
from api.settings import Settings
from secure_fed.demo_options import DemoConfig
from secure_fed.errors import DataError, SecureFedError
from secure_fed.evaluation.attacks import ATTACK_REGISTRY
from secure_fed.learning.architectures import ARCHITECTURES
from secure_fed.learning.data import DATASET_REGISTRY
from secure_fed.report.weights import applied_decision, terms_cell
from secure_fed.secure.mode import mode_names

if TYPE_CHECKING:
    from privacy_ledger.budget.empirical import AuditedBudget
    from secure_fed.demo import DemoResults
    from secure_fed.federation.federation import ParticipantRound, RoundResult
    from secure_fed.federation.observer import StageEvent

__all__ = ["demo", "print_summary", "privacy_table", "round_printer", "round_table"]

#: Console width when stdout is not a terminal (tables take only the width they need).
_PIPED_WIDTH = 200
_VALIDATION_HINT = "see 'secure-fed demo --help' for the options and their ranges"
_TABLE_HINT = "fix the table named above (docs/learning.md, section 2: bring your own data)"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row_terms(row: ParticipantRound) -> dict[str, object]:
    """Return the row as the mapping :mod:`secure_fed.report.weights` reads (a results.json row)."""
    return {name: getattr(row, name) for name in _TERM_FIELDS}


_TERM_FIELDS = (
    "decision",
    "factor",
    "weight",
    "base_share",
    "merit",
    "copies",
    "applied_factor",
    "max_weight",
)


def _decision(row: ParticipantRound) -> str:
    """Return what was applied: ``keep``, ``downweight`` (factor below 1) or ``exclude``.

    The factor itself is the ``f`` of the terms cell; a refused or missing
    upload says so here (the note under the table gives the reason).
    """
    if row.upload != "accepted":
        outcome = row.upload.split(":", 1)[0]
        return "no upload" if outcome == "none" else outcome
    decision = applied_decision(_row_terms(row))
    if decision.startswith(("downweight x", "flagged x")):
        # the applied factor is the terms cell's f; a flag that was not applied keeps its note
        word, _, rest = decision.partition(" x")
        return f"{word} {rest.partition(' ')[2]}".strip()
    return decision


def _fmt(metric: str, value: float | None) -> str:
    return _num(value, 3) if metric == "roc_auc" else _pct(value)


#: Mean metrics of the caption after accuracy: (row metric, label); per-row values are in
#: report.html, whose round table has one column each.
_METRIC_COLUMNS = (
    ("balanced_accuracy", "balanced acc"),
    ("macro_f1", "macro F1"),
    ("roc_auc", "ROC AUC"),
)


def _metric_columns(result: RoundResult) -> list[tuple[str, str]]:
    """Metrics with a value in some row (ROC AUC only for binary tasks)."""
    return [
        (name, header)
        for name, header in _METRIC_COLUMNS
        if any(r.metric(name, local=False) is not None for r in result.rows)
    ]


def _caption(result: RoundResult) -> str:
    means = result.mean_metrics()
    parts = [
        f"{header} {_fmt(name, means[name]['local_only'])} -> "
        f"{_fmt(name, means[name]['federated'])}"
        for name, header in (("accuracy", "accuracy"), *_metric_columns(result))
    ]
    return (
        "mean honest, local-only -> federated: "
        + ", ".join(parts)
        + "\nterms: weight = min(cap, lambda*b*m*u*f): b base share, m merit, u copies, "
        "f outlier factor as applied, * capped; model, upload and per-row metrics: report.html"
    )


def _accuracy(row: ParticipantRound) -> str:
    if row.accuracy_local is None:
        return _pct(row.accuracy_federated)
    return f"{_pct(row.accuracy_local)} -> {_pct(row.accuracy_federated)}"


#: Widest table at 100 columns with ids of up to 12 characters: no frame, one rule under
#: the header, two spaces between columns.
TABLE_WIDTH = 100


def round_table(result: RoundResult) -> Table:
    """Render one round: the filter's decision per upload, ground truth apart, weight terms.

    The columns fit :data:`TABLE_WIDTH` columns: participant, truth, score,
    the decision as applied, the weight, its terms (``b m u f``, see
    :func:`~secure_fed.report.weights.terms_cell`), epsilon and accuracy
    ``local-only -> federated``. The model, the upload outcome and the other
    metrics per row are in report.html; their means are in the caption.
    """
    title = f"round {result.round_id}: {result.stage}"
    if result.reason:
        title += f" ({result.reason.removeprefix(f'round {result.round_id} aborted: ')})"
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=0,
    )
    for col, right in (
        ("participant", False),
        ("truth", False),
        ("score", True),
        ("decision", False),
        ("weight", True),
        ("terms b m u f", False),
        ("epsilon", True),
        ("accuracy", True),
    ):
        table.add_column(col, overflow="fold", justify="right" if right else "left")
    for row in result.rows:
        table.add_row(
            row.participant_id,
            "attacker" if row.attacker else "honest",
            _num(row.score, 2),
            _decision(row),
            _num(row.weight, 3),
            terms_cell(_row_terms(row)),
            _num(row.epsilon_spent, 2),
            _accuracy(row),
        )
    table.caption = _caption(result)
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
    """Validate every option with light code; print two lines and exit 2 on the first error.

    The user's own tables (``--data``, ``--participant``) are read and checked
    here too (pandas, no torch), so a bad table is refused before anything runs.
    """
    try:
        config.validate()
        if config.data is not None or config.participant_tables:
            config.load_data()
    except SecureFedError as exc:
        error, _, _ = describe(exc)
        typer.echo(error, err=True)
        hint = _TABLE_HINT if isinstance(exc, DataError) else _VALIDATION_HINT
        typer.echo(f"hint: {hint}", err=True)
        raise typer.Exit(2) from None


def _stdout_console() -> Console:
    """Stdout console; piped or redirected, wide enough that tables never truncate ids."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(width=max(console.width, _PIPED_WIDTH))


def _progress(console: Console) -> Progress:
    """Stage progress on ``console`` (stderr), erased when it stops.

    Stdout is not redirected through it: tables stay on stdout even when only
    stderr is a terminal; :func:`round_printer` takes the bar down around them.
    """
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("round {task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )


def round_printer(
    out: Console, progress: Progress, task: TaskID, *, tables: bool
) -> Callable[[RoundResult], None]:
    """Advance ``progress`` per round and print its table and notes on ``out``.

    The bar is erased while a table prints and drawn again below it, so a
    terminal showing both streams keeps whole table lines and no stale bar.
    """
    reported: set[str] = set()

    def on_round(result: RoundResult) -> None:
        progress.advance(task)
        if not tables:
            return
        progress.stop()
        try:
            out.print(round_table(result))
            for line in _notes(result, reported):
                out.print(line, style="yellow", soft_wrap=True)
        finally:
            progress.start()

    return on_round


_SEED_HELP = (
    "Seed of the data split, initial models, attacks and scoring. The DP noise is NOT "
    "seeded from it: its PyTorch generator (not cryptographic: Opacus secure_mode off) is "
    "seeded from the secrets module each round, by design, so two runs differ in their "
    "figures unless --reproducible is given."
)
_REPRODUCIBLE_HELP = (
    "INSECURE: seed the DP-SGD noise from --seed too, so two runs give identical figures "
    "in plaintext mode (ckks and shares keep their encryption and masking randomness: "
    "scores and aggregates then differ at the level of their approximation error). Voids "
    "the DP guarantee; recorded in every ledger event (noise_rng) and in results.json."
)


_DATA_HELP = (
    "Your own CSV or Parquet table, split among the participants like a built-in dataset "
    "(20% public rows without labels, 20% test, 60% private by Dirichlet label skew); "
    "replaces --dataset; needs --label-column."
)
_PARTICIPANT_HELP = (
    "One participant's own table, repeated (ID=FILE, CSV or Parquet, same columns): kept "
    "as that participant's data (no re-split); 20% of each table's rows are held out for "
    "the public set (labels dropped) and 20% for the test set. Needs --label-column."
)


def _names(value: str | None) -> tuple[str, ...] | None:
    """Split a comma-separated option into a tuple (blanks dropped); None when not given."""
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _participant_tables(values: list[str]) -> tuple[tuple[str, Path], ...]:
    """Parse repeated ``--participant ID=FILE``; a malformed one exits 2 with its hint."""
    tables = []
    for value in values:
        pid, sep, path = value.partition("=")
        if not sep or not pid.strip() or not path.strip():
            typer.echo(
                f"error: [FEDERATION_CONFIG_INVALID] participant: {value!r} is not ID=FILE",
                err=True,
            )
            typer.echo(f"hint: {_VALIDATION_HINT}", err=True)
            raise typer.Exit(2)
        tables.append((pid.strip(), Path(path.strip())))
    return tuple(tables)


def demo(
    ctx: typer.Context,
    rounds: Annotated[int, typer.Option(help="Federation rounds (1-1000).")] = 5,
    participants: Annotated[
        int | None,
        typer.Option(help="Participants (2-100; default 4, or one per --participant)."),
    ] = None,
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
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace an earlier demo run in --out once the new run has succeeded; "
            "anything the demo did not write (or changed since) is kept aside in a "
            "timestamped sibling folder, never deleted.",
        ),
    ] = False,
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
    data: Annotated[Path | None, typer.Option(metavar="FILE", help=_DATA_HELP)] = None,
    label_column: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Label column of the --data / --participant tables."),
    ] = None,
    id_column: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Column of row identifiers in the --data / --participant tables: not a "
            "feature; its values must be distinct within a table.",
        ),
    ] = None,
    drop_columns: Annotated[
        str | None,
        typer.Option(
            metavar="A,B,...",
            help="Columns of the --data / --participant tables that are not features.",
        ),
    ] = None,
    participant: Annotated[
        list[str] | None, typer.Option(metavar="ID=FILE", help=_PARTICIPANT_HELP)
    ] = None,
    participant_ids: Annotated[
        str | None,
        typer.Option(metavar="ID,ID,...", help="Participant ids (default hospital-1, bank-2...)."),
    ] = None,
    architectures: Annotated[
        str | None,
        typer.Option(
            metavar="A,B,...",
            help=f"Architectures cycled over participants: {', '.join(ARCHITECTURES)}.",
        ),
    ] = None,
    logit_adjustment: Annotated[
        bool,
        typer.Option(
            help="Logit-adjusted DP-SGD and distillation losses, which keep rare classes "
            "(the label prior is released with DP noise, charged to each budget); "
            "--no-logit-adjustment for the plain losses.",
        ),
    ] = True,
    privacy_audit: Annotated[
        bool,
        typer.Option(
            help="One-run empirical privacy audit of every participant: synthetic canaries, "
            "each trained on with probability 1/2, give a 95% lower bound on epsilon beside "
            "the accounted one (a budget.audited ledger event per round); "
            "--no-privacy-audit trains without canaries.",
        ),
    ] = True,
    audit_canaries: Annotated[
        int,
        typer.Option(metavar="M", help="Canaries per participant for --privacy-audit."),
    ] = 64,
) -> None:
    """Run a complete federation (all parties in one process) and show per-round tables."""
    tables = _participant_tables(participant or [])
    config = DemoConfig(
        rounds=rounds,
        participants=participants if participants is not None else len(tables) or 4,
        data=data,
        label_column=label_column,
        id_column=id_column,
        drop_columns=_names(drop_columns) or (),
        participant_tables=tables,
        participant_ids=_names(participant_ids),
        architectures=_names(architectures),
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
        logit_adjustment=logit_adjustment,
        privacy_audit=privacy_audit,
        audit_canaries=audit_canaries,
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
    """Run the demo with library logs quietened (unless ``debug``), then restore them."""
    # Opacus' RDP accountant warns whenever the optimal order is at the edge of its
    # alpha grid; the ledger already rounds epsilon up, so this is noise on a terminal.
    warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
    quiet = () if debug else ("secure_fed", "privacy_ledger")
    # The tables and notes report refusals in full; logs would break the display. The
    # levels are restored afterwards so that a caller running the demo in-process keeps
    # its own logging.
    saved = {name: logging.getLogger(name).level for name in quiet}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        _show(config, as_json=as_json, passphrase=passphrase)
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _show(config: DemoConfig, *, as_json: bool, passphrase: bytes | None) -> None:
    """Run the demo with a progress bar; print per-round tables (or the JSON) and a summary."""
    from secure_fed.demo import run_demo

    out = _stdout_console()
    progress = _progress(Console(stderr=True))
    with progress:
        task = progress.add_task("starting", total=config.rounds)

        def on_stage(event: StageEvent) -> None:
            who = f" {event.participant_id}" if event.participant_id else ""
            progress.update(task, description=f"round {event.round_id}: {event.stage}{who}")

        on_round = round_printer(out, progress, task, tables=not as_json)
        results = run_demo(config, on_round=on_round, on_stage=on_stage, key_passphrase=passphrase)
    if results.kept_aside:
        typer.echo(
            f"notice: the previous contents of {config.out} were kept, not deleted, as "
            f"{results.kept_aside} ({'; '.join(results.kept_because)})",
            err=True,
        )
    if as_json:
        typer.echo(json.dumps(results.to_dict(), indent=2))
        return
    print_summary(out, results)


def print_summary(out: Console, results: DemoResults) -> None:
    """Print the closing lines: accuracy and DP noise wrapped between words, then the paths.

    The sentences wrap at the console's width like the tables (a terminal of
    100 columns splits no word); the paths stay whole on their own lines.
    """
    final = results.final()
    aborted = sum(1 for r in results.rounds if r.stage != "published")
    summary = f"{aborted} of {len(results.rounds)} rounds aborted; " if aborted else ""
    balanced = results.final_metrics().get("balanced_accuracy", {})
    out.print(
        f"done in {results.wall_seconds:.1f} s: {summary}mean honest accuracy local-only "
        f"{_pct(final['local_only'])}, federated {_pct(final['federated'])}; balanced "
        f"accuracy local-only {_pct(balanced.get('local_only'))}, federated "
        f"{_pct(balanced.get('federated'))}\n"
        f"DP noise: {results.privacy.get('noise', '-')}"
    )
    table = privacy_table(results.ledger_url)
    if table is not None:
        out.print(table)
    out.print(
        f"results {results.results_path}\nreport  {results.report_path}\n"
        f"ledger  {results.ledger_url}",
        soft_wrap=True,
    )


def _audited(url: str) -> list[AuditedBudget] | None:
    """Read every budget's accounted epsilon and newest audit from the ledger at ``url``."""
    from sqlalchemy.exc import SQLAlchemyError

    from privacy_ledger import create_ledger_engine
    from privacy_ledger.budget.empirical import audited_budgets
    from privacy_ledger.budget.service import PrivacyLedger
    from privacy_ledger.errors import LedgerError

    if not url or (url.startswith("sqlite:///") and not Path(url[10:]).is_file()):
        return None  # never create an empty database just to show nothing
    engine = create_ledger_engine(url)
    try:
        return audited_budgets(PrivacyLedger(engine))
    except (LedgerError, SQLAlchemyError):
        return None
    finally:
        engine.dispose()


def privacy_table(url: str) -> Table | None:
    """Render each participant's accounted epsilon beside its empirical lower bound.

    Both are read from the ledger at ``url`` (the signed ``budget.audited`` entries
    and the committed charges, :func:`privacy_ledger.budget.empirical.audited_budgets`):
    epsilon spent, the rounds the newest audit covers, the ledger's epsilon over
    those rounds, and the bound with its label, e.g. ``0.41 (empirical lower bound
    (95%, 64 canaries))``, or ``not audited``. ``None`` when the ledger cannot be read.
    """
    from secure_fed.federation.config import ASSET_ID

    budgets = _audited(url)
    if not budgets:
        return None
    table = Table(
        title="privacy per participant (from the ledger): accounted epsilon beside the "
        "empirical lower bound",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 2, 0, 0),
    )
    for col, right in (
        ("participant", False),
        ("epsilon spent", True),
        ("audited rounds", False),
        ("accounted there", True),
        ("empirical lower bound", False),
    ):
        table.add_column(col, overflow="fold", justify="right" if right else "left")
    for b in budgets:
        rounds, accounted, bound = "-", "-", b.text
        if b.recorded is not None:
            a = b.recorded.audit
            rounds = (
                a.rounds_from
                if a.rounds_from == a.rounds_to
                else f"{a.rounds_from} to {a.rounds_to}"
            )
            accounted = "-" if b.epsilon_accounted is None else _num(float(b.epsilon_accounted), 4)
            if b.exceeds:
                bound += ": EXCEEDS the accounted epsilon (DP not applied as charged)"
        who = b.participant if b.asset == ASSET_ID else f"{b.participant}/{b.asset}"
        table.add_row(who, _num(float(b.epsilon_spent), 4), rounds, accounted, bound)
    return table

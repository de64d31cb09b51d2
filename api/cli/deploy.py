"""``secure-fed deploy``: the key ceremony, and a whole federation of processes on 127.0.0.1.

``secure-fed deploy local --participants N --mode ckks|shares [--rounds R]
[--max-retries K] [--db URL] [--run-dir DIR]`` runs the key ceremony, starts the key
authority, the helper (shares), the REST API, a Flower SuperLink and one SuperNode per participant,
each its own process with its own log in ``<run-dir>/logs/``, then the rounds
(``flwr run`` of secure-fed's Flower app). When the run ends the result goes to
standard output (:mod:`secure_fed.deploy.local_report`: every round's stage,
roster and publication or reason, where each party's log and state are, the next
commands), at most 100 columns; progress and the processes' logs stay on
standard error. After the run the services keep
running (the API and its console show the ledger) until Ctrl-C; ``--exit``
stops them as soon as the run ends. A service that exits (key authority, helper,
verifier, API, a SuperNode) is restarted with a growing delay, within a budget,
each restart said on standard error and named in the result; the SuperLink or
the run exiting ends the command. Ctrl-C or ``SIGTERM`` at any moment stops
every process. ``--resume RUN_DIR`` starts every process of an earlier run again on
its directory (its keys, state and ledger; no new ceremony) and runs the rounds still
to publish; a directory that is not such a run, one whose driver still runs, or an
option that differs from the stored run's is refused (``DEPLOY_RESUME_REFUSED``) before
anything starts. ``secure-fed deploy keys`` is the key ceremony alone
(:mod:`api.cli.parties`). See ``docs/deploy.md``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import click
import typer

from api.cli.core import CliCommand, CliGroup
from api.cli.parties import deploy_keys

if TYPE_CHECKING:
    from secure_fed.deploy.local import LocalFederation
    from secure_fed.deploy.supervisor import Restart

__all__ = ["deploy_app"]

deploy_app = typer.Typer(
    help="Run the key ceremony, or a whole federation of real processes on 127.0.0.1.",
    cls=CliGroup,
    no_args_is_help=True,
)
deploy_app.command("keys", cls=CliCommand)(deploy_keys)


class Stopped(KeyboardInterrupt):
    """``SIGINT`` or ``SIGTERM`` arrived: stop every process."""


@contextmanager
def _stop_on_signals() -> Iterator[Callable[[], None]]:
    """Raise :class:`Stopped` on ``SIGINT``/``SIGTERM``; yield a check that raises it again.

    A signal that lands while a child process is forked runs its handler inside
    an at-fork callback, where Python prints the exception and drops it; the
    yielded check, called while waiting, raises it again.
    """
    caught: list[str] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        caught.append(signal.Signals(signum).name)
        raise Stopped(caught[0])

    def check() -> None:
        if caught:
            raise Stopped(caught[0])

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield check
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def _say_restart(restart: Restart) -> None:
    again = "; its peer still holds its place, not counted" if restart.busy else ""
    _say(
        f"{restart.process} {restart.exit}: restarting it in {restart.delay:g} s "
        f"(restart {restart.attempt}{again}; logs/{restart.process}.log)"
    )


def _given(**values: object) -> dict[str, object]:
    """Return the stored options the command line named (``--resume`` compares them).

    An option not named takes the stored run's value, whatever its default is.
    """
    ctx = click.get_current_context()
    names = {"database_url": "db"}
    given = {}
    for name, value in values.items():
        source = ctx.get_parameter_source(names.get(name, name))
        if source is not None and source is not click.core.ParameterSource.DEFAULT:
            given[name] = value
    return given


def _resumed(run: Path, *, run_dir: Path | None, given: dict[str, object]) -> LocalFederation:
    """Take up ``run`` again (``DEPLOY_RESUME_REFUSED`` before anything starts)."""
    from secure_fed.deploy.local import LocalFederation
    from secure_fed.deploy.local_files import ResumeRefused

    if run_dir is not None and run_dir.resolve() != run.resolve():
        raise ResumeRefused(
            f"--run-dir {run_dir} contradicts --resume {run}: give --resume alone",
            why="contradicts",
        )
    return LocalFederation.resume(
        run,
        python=sys.executable,
        env=dict(os.environ),
        given=given,
        adopt_orphans=True,
        on_restart=_say_restart,
    )


@deploy_app.command("local", cls=CliCommand)
def local(
    participants: Annotated[int, typer.Option(help="Number of participants (SuperNodes).")] = 4,
    mode: Annotated[str, typer.Option(help="ckks or shares.")] = "ckks",
    rounds: Annotated[int, typer.Option(help="Federated rounds.")] = 3,
    max_retries: Annotated[
        int,
        typer.Option(
            help="Rounds run again after a failed service aborted one (0..100); each "
            "participant's DP plan covers rounds + max-retries rounds."
        ),
    ] = 3,
    db: Annotated[
        str | None,
        typer.Option("--db", metavar="URL", help="Ledger database (default <run-dir>/ledger.db)."),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", metavar="DIR", help="New directory for keys, state and logs."),
    ] = None,
    exit_after_run: Annotated[
        bool, typer.Option("--exit", help="Stop every process when the run ends.")
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            metavar="RUN_DIR",
            help="Start the run in RUN_DIR again (its keys, state, ledger) and run the "
            "rounds still to publish; no new key ceremony.",
        ),
    ] = None,
) -> None:
    """Start a whole federation of real processes on 127.0.0.1; Ctrl-C stops it."""
    from secure_fed.deploy.local import LocalFederation
    from secure_fed.deploy.local_files import LocalOptions
    from secure_fed.deploy.local_report import RoundsLost, render, run_report
    from secure_fed.deploy.supervisor import ProcessFailed

    if db is not None:
        from api.cli.common import check_database_url

        check_database_url(db)
    if resume is not None:
        federation = _resumed(resume, run_dir=run_dir, given=_given(
            participants=participants, mode=mode, rounds=rounds,
            max_retries=max_retries, database_url=db,
        ))  # fmt: skip
        folder = federation.prepare().run_dir
    else:
        folder = run_dir or Path(tempfile.mkdtemp(prefix="secure-fed-local-"))
        options = LocalOptions(
            participants=participants,
            mode=mode,
            rounds=rounds,
            max_retries=max_retries,
            run_dir=folder,
            database_url=db,
        )
        federation = LocalFederation(
            options=options,
            python=sys.executable,
            env=dict(os.environ),
            adopt_orphans=True,
            on_restart=_say_restart,
        )
    mode, rounds = federation.options.mode, federation.options.rounds
    status = 1
    lost: RoundsLost | None = None
    with _stop_on_signals() as stopped:
        try:
            if resume is None:
                _say(f"preparing {folder} (key ceremony, ledger, settings)")
            else:
                _say(f"resuming {folder} (its keys, state and ledger; no new ceremony)")
            layout = federation.prepare()
            federation.start()
            if federation.resumed:
                for line in federation.carry_over():
                    _say(line)
            stopped()
            _say(f"services up; logs in {layout.run_dir / 'logs'}; API {layout.api.url}")
            status = federation.run(poll=stopped)
            stopped()
            report = run_report(layout, mode=mode, rounds_wanted=rounds)
            _say(f"run ended (exit {status}); the result follows on standard output")
            typer.echo(render(report), nl=False)
            try:
                report.check()
            except RoundsLost as exc:
                lost, status = exc, status or 1
                if not exit_after_run:  # with --exit it ends the command (below)
                    _say(f"error: {exc}")
            if not exit_after_run:
                _say("the services keep running (API, console); Ctrl-C stops them")
                while True:
                    assert federation.supervisor is not None
                    federation.supervisor.check()
                    stopped()
                    time.sleep(1.0)
        except Stopped as stop:
            _say(f"{stop}: stopping every process")
            status, lost = (130 if str(stop) == "SIGINT" else 143), None
        except ProcessFailed as exc:  # the coded error is one line: the log's end goes first
            if exc.log_path is not None:
                _say(f"end of {exc.log_path}:\n{exc.tail or '(the log is empty)'}")
            raise
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stop
                signal.signal(signum, signal.SIG_IGN)
            federation.stop()
    _say("stopped")
    if lost is not None:
        raise lost  # DEPLOY_ROUNDS_LOST, exit 1
    if status:
        raise typer.Exit(status)

"""What a ``secure-fed deploy local`` run did, as a plain-text report of at most 100 columns.

:func:`run_report` reads the rounds the ledger stored (stage, who uploaded, who was
excluded, the publication's SM3 or the reason a round stopped), lists where each
party's log and state are, and the next commands an operator runs (the officer's
console, an audit report, the audit log check and, in ckks mode, the recomputation of
every decryption). :func:`render` lays it out as aligned tables; the command line
prints it on standard output (progress and the processes' logs go to standard error).
"""

from __future__ import annotations

import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from privacy_ledger.db import create_ledger_engine
from privacy_ledger.models import RoundRow
from secure_fed.deploy.local_files import LocalLayout
from secure_fed.deploy.node_ledger import sqlite_file
from secure_fed.deploy.supervisor import RESTARTS_FILE, read_restarts
from secure_fed.errors import DeploymentFailed

__all__ = [
    "RoundSummary",
    "RoundsLost",
    "RunReport",
    "WIDTH",
    "lost_rounds",
    "render",
    "round_summaries",
    "run_report",
]

#: Widest line :func:`render` writes.
WIDTH = 100
_NAMESPACE = "local"


@dataclass(frozen=True, kw_only=True)
class RoundSummary:
    """One stored round: its stage, who uploaded and was excluded, and its outcome."""

    round_id: int
    stage: str
    roster: tuple[str, ...]
    excluded: tuple[str, ...]
    publication_sm3: str | None
    reason: str | None

    @property
    def outcome(self) -> str:
        """``published <sm3 prefix>``, or why the round did not publish."""
        if self.stage == "published" and self.publication_sm3:
            return f"published {self.publication_sm3[:16]}..."
        return self.reason or f"not published (stage {self.stage})"


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """The rounds, the parties' files and the next commands of one run."""

    run_dir: Path
    rounds_wanted: int
    rounds: tuple[RoundSummary, ...]
    ledger: str
    parties: tuple[tuple[str, str, str], ...]
    commands: tuple[tuple[str, str], ...]
    #: ``(process, what ended it each time)`` for every process the supervisor restarted.
    restarts: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def published(self) -> int:
        """How many rounds published."""
        return sum(r.stage == "published" for r in self.rounds)

    def check(self) -> None:
        """Raise :class:`RoundsLost` unless every configured round published."""
        lost = lost_rounds(self.rounds, self.rounds_wanted)
        if lost:
            raise RoundsLost(published=self.published, wanted=self.rounds_wanted, lost=lost)


class RoundsLost(DeploymentFailed):
    """A ``deploy local`` run ended with fewer rounds published than it was configured for.

    The message says how many published of how many, and why each other round
    did not (its stored reason, or that it never ran); ``published``,
    ``wanted`` and ``lost`` hold the same.
    """

    code = "DEPLOY_ROUNDS_LOST"

    def __init__(self, *, published: int, wanted: int, lost: tuple[str, ...]) -> None:
        self.published, self.wanted, self.lost = published, wanted, lost
        super().__init__(f"{published} of {wanted} configured rounds published; " + "; ".join(lost))


def lost_rounds(rounds: tuple[RoundSummary, ...], wanted: int) -> tuple[str, ...]:
    """Why fewer than ``wanted`` rounds published: ``round N: <why>`` for each, else empty.

    A round aborted and run again under the next id (the ServerApp's retry after a
    failed service) costs nothing once ``wanted`` rounds published, so the run is
    judged by how many published, not by which ids. When it is short, every stored
    round that did not publish is named with its stored reason, and every id of
    ``1..wanted`` the ledger holds nothing of as never opened.
    """
    if sum(r.stage == "published" for r in rounds) >= wanted:
        return ()
    stored = {r.round_id for r in rounds}
    lost = [(r.round_id, f"{r.stage}: {r.outcome}") for r in rounds if r.stage != "published"]
    lost += [(rid, "never opened") for rid in range(1, wanted + 1) if rid not in stored]
    return tuple(f"round {rid}: {why}" for rid, why in sorted(lost))


def _summary(round_id: str, stage: str, state: dict[str, Any]) -> RoundSummary:
    number = str(round_id).rpartition(":")[2]
    return RoundSummary(
        round_id=int(number) if number.isdigit() else 0,
        stage=str(stage),
        roster=tuple(sorted(dict(state.get("uploads") or {}))),
        excluded=tuple(str(p) for p in state.get("excluded") or ()),
        publication_sm3=state.get("publication_sm3"),
        reason=state.get("reason"),
    )


def round_summaries(database_url: str, namespace: str = _NAMESPACE) -> tuple[RoundSummary, ...]:
    """Return every round the ledger stores for ``namespace``, in round order."""
    engine = create_ledger_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(RoundRow.id, RoundRow.stage, RoundRow.state)).all()
    finally:
        engine.dispose()
    mine = [r for r in rows if str(r[0]).rpartition(":")[0] == namespace]
    return tuple(sorted((_summary(*r) for r in mine), key=lambda s: s.round_id))


def _parties(layout: LocalLayout, mode: str) -> tuple[tuple[str, str, str], ...]:
    """``(party, log, state)``, paths relative to the run folder."""
    verifier = (layout.keys / "verifier").exists()  # ckks: made by the key ceremony
    second = ["helper"] if mode == "shares" else ["verifier"] if verifier else []
    names = ["keyauthority", *second]
    rows = [(n, f"logs/{n}.log", f"{n}/, its audit log {n}/audit.db") for n in names]
    rows.append(("api", "logs/api.log", "api/api.toml, the ledger (below)"))
    rows.append(("superlink", "logs/superlink.log", "superlink/"))
    rows += [(f"node {p}", f"logs/supernode-{p}.log", f"nodes/{p}/state/") for p in layout.ids]
    rows.append(("run", "logs/run.log", "server/server.toml (the ServerApp's settings)"))
    return tuple(rows)


def _at(run: Path, path: Path, prefix: str = "") -> str:
    """``path`` as a shell word under ``$RUN`` (double-quoted when the run folder needs it)."""
    quote = "" if shlex.quote(str(run)) == str(run) else '"'
    return f"{quote}{prefix}$RUN/{path.relative_to(run).as_posix()}{quote}"


def _commands(layout: LocalLayout, mode: str) -> tuple[tuple[str, str], ...]:
    """Return ``(what, command)`` of each next step; paths in the run folder use ``$RUN``."""
    run = layout.run_dir
    file = sqlite_file(layout.database_url)
    inside = file is not None and file.is_relative_to(run)
    db = _at(run, file, "sqlite:///") if inside and file else shlex.quote(layout.database_url)
    ca, config = _at(run, layout.ca_file), _at(run, layout.api.config)
    out = [
        ("set RUN first (the commands below use it)", f"RUN={shlex.quote(str(run))}"),
        (
            f"console: a token, then open {layout.api.url}/console/ (CA {ca})",
            f"secure-fed api token create --role officer --name me --config {config}",
        ),
        (
            "audit report",
            f"secure-fed audit export --db {db} --format html --out {_at(run, run / 'audit.html')}",
        ),
        ("audit log", f"secure-fed ledger verify --db {db}"),
    ]
    if mode == "ckks":
        for role in ("scoring", "publication"):
            context = layout.keys / "aggregator" / f"{role}.context"
            if context.is_file():
                command = (
                    f"secure-fed ledger verify --db {db} --recompute "
                    f"--public-context {_at(run, context)}"
                )
                out.append((f"recompute every {role} decryption", command))
    return tuple(out)


def run_report(layout: LocalLayout, *, mode: str, rounds_wanted: int) -> RunReport:
    """Read the run's rounds from its ledger and describe its files and next commands."""
    return RunReport(
        run_dir=layout.run_dir,
        rounds_wanted=rounds_wanted,
        rounds=round_summaries(layout.database_url),
        ledger=layout.database_url,
        parties=_parties(layout, mode),
        commands=_commands(layout, mode),
        restarts=_restarts(layout.run_dir),
    )


def _restarts(run: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every restarted process (first restart first) and how it had ended each time."""
    ended: dict[str, list[str]] = {}
    for restart in read_restarts(run):
        held = " while its place was still held" if restart.busy else ""
        ended.setdefault(restart.process, []).append(restart.exit + held)
    return tuple((name, tuple(exits)) for name, exits in ended.items())


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _restart_lines(report: RunReport, width: int) -> list[str]:
    if not report.restarts:
        return ["Restarts: none"]
    lines = [f"Restarts (the supervisor's record: {RESTARTS_FILE})"]
    for name, exits in report.restarts:
        why = ", ".join(dict.fromkeys(exits))  # each reason once, in order
        lines += _wrap(f"{name} restarted {_times(len(exits))} ({why})", width, "")
    return lines


def _rounds(report: RunReport, width: int) -> list[str]:
    """One row per round: number, stage, then outcome and roster wrapped in the last column."""
    lines = [f"{'round':<7}{'stage':<12}outcome; who uploaded; who was excluded"]
    for r in report.rounds:
        text = (
            f"{r.outcome}; uploaded: {', '.join(r.roster) or 'nobody'}; "
            f"excluded: {', '.join(r.excluded) or 'nobody'}"
        )
        wrapped = textwrap.wrap(text, width - 19, break_on_hyphens=False) or [""]
        lines.append(f"{r.round_id:<7}{r.stage:<12}{wrapped[0]}")
        lines += [" " * 19 + more for more in wrapped[1:]]
    return lines if report.rounds else [*lines, "(no round was stored)"]


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(
        text, width, initial_indent=indent, subsequent_indent=indent + "  ",
        break_on_hyphens=False, break_long_words=False,
    )  # fmt: skip


def _command(what: str, command: str, width: int) -> list[str]:
    r"""Return ``what:`` and the command below it, continued with `` \`` (pastes into a shell)."""
    words = textwrap.wrap(command, width - 8, break_on_hyphens=False, break_long_words=False)
    body = [f"    {w} \\" for w in words[:-1]] + [f"    {words[-1]}"]
    return [*_wrap(f"{what}:", width, ""), body[0], *(f"  {line}" for line in body[1:])]


def render(report: RunReport, *, width: int = WIDTH) -> str:
    """Return the report as text; no line is longer than ``width`` (but a longer path)."""
    # the outcome first, whole: a long run folder never splits it (or a script's grep)
    lines = [f"{report.published} of {report.rounds_wanted} rounds published"]
    lines += [f"run folder: {report.run_dir}"]
    lines += ["", "Rounds", *_rounds(report, width), "", "Parties (in the run folder)"]
    column = max(len(name) for name, _, _ in report.parties) + 2
    for name, log, state in report.parties:
        lines += _wrap(f"{name:<{column}}log   {log}", width, "")
        lines += _wrap(f"{'':<{column}}state {state}", width, "")
    lines += _wrap(f"ledger: {report.ledger}", width, "")
    lines += ["", *_restart_lines(report, width)]
    lines += ["", "Next commands"]
    for what, command in report.commands:
        lines += _command(what, command, width)
    return "\n".join(lines) + "\n"

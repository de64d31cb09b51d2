"""The demo's round table: the filter's decision per upload, ground truth apart, whole ids.

Rendered from :class:`RoundResult` values as the federation returns them,
into a non-terminal console (what a pipe or a CI log gets), and through a
terminal screen with the progress bar on the same terminal.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from api.cli.demo import (
    TABLE_WIDTH,
    _notes,
    _progress,
    _stdout_console,
    print_summary,
    round_printer,
    round_table,
)
from secure_fed.federation.federation import ParticipantRound, RoundResult
from secure_fed.report.weights import terms_cell
from tests.api.cli.terminal import screen

LONG_ID = "hospital-university-medical-centre-of-the-north-17"


def _row(pid: str, **changes: object) -> ParticipantRound:
    fields: dict[str, object] = {
        "participant_id": pid,
        "architecture": "transformer",
        "attacker": False,
        "accuracy_federated": 0.9,
        "accuracy_local": 0.8,
        "epsilon_spent": 3.2,
        "weight": 0.25,
        "score": 4.0,
        "private_training": "trained",
        "decision": "keep",
        "factor": 1.0,
        "upload": "accepted",
        "base_share": 0.5,
        "merit": 1.0,
        "copies": 0,
        "applied_factor": 1.0,
        "max_weight": 0.5,
    }
    return ParticipantRound(**{**fields, **changes})  # type: ignore[arg-type]


def _render(result: RoundResult, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False).print(round_table(result))
    return buffer.getvalue()


def _published() -> RoundResult:
    rows = (
        _row(LONG_ID),
        _row(
            "bank-2",
            attacker=True,
            score=812.5,
            decision="downweight",
            factor=0.05,
            applied_factor=0.05,
            weight=0.01,
        ),
    )
    return RoundResult(round_id=3, stage="published", reason=None, rows=rows, seconds=1.0)


@pytest.mark.parametrize("width", [80, 200])
def test_table_never_truncates_ids_and_shows_the_decision(width: int) -> None:
    text = _render(_published(), width)
    assert "…" not in text
    firsts = [line.split(" ", 1)[0] for line in text.splitlines()]
    assert LONG_ID in "".join(firsts)  # folded over lines of its column when narrow, never cut
    if width >= 200:
        assert any(LONG_ID in line for line in text.splitlines())  # whole on one line
        bank = next(line for line in text.splitlines() if "bank-2" in line)
        assert "attacker" in bank and "downweight" in bank and "812.50" in bank


def test_piped_console_is_wide_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = _stdout_console()
    assert not console.is_terminal and console.width >= 200
    text = io.StringIO()
    console.file = text
    console.print(round_table(_published()))
    header = next(line for line in text.getvalue().splitlines() if "participant" in line)
    for col in ("truth", "score", "decision", "weight", "terms b m u f", "epsilon", "accuracy"):
        assert col in header  # every header on one line: nothing folded


def test_refused_upload_is_reported_in_full() -> None:
    reason = "[UPLOAD_RECEIPT_MISSING] participant 'bank-2' sent no budget receipt for round 1"
    rows = (
        _row("hospital-1", upload="accepted", decision=None, weight=None, score=None),
        _row("bank-2", upload=f"refused: {reason}", decision=None, weight=None, score=None),
    )
    result = RoundResult(
        round_id=1,
        stage="aborted",
        reason="round 1 aborted: only 1 of the required 2 participants uploaded",
        rows=rows,
        seconds=1.0,
    )
    text = _render(result, 160)
    assert "round 1: aborted (only 1 of the required 2 participants uploaded)" in text
    assert "refused" in next(line for line in text.splitlines() if "bank-2" in line)
    assert _notes(result, set()) == [f"bank-2: upload refused: {reason}"]


#: Rounds 1-2 of a real ``secure-fed demo --attack label_flip:1`` run, as results.json has them.
RESULTS = json.loads((Path(__file__).parent / "demo_rounds.json").read_text())


def _rounds() -> list[RoundResult]:
    return [
        RoundResult(
            round_id=r["round_id"],
            stage=r["stage"],
            reason=r["reason"],
            seconds=r["seconds"],
            rows=tuple(ParticipantRound(**row) for row in r["rows"]),
        )
        for r in RESULTS["rounds"]
    ]


@pytest.mark.parametrize("pid", ["hospital-1", "hospital-100"])
def test_round_table_fits_100_columns_with_every_cell_whole(pid: str) -> None:
    """At 100 columns nothing wraps: each row is one line with its id, numbers and terms."""
    for result in _rounds():
        rows = tuple(
            ParticipantRound(**{**r.__dict__, "participant_id": pid + r.participant_id[-2:]})
            for r in result.rows
        )
        result = RoundResult(**{**result.__dict__, "rows": rows})
        lines = _render(result, TABLE_WIDTH).splitlines()
        assert max(len(line) for line in lines) <= TABLE_WIDTH
        for row in result.rows:
            line = next(line for line in lines if line.startswith(row.participant_id + " "))
            cells = (
                f"{row.score:.2f}",
                f"{row.weight:.3f}",
                terms_cell(row.__dict__),
                f"{row.epsilon_spent:.2f}",
                f"{100 * row.accuracy_local:.1f}% -> {100 * row.accuracy_federated:.1f}%",
                "attacker" if row.attacker else "honest",
            )
            assert all(cell in line for cell in cells), line
        assert len([line for line in lines if line[:1].isalpha()]) >= len(result.rows)


def test_decision_says_downweight_only_when_the_applied_factor_is_below_1() -> None:
    rows = (
        _row("applied", decision="downweight", factor=0.05, applied_factor=0.05),
        _row("unapplied", decision="downweight", factor=0.05, applied_factor=1.0),
        _row("aborted", decision="downweight", factor=0.05, applied_factor=None),
    )
    result = RoundResult(round_id=2, stage="published", reason=None, rows=rows, seconds=1.0)
    lines = _render(result, TABLE_WIDTH).splitlines()

    def decision(pid: str) -> str:
        return next(line for line in lines if line.startswith(pid)).split()[3]

    assert decision("applied ") == "downweight"
    assert decision("unapplied ") == "keep"  # the policy flagged it; the weights kept f = 1
    assert "flagged (not applied)" in next(line for line in lines if line.startswith("aborted"))


def test_progress_bar_leaves_no_residue_between_tables() -> None:
    """Tables print on stdout while the bar runs on stderr, both one terminal."""
    stream = io.StringIO()
    out = Console(file=stream, force_terminal=True, width=TABLE_WIDTH, color_system=None)
    progress = _progress(
        Console(file=stream, force_terminal=True, width=TABLE_WIDTH, color_system=None)
    )
    rounds = _rounds()
    with progress:
        task = progress.add_task("round 1: training hospital-1", total=len(rounds))
        progress.refresh()
        on_round = round_printer(out, progress, task, tables=True)
        for result in rounds:
            on_round(result)
            progress.refresh()
    shown = [line for line in screen(stream.getvalue()) if line]
    expected = [
        line.rstrip()
        for result in rounds
        for line in _render(result, TABLE_WIDTH).splitlines()
        if line.strip()
    ]
    assert shown == expected  # whole table lines, no bar left on any of them


def test_closing_lines_wrap_between_words_at_100_columns() -> None:
    from secure_fed.demo import NOISE, DemoResults

    results = DemoResults(
        config={},
        rounds=_rounds(),
        privacy={"noise": NOISE[False]},
        results_path="/tmp/" + "d" * 120 + "/results.json",
        report_path="/tmp/demo/report.html",
        ledger_url="sqlite:////tmp/demo/ledger.db",
    )
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=TABLE_WIDTH, force_terminal=False), results)
    lines = buffer.getvalue().splitlines()
    sentences = [line for line in lines if not line.startswith(("results ", "report ", "ledger "))]
    assert len(sentences) >= 3 and all(len(line) <= TABLE_WIDTH for line in sentences)
    assert f"DP noise: {NOISE[False]}" in " ".join(line.strip() for line in sentences)
    assert f"results {results.results_path}" in lines  # a path is never cut

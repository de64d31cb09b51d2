"""The demo's round table: the filter's decision per upload, ground truth apart, whole ids.

Rendered from :class:`RoundResult` values as the federation returns them,
into a non-terminal console (what a pipe or a CI log gets).
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from api.cli.demo import _notes, _stdout_console, round_table
from secure_fed.federation.federation import ParticipantRound, RoundResult

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
    }
    return ParticipantRound(**{**fields, **changes})  # type: ignore[arg-type]


def _render(result: RoundResult, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False).print(round_table(result))
    return buffer.getvalue()


def _published() -> RoundResult:
    rows = (
        _row(LONG_ID),
        _row("bank-2", attacker=True, score=812.5, decision="downweight", factor=0.05, weight=0.01),
    )
    return RoundResult(round_id=3, stage="published", reason=None, rows=rows, seconds=1.0)


@pytest.mark.parametrize("width", [80, 200])
def test_table_never_truncates_ids_and_shows_the_decision(width: int) -> None:
    text = _render(_published(), width)
    assert "…" not in text
    cells = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert LONG_ID in "".join(cells)  # folded over lines when narrow, never cut
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
    for col in ("truth", "upload", "score", "decision", "weight", "local-only", "federated"):
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

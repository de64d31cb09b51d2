"""report.html shows the weight terms as applied: the decision, thresholds and cap only where
they applied, and every factor of the published weight."""

from __future__ import annotations

import html as html_text
import re
from typing import Any

from secure_fed.report.demo_report import render_demo_report
from secure_fed.report.weights import (
    applied_decision,
    cap_text,
    copies_text,
    terms_cell,
    threshold_text,
)


def _row(pid: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "participant_id": pid,
        "architecture": "mlp",
        "attacker": False,
        "upload": "accepted",
        "score": 9.0,
        "decision": "keep",
        "factor": 1.0,
        "weight": 0.3,
        "epsilon_spent": 2.0,
        "accuracy_federated": 0.9,
        "accuracy_local": 0.8,
        "base_share": 0.25,
        "merit": 1.0,
        "copies": 0,
        "applied_factor": 1.0,
        "max_weight": 0.4,
        "downweight_threshold": 21.7,
        "exclude_threshold": 27.9,
        "smoothed_score": 9.0,
    }
    row.update(over)
    return row


#: Round 1: "flagged" crossed the down-weight threshold and got factor 0.05 applied; "capped"
#: was held at the cap; "copy" shares its weight with one near-duplicate; "out" was excluded.
ROWS = [
    _row("capped", weight=0.4),
    _row("copy", copies=1, weight=0.2),
    _row(
        "flagged",
        decision="downweight",
        factor=0.05,
        applied_factor=0.05,
        score=60.0,
        smoothed_score=35.0,
        weight=0.01,
    ),
    _row(
        "out",
        decision="exclude",
        factor=0.0,
        weight=0.0,
        smoothed_score=80.0,
        **dict.fromkeys(["base_share", "merit", "copies", "applied_factor"]),
    ),
]


def _results(rows: list[dict[str, Any]], stage: str = "published") -> dict[str, Any]:
    return {
        "config": {"participants": len(rows), "rounds": 1, "dataset": "digits", "mode": "p"},
        "rounds": [{"round_id": 1, "stage": stage, "reason": None, "rows": rows}],
        "final_mean_accuracy": {"federated": 0.9, "local_only": 0.8},
        "privacy": {"secure_noise": True},
        "ledger": {},
    }


def _cells(html: str, pid: str) -> list[list[str]]:
    """Text of every table row of ``pid`` (the round table, then the terms table)."""
    rows = re.findall(r"<tr><td>" + re.escape(pid) + r"</td>(.*?)</tr>", html, flags=re.S)
    return [
        [
            html_text.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S)
        ]
        for r in rows
    ]


def test_downweight_is_said_only_where_the_applied_factor_is_below_one() -> None:
    html = render_demo_report(_results(ROWS))
    flagged_round, flagged_terms = _cells(html, "flagged")
    assert "downweight x0.05" in flagged_round
    assert flagged_terms == [
        "0.250",
        "1.000",
        "1.00",
        "downweight x0.05",
        "smoothed 35.00 > 21.70",
        "0.0125",
        "",
        "0.010",
    ]
    capped_round, capped_terms = _cells(html, "capped")
    assert "keep" in capped_round and "capped at 0.400" in capped_terms
    assert capped_terms[4] == ""  # no threshold where none applied
    copy_terms = _cells(html, "copy")[1]
    assert copy_terms[2] == "0.50 (1 copy)" and copy_terms[5] == "0.1250" and copy_terms[6] == ""
    out_round, out_terms = _cells(html, "out")
    assert "exclude" in out_round
    assert out_terms[3] == "excluded" and out_terms[4] == "smoothed 80.00 > exclude 27.90"


def test_a_policy_downweight_that_was_not_applied_is_not_called_one() -> None:
    """The policy said x0.05 but the weight carries factor 1: the report says keep."""
    row = _row("waived", decision="downweight", factor=0.05, applied_factor=1.0, weight=0.4)
    html = render_demo_report(_results([row, _row("other", weight=0.6, max_weight=1.0)]))
    assert "downweight" not in "".join(sum(_cells(html, "waived"), []))
    assert applied_decision(row) == "keep" and threshold_text(row) == ""


def test_an_aborted_round_shows_the_policy_decision_as_not_applied() -> None:
    terms = dict.fromkeys(["base_share", "merit", "copies", "applied_factor", "weight"])
    row = _row("a", decision="downweight", factor=0.05, **terms)
    html = render_demo_report(_results([row], stage="aborted"))
    assert "flagged x0.05 (not applied)" in html
    assert "<th>base share b</th>" not in html  # no terms table without terms


def test_results_without_terms_still_render() -> None:
    """A results.json from before the terms existed renders its round table."""
    old = {k: v for k, v in _row("a").items() if k not in ("base_share", "applied_factor")}
    html = render_demo_report(_results([old]))
    assert "<td>keep (not applied)</td>" in html and "<th>base share b</th>" not in html


def test_compact_cell_for_a_narrow_table() -> None:
    cell = terms_cell(ROWS[0])
    assert cell == "b0.25 m1.00 u1.00 f1.00*" and len(cell) <= 27
    assert terms_cell(ROWS[3]) == "-"
    assert cap_text(ROWS[1]) == "" and copies_text(_row("x", copies=2)) == "0.33 (2 copies)"

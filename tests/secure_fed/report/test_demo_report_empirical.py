"""report.html shows each empirical lower bound, as the demo read it from the ledger."""

from __future__ import annotations

import re
from pathlib import Path

from secure_fed.demo import DemoResults, _empirical_audits
from secure_fed.report.demo_report import render_demo_report
from tests.empirical_helpers import record_audit
from tests.empirical_ledger import ASSET, PARTICIPANTS, charged_ledger


def _results(tmp_path: Path, *, above: bool = False) -> dict[str, object]:
    ledger = charged_ledger(tmp_path)
    try:
        record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r2"), canaries=64, above=above)
        budgets = {
            p: {"spent": float(ledger.epsilon_spent(p, ASSET)), "limit": 8.0} for p in PARTICIPANTS
        }
        audits = _empirical_audits(ledger)  # what the demo writes into results.json
    finally:
        ledger.engine.dispose()
    config = {"participants": 2, "rounds": 2, "mode": "plaintext", "epsilon": 8.0}
    return DemoResults(
        config=config, budgets=budgets, privacy={"empirical_audit": audits}
    ).to_dict()


def _page(results: dict[str, object]) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", render_demo_report(results)))


def test_report_shows_the_bound_and_not_audited(tmp_path: Path) -> None:
    results = _results(tmp_path)
    audits = results["privacy"]["empirical_audit"]  # type: ignore[index]
    bound = audits[PARTICIPANTS[0]]["epsilon_lower_bound"]
    page = _page(results)
    assert "Accounted epsilon beside the empirical lower bound" in page
    assert f"{bound} (empirical lower bound (95%, 64 canaries))" in page
    row = page.split(PARTICIPANTS[1])[-1]
    assert row.split("</tr>")[0].strip().split(" ")[1:3] == ["not", "audited"]
    assert "not applied as charged" not in page


def test_report_flags_a_bound_above_the_accounted_epsilon(tmp_path: Path) -> None:
    assert "DP was not applied as charged" in _page(_results(tmp_path, above=True))

"""The demo's closing summary shows each participant's empirical lower bound from the ledger."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from api.cli.demo import TABLE_WIDTH, print_summary, privacy_table
from tests.empirical_helpers import record_audit
from tests.empirical_ledger import ASSET, PARTICIPANTS, charged_ledger

LABEL = "empirical lower bound (95%, 64 canaries)"


def _text(renderable: object) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=TABLE_WIDTH, force_terminal=False).print(renderable)
    return buffer.getvalue()


def test_summary_table_shows_the_bound_beside_the_accounted_epsilon(tmp_path: Path) -> None:
    ledger = charged_ledger(tmp_path)
    try:
        audit = record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r2"), canaries=64)
        spent = ledger.epsilon_spent(PARTICIPANTS[0], ASSET)
    finally:
        ledger.engine.dispose()
    table = privacy_table(f"sqlite:///{tmp_path / 'ledger.db'}")
    assert table is not None
    lines = _text(table).splitlines()
    assert all(len(line) <= TABLE_WIDTH for line in lines)
    flat = " ".join(" ".join(lines).split())
    assert f"{audit.epsilon_lower_bound} ({LABEL})" in flat
    assert f"{float(spent):.4f}" in flat and "r1 to r2" in flat
    (other,) = [line for line in lines if line.startswith(PARTICIPANTS[1])]
    assert other.rstrip().endswith("not audited")


def test_a_bound_above_the_accounted_epsilon_is_called_out(tmp_path: Path) -> None:
    ledger = charged_ledger(tmp_path)
    try:
        record_audit(ledger, PARTICIPANTS[1], ASSET, ("r2", "r2"), above=True, canaries=64)
    finally:
        ledger.engine.dispose()
    flat = " ".join(_text(privacy_table(f"sqlite:///{tmp_path / 'ledger.db'}")).split())
    assert "EXCEEDS the accounted epsilon (DP not applied as charged)" in flat


def test_print_summary_prints_it_and_creates_no_ledger(tmp_path: Path) -> None:
    from secure_fed.demo import DemoResults

    ledger = charged_ledger(tmp_path)
    try:
        record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r1"), canaries=64)
    finally:
        ledger.engine.dispose()
    buffer = io.StringIO()
    results = DemoResults(config={}, ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    print_summary(Console(file=buffer, width=TABLE_WIDTH, force_terminal=False), results)
    assert LABEL in " ".join(buffer.getvalue().split())
    missing = tmp_path / "none" / "ledger.db"
    assert privacy_table(f"sqlite:///{missing}") is None and not missing.exists()

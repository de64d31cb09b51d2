"""The demo's report, its stage events and ``--reproducible`` (one run in-process, one by CLI).

Both runs use the same small plaintext settings with ``--reproducible``: the
DP noise is then seeded (INSECURE, recorded as such), so the two runs must
give identical figures; without it they may not (the noise comes from
``secrets``). The in-process run records the federation's stage events; the
command-line run checks that ``--json`` leaves nothing but JSON on stdout.
``report.html`` is looked at in headless Chromium.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app
from secure_fed.demo import DemoConfig, run_demo
from secure_fed.federation.observer import StageEvent
from secure_fed.learning.logit_adjustment import PRIOR_ROUND_SUFFIX
from tests.compliance.chromium import render

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

SMALL = {"rounds": 2, "participants": 2, "mode": "plaintext", "seed": 3}
FIGURES = ("accuracy_federated", "accuracy_local", "epsilon_spent", "weight", "score")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("demo-report")
    events: list[StageEvent] = []
    config = DemoConfig(**SMALL, reproducible=True, out=base / "a")  # type: ignore[arg-type]
    run_demo(config, on_stage=events.append)
    args = ["demo", "--reproducible", "--json", "--out", str(base / "b")]
    for key, value in SMALL.items():
        args += [f"--{key}", str(value)]
    cli = CliRunner().invoke(app, args)
    assert cli.exit_code == 0, cli.output
    return {"base": base, "events": events, "cli": cli}


def _figures(results: dict[str, Any]) -> list[tuple[object, ...]]:
    return [
        (r["round_id"], r["stage"], row["participant_id"], *(row[f] for f in FIGURES))
        for r in results["rounds"]
        for row in r["rows"]
    ]


def test_reproducible_runs_give_identical_figures(runs: dict[str, Any]) -> None:
    a = json.loads((runs["base"] / "a" / "results.json").read_text())
    b = json.loads(runs["cli"].stdout)  # stdout is nothing but the JSON
    assert b == json.loads((runs["base"] / "b" / "results.json").read_text())
    assert [r["stage"] for r in a["rounds"]] == ["published", "published"]
    assert _figures(a) == _figures(b)
    assert a["budgets"] == b["budgets"]
    for results in (a, b):
        assert results["privacy"]["noise_rng"] == "insecure-seeded"
        assert results["privacy"]["noise"].startswith("INSECURE")


def test_reproducible_noise_is_recorded_in_the_ledger(runs: dict[str, Any]) -> None:
    with sqlite3.connect(runs["base"] / "a" / "ledger.db") as db:
        rows = db.execute("select round_id, versions from privacy_events").fetchall()
    rounds = sorted(r for r, _ in rows)
    # two participants x two rounds of DP-SGD, and each one's label prior (round 1 only)
    assert rounds == sorted(["r1", "r1", "r2", "r2", *[f"r1{PRIOR_ROUND_SUFFIX}"] * 2])
    versions = [json.loads(v) for _, v in rows]
    assert all(v["noise_rng"] == "insecure-seeded" for v in versions)
    assert "INSECURE" in runs["cli"].stderr  # and the command line says so


def test_stage_events_follow_the_round(runs: dict[str, Any]) -> None:
    events: list[StageEvent] = runs["events"]
    for rid in (1, 2):
        stages = [(e.stage, e.participant_id) for e in events if e.round_id == rid]
        for pid in ("hospital-1", "bank-2"):
            mine = [s for s, p in stages if p == pid]
            assert mine == ["training", "encrypting", "baseline", "verifying", "distilling"]
        order = [s for s, _ in stages]
        assert order.index("scoring") < order.index("aggregating") < order.index("distilling")
        assert order[-1] == "evaluating"
        assert max(i for i, s in enumerate(order) if s == "verifying") < order.index("scoring")


def test_report_renders_in_chromium(runs: dict[str, Any], tmp_path: Path) -> None:
    report = runs["base"] / "a" / "report.html"
    html = report.read_text(encoding="utf-8")
    assert "<script" not in html
    assert "INSECURE" in html and "signed tree head" in html
    for pid in ("hospital-1", "bank-2"):
        assert pid in html
    shot = tmp_path / "report.png"
    measured = render(report, shot, width=800)
    assert shot.stat().st_size > 10_000
    images = measured["images"]
    # accuracy, balanced accuracy, macro F1, epsilon, weight, score (no ROC AUC: 10 classes)
    assert len(images) == 6 and all(i["complete"] and i["width"] > 0 for i in images)
    assert measured["scrollWidth"] <= measured["innerWidth"]
    assert max(measured["tables"]) <= measured["innerWidth"]

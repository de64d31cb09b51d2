"""A label-prior release is committed like a round: the compliance report labels it."""

from __future__ import annotations

import re
from pathlib import Path

from matplotlib import pyplot as plt
from sqlalchemy import Engine

from compliance import export_report
from compliance.chart import epsilon_figure
from compliance.view import PRIOR_ROUND_SUFFIX, is_prior_release, round_label
from privacy_ledger import AuditLog, MechanismEvent, PrivacyLedger
from secure_fed.learning.logit_adjustment import PRIOR_ROUND_SUFFIX as LEARNING_SUFFIX
from tests.compliance.builder import ASSET, PARTICIPANTS, Built

LABEL = "label-prior release (before round 1)"


def test_round_label_names_the_release() -> None:
    assert PRIOR_ROUND_SUFFIX == LEARNING_SUFFIX  # the id the trainer gives the release
    assert round_label("r1-label-prior") == LABEL
    assert round_label("r3") == "r3" and not is_prior_release("r3")
    assert round_label(None) == "-"


def test_events_table_labels_the_release(ledger_copy: Engine, built: Built, tmp_path: Path) -> None:
    url = str(ledger_copy.url)
    log = AuditLog(signer=built.log_key, origin="test.example/audit", checkpoint_every=1)
    ledger = PrivacyLedger.from_url(url, audit=log)
    try:
        event = MechanismEvent(
            noise_multiplier=2.0, sample_rate=1.0, steps=1, delta=1e-5, max_grad_norm=1.0
        )
        ledger.commit(ledger.reserve(PARTICIPANTS[0], ASSET, event, round_id="r1-label-prior").id)
    finally:
        ledger.engine.dispose()
    out = tmp_path / "report.html"
    export_report(
        ledger_copy,
        fmt="html",
        out=out,
        signing_key=None,
        log_public_key=built.log_key.public_key,
        produced_by="officer@test",
    )
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", out.read_text()))
    assert LABEL in page and "r1-label-prior" not in page.split("Committed privacy events")[1]


def test_chart_marks_the_release_point() -> None:
    series = [
        {
            "participant": "p",
            "asset": "a",
            "rounds": 3,
            "every": 1,
            "points": [["r1-label-prior", "0.5"], ["r1", "1.5"], ["r2", "2.5"]],
        }
    ]
    fig = epsilon_figure(series, {("p", "a"): "8"})
    try:
        ax = fig.axes[0]
        assert "label-prior release counts as one" in ax.get_xlabel()
        notes = [t for t in ax.texts if "label-prior release" in t.get_text()]
        assert len(notes) == 1 and notes[0].xy[0] == 1
    finally:
        plt.close(fig)

"""Where the DP noise comes from, in the same words in every report.

Every privacy event records ``secure_rng: "false"`` (Opacus secure_mode off: a
PyTorch generator, seeded from the secrets module). The demo's reports and the
compliance report, its tables and its checklist all say "not cryptographic
(Opacus secure_mode off)"; none calls the noise "secure".
"""

from __future__ import annotations

import re
from typing import Any

from compliance import NOT_RECORDED
from compliance.view import NOT_CRYPTOGRAPHIC, SECURE_MODE_OFF, rng_cell
from secure_fed.demo import NOISE
from secure_fed.report import noise
from secure_fed.report.demo_report import render_demo_report
from tests.compliance.conftest import Exporter
from tests.secure_fed.report.test_demo_report_metrics import _results


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text))


def test_demo_and_compliance_share_the_words() -> None:
    assert noise.NOT_CRYPTOGRAPHIC == f"{NOT_CRYPTOGRAPHIC} ({SECURE_MODE_OFF})"
    for flag in (False, True):
        text = NOISE[flag]
        assert text == noise.noise_text(reproducible=flag)
        assert noise.NOT_CRYPTOGRAPHIC in text and not text.lower().startswith("secure")
    assert "secrets module" in NOISE[False] and "--seed" in NOISE[True]
    assert rng_cell("false") == rng_cell("off") == NOT_CRYPTOGRAPHIC
    assert rng_cell(NOT_RECORDED) == NOT_RECORDED


def test_demo_report_names_the_generator() -> None:
    results: dict[str, Any] = {
        **_results(None),
        "privacy": {"noise": NOISE[False], "noise_rng": noise.NOISE_RNG_SECRETS},
    }
    page = _flat(render_demo_report(results))
    assert f"DP noise {NOISE[False]}" in page
    assert "secure:" not in page


def test_compliance_report_and_checklist_say_not_cryptographic(export: Exporter) -> None:
    page = _flat(export("html").path.read_text())
    assert "secure RNG" not in page
    assert "noise RNG" in page and f" {NOT_CRYPTOGRAPHIC} " in page
    assert SECURE_MODE_OFF in page  # the tables' note says what the words mean

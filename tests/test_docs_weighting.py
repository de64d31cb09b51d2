"""The weighting pages describe the rule the code applies: the outlier factor always applies.

Evidence of correctness sets the merit only; no evidence waives the outlier factor
(``secure_fed.federation.weighting``). Figures measured under the old waiver are
marked as such and point at the test that asserts the current behaviour.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(page: str, number: int) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_federation_page_has_no_evidence_waiver() -> None:
    for number in (5, 9):
        section = _flat(_section("federation.md", number))
        assert "median_j c_j else 1" not in section
        assert "only for participants whose evidence" not in section
        assert "b m g u" not in section and "g_k" not in section
    assert "always applied" in _section("federation.md", 5)
    assert "whatever its evidence" in _flat(_section("federation.md", 9))


def test_benchmarks_scaling_figure_is_marked_as_predating_the_change() -> None:
    text = _flat((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8"))
    name = "test_overconfident_colluders_keep_the_outlier_factor_despite_top_evidence"
    at = text.index("+ 2.1 points")
    after = text[at : at + 900]
    assert "predate the removal of the evidence waiver" in after
    assert f"test_weighting_adversarial.py::{name}" in after
    assert "less than their share" in after
    tests = ROOT / "tests" / "secure_fed" / "federation" / "test_weighting_adversarial.py"
    assert f"def {name}(" in tests.read_text(encoding="utf-8")

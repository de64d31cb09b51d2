"""report.html's charts: axes from 0, the epsilon budget as a line, coinciding lines visible."""

from __future__ import annotations

from typing import Any

from matplotlib import pyplot as plt

from secure_fed.report.charts import figure

IDS = ("hospital-1", "bank-2", "hospital-3", "bank-4")


def _rounds() -> list[dict[str, Any]]:
    """Four participants spending the same epsilon each round (the demo's usual case)."""
    return [
        {
            "round_id": r,
            "rows": [
                {
                    "participant_id": pid,
                    "attacker": pid == "bank-4",
                    "epsilon_spent": 3.5 + 0.8 * r,
                    "weight": 0.25,
                }
                for pid in IDS
            ],
        }
        for r in (1, 2, 3)
    ]


def test_epsilon_chart_starts_at_zero_and_draws_the_budget() -> None:
    fig = figure(_rounds(), "epsilon", budget=8.0)
    try:
        ax = fig.axes[0]
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 8.0
        budget = [line for line in ax.get_lines() if line.get_label() == "budget 8"]
        assert len(budget) == 1 and set(budget[0].get_ydata()) == {8.0}
    finally:
        plt.close(fig)


def test_coinciding_lines_each_get_their_own_dash_pattern() -> None:
    fig = figure(_rounds(), "epsilon", budget=8.0)
    try:
        ax = fig.axes[0]
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("budget")]
        assert len(lines) == 4
        # matplotlib keeps the (offset, on-off sequence) of each line's dash pattern here
        patterns = [str(line._unscaled_dash_pattern) for line in lines]  # type: ignore[attr-defined]
        assert len(set(patterns)) == 4, patterns
        assert [line.get_label() for line in lines[1:]] == [
            "bank-2 (= hospital-1)",
            "hospital-3 (= hospital-1)",
            "bank-4 (attacker) (= hospital-1)",
        ]
        assert "coincide" in ax.get_title()
    finally:
        plt.close(fig)


def test_lines_that_differ_keep_their_plain_style() -> None:
    rounds = _rounds()
    for k, row in enumerate(rounds[0]["rows"]):
        row["weight"] = 0.1 * (k + 1)
    fig = figure(rounds, "weight")
    try:
        ax = fig.axes[0]
        assert ax.get_ylim()[0] == 0
        assert "coincide" not in ax.get_title()
        assert all(line.get_linestyle() == "-" for line in ax.get_lines())
    finally:
        plt.close(fig)

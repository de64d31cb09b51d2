"""Per-round charts of a demo run as PNG bytes (matplotlib, Agg backend).

Each chart has one line per participant over the rounds: accuracy, balanced
accuracy, macro F1 and (binary tasks) ROC AUC (federated solid, local-only
dashed, same colour), cumulative epsilon spent, the applied aggregation weight
and the outlier score. Every y axis starts at 0; the epsilon chart draws the
budget as a line, and lines that coincide (participants spending alike) are told
apart by dash patterns. Rounds in which a value is missing (an aborted round has
no weights) leave a gap; a chart without any value (ROC AUC of a multi-class
task) is left out of the report (:func:`has_values`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

__all__ = ["CHARTS", "figure", "has_values", "line_chart"]

_WIDTH_IN, _HEIGHT_IN, _DPI = 6.4, 2.8, 110

#: (key, title, y label, row fields) of each chart, in report order.
CHARTS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("accuracy", "Test accuracy", "accuracy", ("accuracy_federated", "accuracy_local")),
    (
        "balanced_accuracy",
        "Test balanced accuracy (mean per-class recall)",
        "balanced accuracy",
        ("balanced_accuracy_federated", "balanced_accuracy_local"),
    ),
    ("macro_f1", "Test macro F1", "macro F1", ("macro_f1_federated", "macro_f1_local")),
    ("roc_auc", "Test ROC AUC (binary task)", "ROC AUC", ("roc_auc_federated", "roc_auc_local")),
    ("epsilon", "Epsilon spent (cumulative)", "epsilon", ("epsilon_spent",)),
    ("weight", "Applied aggregation weight", "weight", ("weight",)),
    ("score", "Outlier score (pooled Mahalanobis)", "score", ("score",)),
)


def _series(rounds: Sequence[dict[str, Any]], pid: str, field: str) -> list[float | None]:
    values: list[float | None] = []
    for rnd in rounds:
        row = next((r for r in rnd["rows"] if r["participant_id"] == pid), None)
        value = None if row is None else row.get(field)
        values.append(float(value) if isinstance(value, int | float) else None)
    return values


def has_values(rounds: Sequence[dict[str, Any]], key: str) -> bool:
    """Whether chart ``key`` has at least one value in ``rounds``."""
    _, _, _, fields = next(c for c in CHARTS if c[0] == key)
    return any(
        isinstance(row.get(field), int | float)
        for rnd in rounds
        for row in rnd["rows"]
        for field in fields
    )


#: Dash patterns given, in turn, to a line that coincides with one drawn before it.
_DASHES: tuple[tuple[int, tuple[int, ...]], ...] = (
    (0, (6, 3)),
    (0, (2, 2)),
    (0, (8, 2, 2, 2)),
    (0, (1, 4)),
)


def _same(a: list[float | None], b: list[float | None]) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and abs(x - y) <= 1e-9)
        for x, y in zip(a, b, strict=True)
    )


def figure(rounds: Sequence[dict[str, Any]], key: str, *, budget: float | None = None) -> Any:
    """Return the matplotlib figure of chart ``key`` (one of :data:`CHARTS`) over ``rounds``.

    The y axis starts at 0. ``budget`` (the epsilon chart's limit) is drawn as a
    labelled horizontal line. A line with the same values as one drawn before it
    (participants spending epsilon alike) gets its own dash pattern and its
    legend entry says which line it coincides with, so no line hides another.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    _, title, ylabel, fields = next(c for c in CHARTS if c[0] == key)
    xs = [int(r["round_id"]) for r in rounds]
    rows = rounds[0]["rows"] if rounds else []
    pids = [row["participant_id"] for row in rows]
    names = {
        r["participant_id"]: r["participant_id"] + (" (attacker)" if r["attacker"] else "")
        for r in rows
    }
    fig, ax = plt.subplots(figsize=(_WIDTH_IN, _HEIGHT_IN), dpi=_DPI)
    drawn: list[tuple[str, list[float | None]]] = []
    coincide = 0
    for pid in pids:
        color = None
        for k, field in enumerate(fields):
            values = _series(rounds, pid, field)
            ys = [float("nan") if y is None else y for y in values]
            label = names[pid] if k == 0 else f"{pid} (local-only)"
            style: Any = "-" if k == 0 else "--"
            twin = next((name for name, seen in drawn if _same(seen, values)), None)
            if twin is not None and any(v is not None for v in values):
                style = _DASHES[coincide % len(_DASHES)]
                coincide += 1
                label += f" (= {twin})"
            (line,) = ax.plot(xs, ys, marker="o", linestyle=style, label=label, color=color)
            color = line.get_color()
            drawn.append((label.split(" (= ")[0], values))
    if budget is not None:
        ax.axhline(budget, color="black", linestyle="--", linewidth=1.0, label=f"budget {budget:g}")
    ax.set_title(title + (" (lines that coincide are dashed)" if coincide else ""), fontsize=10)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    if budget is not None:
        ax.set_ylim(top=max(ax.get_ylim()[1], budget * 1.08))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, linewidth=0.3)
    if pids or budget is not None:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def line_chart(rounds: Sequence[dict[str, Any]], key: str, *, budget: float | None = None) -> bytes:
    """Return the PNG of :func:`figure` for chart ``key`` over ``rounds``."""
    from matplotlib import pyplot as plt

    fig = figure(rounds, key, budget=budget)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()

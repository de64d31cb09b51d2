"""Epsilon over rounds, one line per participant asset, as a PNG (matplotlib, Agg backend).

The values are the ``epsilon_series`` rows of the report: cumulative,
whole-history epsilon after each committed round, recomputed from the log
(never per-round epsilons added up). Each line's budget is drawn dashed in
the same colour. The image is sized for the text width of an A4 page.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from compliance.view import is_prior_release, round_label

__all__ = ["epsilon_chart", "epsilon_figure"]

_WIDTH_IN, _HEIGHT_IN, _DPI = 6.4, 3.0, 150


def _number(text: object) -> float | None:
    try:
        return float(Decimal(str(text)))
    except (InvalidOperation, ValueError):
        return None


def epsilon_chart(
    series: Iterable[dict[str, Any]], limits: dict[tuple[str, str], str]
) -> bytes | None:
    """Return :func:`epsilon_figure` as PNG bytes, or ``None`` without a recorded point."""
    from matplotlib import pyplot as plt

    fig = epsilon_figure(series, limits)
    if fig is None:
        return None
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def epsilon_figure(series: Iterable[dict[str, Any]], limits: dict[tuple[str, str], str]) -> Any:
    """Return the chart's matplotlib figure, or ``None`` when no series has a recorded point.

    A label-prior release, committed under its own round id, is a point of its
    own: the point is labelled as such and the axis says it counts as one.

    Parameters
    ----------
    series
        ``epsilon_series`` rows (participant, asset, points of ``[round, epsilon]``).
    limits
        Epsilon limit per ``(participant, asset)``, drawn as dashed lines.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(_WIDTH_IN, _HEIGHT_IN), dpi=_DPI)
    drawn, top, right = 0, 0.0, 1
    priors: dict[int, str] = {}
    for row in series:
        every, rounds = int(row["every"]), int(row["rounds"])
        points = [
            (min((i + 1) * every, rounds), _number(eps)) for i, (_, eps) in enumerate(row["points"])
        ]
        for (x, _), (rid, _) in zip(points, row["points"], strict=True):
            if is_prior_release(rid):
                priors[x] = round_label(rid).replace(" (", "\n(")
        xs = [x for x, y in points if y is not None]
        ys = [y for _, y in points if y is not None]
        if not ys:
            continue
        label = f"{row['participant']} / {row['asset']}"
        (line,) = ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=label)
        limit = _number(limits.get((row["participant"], row["asset"])))
        if limit is not None:
            ax.axhline(limit, linestyle="--", linewidth=0.8, color=line.get_color())
        drawn, top, right = drawn + 1, max(top, limit or 0.0, *ys), max(right, *xs)
    if not drawn:
        plt.close(fig)
        return None
    if priors:
        # the label-prior release is committed like a round: say so on its tick and the axis
        for x, label in sorted(priors.items()):
            ax.annotate(
                label, xy=(x, 0), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=6
            )
        ax.set_xlabel("committed round (sequence number; a label-prior release counts as one)")
    else:
        ax.set_xlabel("committed round (sequence number)")
    ax.set_ylabel("epsilon spent (cumulative)")
    ax.set_ylim(0, top * 1.12 or 1.0)
    ax.set_xlim(0.5, right + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, linewidth=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig

"""Epsilon over rounds as inline SVG geometry (no script, no inline style).

The values are :attr:`privacy_ledger.budget.types.BudgetStatus.per_round`:
the cumulative, whole-history epsilon after each committed round, as the
ledger's accountant computes it (never per-round epsilons added up), the
same series the compliance report draws (:mod:`compliance.chart`). This
module only turns those numbers into coordinates; the template draws the
lines with CSS classes, so the page satisfies ``style-src 'self'``. Each
chart is paired with a table of the same numbers for screen readers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from api.rest.console.render import rounded
from compliance.view import is_prior_release, round_label
from privacy_ledger.budget.types import BudgetStatus

__all__ = ["Chart", "Series", "Tick", "epsilon_chart"]

WIDTH, HEIGHT = 640, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 44
#: Series colours cycle through this many CSS classes (``series-0`` ...).
PALETTE = 6
_MAX_X_LABELS = 10


@dataclass(frozen=True)
class Tick:
    """One axis tick: position in SVG units and its label."""

    at: float
    label: str


@dataclass(frozen=True)
class Series:
    """One budget's line: label, colour class, polyline points, dots and the limit height."""

    label: str
    css: str
    points: str
    dots: list[tuple[float, float, str]]
    limit_y: float


@dataclass(frozen=True)
class Chart:
    """Everything the SVG template needs."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    series: list[Series] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether no budget has a committed round yet."""
        return not any(s.dots for s in self.series)


def _nice_step(top: float, ticks: int = 5) -> float:
    raw = top / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def _y_axis(top: float) -> tuple[float, list[float]]:
    step = _nice_step(top)
    count = math.ceil(top / step)
    return step * count, [step * i for i in range(count + 1)]


def _label(value: float) -> str:
    return f"{value:g}"


def _round(round_id: str | None) -> str:
    return round_label(round_id) if round_id else "unlabelled"


def _tick(statuses: Sequence[BudgetStatus], i: int) -> str:
    """Sequence number ``i + 1``, or ``prior`` where a budget committed its label-prior release."""
    ids = [s.per_round[i].round_id for s in statuses if i < len(s.per_round)]
    return "prior" if any(is_prior_release(rid) for rid in ids) else str(i + 1)


def epsilon_chart(statuses: Sequence[BudgetStatus]) -> Chart:
    """Return the chart of cumulative epsilon after each committed round, one line per budget.

    Parameters
    ----------
    statuses
        Budgets from :meth:`privacy_ledger.PrivacyLedger.budget_status`; their
        limits are drawn as dashed lines of the same colour.
    """
    rounds = max((len(s.per_round) for s in statuses), default=0)
    peak = max(
        [float(s.limit) for s in statuses]
        + [float(p.epsilon_after) for s in statuses for p in s.per_round]
        + [1.0]
    )
    top, y_values = _y_axis(peak * 1.05)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max(rounds, 1)

    def x(i: int) -> float:
        return round(LEFT + plot_w * (i + 0.5) / span, 2)

    def y(value: Decimal | float) -> float:
        return round(TOP + plot_h * (1 - float(value) / top), 2)

    series = []
    for n, status in enumerate(statuses):
        dots = [
            (x(i), y(p.epsilon_after), f"{_round(p.round_id)}: {rounded(p.epsilon_after)}")
            for i, p in enumerate(status.per_round)
        ]
        series.append(
            Series(
                label=f"{status.participant_id} / {status.asset_id}",
                css=f"series-{n % PALETTE}",
                points=" ".join(f"{a},{b}" for a, b, _ in dots),
                dots=dots,
                limit_y=y(status.limit),
            )
        )
    every = max(1, math.ceil(rounds / _MAX_X_LABELS))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=WIDTH - RIGHT,
        top=TOP,
        bottom=HEIGHT - BOTTOM,
        series=series,
        x_ticks=[Tick(x(i), _tick(statuses, i)) for i in range(0, rounds, every)],
        y_ticks=[Tick(y(v), _label(v)) for v in y_values],
    )

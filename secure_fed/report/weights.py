"""How a published weight was formed, in words a reader of a round table can check.

A participant's weight is ``W = min(cap, lambda * b * m * u * f)``
(:mod:`secure_fed.federation.weighting`): base share ``b``, merit ``m``, copies
factor ``u = 1 / (1 + copies)``, the outlier factor ``f`` as applied, the cap.
These helpers turn one row of a round (a ``results.json`` row, or
``dataclasses.asdict`` of a :class:`~secure_fed.federation.federation.ParticipantRound`)
into the cells of ``report.html`` and the terminal table:

* the decision says ``downweight`` only when the applied factor is below 1, and
  ``keep`` when the policy's factor was not applied below 1;
* a threshold is shown only where it applied (the smoothed score above the
  down-weight or the exclusion threshold);
* the cap is shown only where it bound the weight.

A row without weight terms (an excluded upload, a round aborted before the
weights) shows the policy's decision, marked as not applied.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "applied_decision",
    "cap_text",
    "copies_text",
    "is_downweighted",
    "product",
    "terms_cell",
    "threshold_text",
]

#: Relative slack when comparing a weight with the cap (weights are rounded floats).
_CAP_SLACK = 1e-9


def _float(row: Mapping[str, object], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def is_downweighted(row: Mapping[str, object]) -> bool:
    """Return whether the outlier factor that multiplied the weight is below 1."""
    applied = _float(row, "applied_factor")
    return applied is not None and applied < 1


def applied_decision(row: Mapping[str, object]) -> str:
    """Return the decision as applied: ``keep``, ``downweight xF`` or ``exclude``.

    Without weight terms the policy's decision is shown with ``(not applied)``.
    """
    decision = row.get("decision")
    if decision is None:
        return "-"
    if decision == "exclude":
        return "exclude"
    applied = _float(row, "applied_factor")
    if applied is None:
        factor = _float(row, "factor")
        if decision == "downweight" and factor is not None:
            return f"flagged x{factor:.2f} (not applied)"
        return f"{decision} (not applied)"
    return f"downweight x{applied:.2f}" if applied < 1 else "keep"


def threshold_text(row: Mapping[str, object]) -> str:
    """``smoothed S > T`` for the threshold that applied, else the empty string."""
    smoothed = _float(row, "smoothed_score")
    if smoothed is None:
        return ""
    if row.get("decision") == "exclude":
        cut = _float(row, "exclude_threshold")
        return "" if cut is None else f"smoothed {smoothed:.2f} > exclude {cut:.2f}"
    cut = _float(row, "downweight_threshold")
    if not is_downweighted(row) or cut is None:
        return ""
    return f"smoothed {smoothed:.2f} > {cut:.2f}"


def cap_text(row: Mapping[str, object]) -> str:
    """``capped at C`` when the weight was held at the cap, else the empty string."""
    cap, weight = _float(row, "max_weight"), _float(row, "weight")
    if cap is None or weight is None or cap >= 1 or weight < cap * (1 - _CAP_SLACK):
        return ""
    return f"capped at {cap:.3f}"


def copies_text(row: Mapping[str, object]) -> str:
    """``u`` with the count behind it: ``1.00``, ``0.50 (1 copy)``, ``0.33 (2 copies)``."""
    copies = row.get("copies")
    if not isinstance(copies, int) or isinstance(copies, bool):
        return "-"
    u = 1.0 / (1 + copies)
    if copies == 0:
        return f"{u:.2f}"
    return f"{u:.2f} ({copies} cop{'y' if copies == 1 else 'ies'})"


def product(row: Mapping[str, object]) -> float | None:
    """``b * m * u * f`` before the normalisation and the cap (None without terms)."""
    base, merit = _float(row, "base_share"), _float(row, "merit")
    applied, copies = _float(row, "applied_factor"), row.get("copies")
    if base is None or merit is None or applied is None or not isinstance(copies, int):
        return None
    return base * merit * applied / (1 + copies)


def terms_cell(row: Mapping[str, object]) -> str:
    """One compact cell ``b.bb m.mm u.uu f.ff`` (at most 27 characters), or ``-``.

    For a terminal table that must stay narrow: base share, merit, copies
    factor and applied outlier factor; the cap is marked ``*`` when it bound.
    """
    base, merit = _float(row, "base_share"), _float(row, "merit")
    applied, copies = _float(row, "applied_factor"), row.get("copies")
    if base is None or merit is None or applied is None or not isinstance(copies, int):
        return "-"
    star = "*" if cap_text(row) else ""
    return f"b{base:.2f} m{merit:.2f} u{1 / (1 + copies):.2f} f{applied:.2f}{star}"

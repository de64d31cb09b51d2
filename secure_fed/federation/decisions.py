"""The round engine's outlier seam and the audit events of what it applied.

A round goes scores -> decisions -> weights along one path:

1. the mode scores every upload (one scalar each);
2. an :class:`OutlierFilter` turns the scores into one
   :class:`~secure_fed.secure.scoring.outlier.Decision` per participant: an
   action and a weight factor (:func:`decide`);
3. :meth:`~secure_fed.federation.weighting.DynamicWeighting.weigh` multiplies
   the factors (which only lower a weight) into base share x merit, the merit
   coming from the evidence of correctness (docs/federation.md, section 5);
4. :func:`decision_events` describes, per participant, the decision together
   with the weight that was applied; the engine writes them as
   ``outlier.decision`` audit events once the weights exist;
   :class:`DecisionRecorder` keeps a copy of them for the per-round tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from secure_fed.errors import OutlierConfigInvalid
from secure_fed.federation.weighting import WeightTerms
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.scoring.outlier import Decision

__all__ = ["DecisionRecorder", "KeepAll", "OutlierFilter", "decide", "decision_events"]


class OutlierFilter(Protocol):
    """Decides, from one scalar score per participant, an action and a weight factor.

    :class:`~secure_fed.secure.scoring.outlier.OutlierPolicy` is the real one.
    """

    def decide(self, scores: Mapping[str, float], *, round_id: int) -> Mapping[str, Decision]:
        """Return one decision per scored participant of round ``round_id``."""
        ...


class KeepAll:
    """Filter that excludes nobody (factor 1); scores still feed the dynamic weights."""

    def decide(self, scores: Mapping[str, float], *, round_id: int) -> dict[str, Decision]:
        """Keep everybody."""
        return {
            pid: Decision(participant_id=pid, score=s, smoothed=s, action="keep", factor=1.0)
            for pid, s in scores.items()
        }


def decide(
    outlier_filter: OutlierFilter, scores: Mapping[str, float], *, round_id: int
) -> dict[str, Decision]:
    """Ask ``outlier_filter`` and check it decided for exactly the scored participants.

    Raises
    ------
    OutlierConfigInvalid
        If the filter skipped a scored participant or named an unscored one.
    """
    decisions = dict(outlier_filter.decide(scores, round_id=round_id))
    if set(decisions) != set(scores):
        raise OutlierConfigInvalid(
            f"the outlier filter decided for {sorted(decisions)}, "
            f"but round {round_id} scored {sorted(scores)}"
        )
    return decisions


def decision_events(
    *,
    round_id: int,
    decisions: Mapping[str, Decision],
    num_samples: Mapping[str, int],
    terms: Mapping[str, WeightTerms] | None,
    publication_sm3: str | None,
    max_weight: float = 1.0,
) -> list[dict[str, object]]:
    """Details of one ``outlier.decision`` event per participant, sorted by id.

    Each carries the decision (score, EMA, thresholds, action, factor), the
    declared sample count (recorded, never used) and the weight terms that were
    applied: base share, evidence, its EMA, merit (with ``below_chance``: the
    weighting's chance rule capped it), copies count, the outlier factor as
    applied (the policy's factor: evidence never waives it) and the published
    weight. ``terms`` is None when the round aborted at the filter: nothing was
    aggregated and every weight is null. Otherwise an excluded participant has
    weight 0. ``max_weight`` is the round's public cap on one weight (every
    recorded weight is at most it).
    """
    events = []
    for pid in sorted(decisions):
        t = terms.get(pid) if terms is not None else None
        events.append(
            {
                "round_id": round_id,
                **decisions[pid].to_dict(),
                "num_samples": num_samples[pid],
                "base_share": t.base if t else None,
                "evidence": t.evidence if t else None,
                "correctness": t.correctness if t else None,
                "merit": t.merit if t else None,
                "below_chance": t.below_chance if t else None,
                "copies": t.copies if t else None,
                "applied_factor": t.factor if t else None,
                "weight": None if terms is None else (t.weight if t else 0.0),
                "max_weight": max_weight,
                "publication_sm3": publication_sm3,
            }
        )
    return events


class DecisionRecorder:
    """Audit sink that forwards every event and keeps each round's ``outlier.decision``.

    The per-round tables (terminal, ``report.html``) show how each weight was
    formed; the terms exist only in these events, so a federation hands the
    engine this recorder around its real sink and reads :meth:`of_round`. An
    event the inner sink refuses (raises) is not kept.
    """

    def __init__(self, inner: AuditSink) -> None:
        self.inner = inner
        self._rounds: dict[int, dict[str, dict[str, object]]] = {}

    def record(self, event: str, details: Mapping[str, object]) -> None:
        """Forward ``event``; keep a copy of an ``outlier.decision``'s details."""
        self.inner.record(event, details)
        if event == "outlier.decision":
            rid, pid = details.get("round_id"), details.get("participant_id")
            if isinstance(rid, int) and isinstance(pid, str):
                self._rounds.setdefault(rid, {})[pid] = dict(details)

    def of_round(self, round_id: int) -> dict[str, dict[str, object]]:
        """Return the last ``outlier.decision`` details of each participant of ``round_id``."""
        return {pid: dict(d) for pid, d in self._rounds.get(round_id, {}).items()}

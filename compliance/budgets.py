"""The DP parameter filing, recomputed from the ledger's budget audit entries.

For each participant's data asset, :class:`BudgetTrack` replays the
``budget.*`` entries in log order: the latest ``budget.set`` gives the limit,
delta and accountant; each ``budget.reserved`` records the mechanism inputs
(noise multiplier, sample rate, steps, clipping norm, library versions);
``budget.committed``, ``budget.aborted`` and ``budget.expired`` resolve them.
``budget.audited`` entries (empirical privacy audits) are kept with the
ledger's epsilon over their rounds, recomputed from the commits replayed so far.
Epsilon is then recomputed over the committed history with the ledger's own
accountant (:func:`privacy_ledger.budget.accountant.epsilon`: RDP or PRV,
whole-history composition, rounded up), never summed per round. The same
code runs at export and in the offline verifier, so a filing that differs
from what the entries record is caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from compliance.scope import NOT_RECORDED
from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.empirical import AUDITED_EVENT, NOT_AUDITED, audit_from_fields
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.errors import LedgerError

__all__ = ["BudgetTrack", "MAX_SERIES_POINTS"]

#: Largest number of points of one epsilon-over-rounds series (evenly thinned beyond).
MAX_SERIES_POINTS = 400

Pair = tuple[float, float]


def _float(value: object) -> float | None:
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _mechanism(fields: dict[str, Any]) -> tuple[Pair, int, float] | None:
    sigma, q = _float(fields.get("noise_multiplier")), _float(fields.get("sample_rate"))
    steps, norm = fields.get("steps"), _float(fields.get("max_grad_norm"))
    if sigma is None or q is None or norm is None or not isinstance(steps, int):
        return None
    return (sigma, q), steps, norm


def _decimal(value: object) -> Decimal | None:
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        return None
    return number if number.is_finite() else None


def _span(values: list[float]) -> dict[str, object] | str:
    if not values:
        return NOT_RECORDED
    return {"min": repr(min(values)), "max": repr(max(values)), "distinct": len(set(values))}


@dataclass
class BudgetTrack:
    """Replay of one participant asset's budget entries (see module docstring)."""

    participant: str
    asset: str
    limit: str | None = None
    delta: str | None = None
    accountant: str | None = None
    set_entries: list[int] = field(default_factory=list)
    reserved: dict[str, tuple[dict[str, Any], str | None]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    commits: list[tuple[str | None, Pair | None, int, float]] = field(default_factory=list)
    refusals: int = 0
    secure_rng: set[str] = field(default_factory=set)
    privacy_units: set[str] = field(default_factory=set)
    mechanisms: set[str] = field(default_factory=set)
    audits: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, event: str, fields: dict[str, Any], index: int) -> dict[str, Any] | None:
        """Replay one entry; return a mechanism-event row when it commits a reservation."""
        reservation = fields.get("reservation")
        if event == "budget.set":
            self.limit = str(fields.get("epsilon_limit"))
            self.delta, self.accountant = str(fields.get("delta")), str(fields.get("accountant"))
            self.set_entries.append(index)
        elif event == "budget.refused":
            self.refusals += 1
        elif event == AUDITED_EVENT:
            self.audits.append(self._audit(fields, index))
        elif not isinstance(reservation, str):
            return None
        elif event == "budget.reserved":
            self.reserved[reservation] = (dict(fields), fields.get("round"))
            self.states[reservation] = "reserved"
        elif event in ("budget.aborted", "budget.expired"):
            self.states[reservation] = event.removeprefix("budget.")
        elif event == "budget.committed":
            return self._commit(reservation, fields, index)
        return None

    def _commit(self, reservation: str, fields: dict[str, Any], index: int) -> dict[str, Any]:
        self.states.pop(reservation, None)
        # a committed reservation is never resolved again (commits are idempotent and
        # write no second entry): drop its inputs so memory does not grow with history
        planned, round_id = self.reserved.pop(reservation, ({}, fields.get("round")))
        parsed = _mechanism(planned)
        pair, steps, norm = parsed if parsed is not None else (None, 0, 0.0)
        self.commits.append((None if round_id is None else str(round_id), pair, steps, norm))
        versions = planned.get("versions")
        versions = versions if isinstance(versions, dict) else {}
        rng = versions.get("secure_rng", NOT_RECORDED)
        unit = versions.get("privacy_unit", planned.get("privacy_unit", NOT_RECORDED))
        self.secure_rng.add(str(rng))
        self.privacy_units.add(str(unit))
        self.mechanisms.add(str(planned.get("mechanism", NOT_RECORDED)))
        row = {
            "entry": index,
            "participant": self.participant,
            "asset": self.asset,
            "reservation": reservation,
            "round": round_id,
            "secure_rng": rng,
            "privacy_unit": unit,
            "after_release": fields.get("after_release"),
            "over_limit": fields.get("over_limit"),
        }
        for key in (
            "mechanism",
            "noise_multiplier",
            "sample_rate",
            "steps",
            "max_grad_norm",
            "delta",
            "sampler",
        ):
            row[key] = planned.get(key, NOT_RECORDED)
        return row

    def _audit(self, fields: dict[str, Any], index: int) -> dict[str, Any]:
        """Return the report's view of one ``budget.audited`` entry (bound beside accounted)."""
        try:
            audit = audit_from_fields(fields)
        except LedgerError as exc:
            return {"entry": index, "label": f"unreadable audit entry ({exc.code})"}
        accounted = self._epsilon_over(audit.rounds_from, audit.rounds_to)
        exceeds: object = NOT_RECORDED
        if accounted is not None:
            exceeds = audit.epsilon_lower_bound > accounted
        return {
            "entry": index,
            "label": audit.label,
            "epsilon_lower_bound": str(audit.epsilon_lower_bound),
            "epsilon_accounted": NOT_RECORDED if accounted is None else str(accounted),
            "epsilon_accounted_stated": str(audit.epsilon_accounted),
            "exceeds_accounted": exceeds,
            "rounds_from": audit.rounds_from,
            "rounds_to": audit.rounds_to,
            "canaries": audit.canaries,
            "guesses": audit.guesses,
            "correct": audit.correct,
            "score": audit.score,
            "confidence": str(audit.confidence),
            "delta": str(audit.delta),
            "method": audit.method,
        }

    def _epsilon_over(self, rounds_from: str, rounds_to: str) -> Decimal | None:
        """Return the epsilon of the commits so far from round ``rounds_from`` to ``rounds_to``."""
        labels = [c[0] for c in self.commits]
        if rounds_from not in labels or rounds_to not in labels:
            return None
        first, last = labels.index(rounds_from), len(labels) - 1 - labels[::-1].index(rounds_to)
        merged: dict[Pair, int] = {}
        for _, pair, steps, _ in self.commits[first : last + 1]:
            if pair is None:
                return None
            merged[pair] = merged.get(pair, 0) + steps
        return self._epsilon(merged, 1.0) if merged else None

    def empirical(self) -> dict[str, Any] | str:
        """Return the newest audit, the count, and the entries above their accounted epsilon."""
        if not self.audits:
            return NOT_AUDITED
        exceeding = [a["entry"] for a in self.audits if a.get("exceeds_accounted") is True]
        unchecked = [a["entry"] for a in self.audits if a.get("exceeds_accounted") is not False]
        return {
            **self.audits[-1],
            "audits": len(self.audits),
            "exceeding": exceeding,
            "unchecked": [e for e in unchecked if e not in exceeding],
        }

    # -- accounting -------------------------------------------------------------------

    def _epsilon(self, pairs: dict[Pair, int], norm: float) -> Decimal | None:
        if self.delta is None or self.accountant is None:
            return None
        delta = _float(self.delta)
        if delta is None:
            return None
        try:
            events = [
                MechanismEvent(
                    noise_multiplier=s,
                    sample_rate=q,
                    steps=n,
                    delta=delta,
                    max_grad_norm=norm or 1.0,
                )
                for (s, q), n in pairs.items()
            ]
            return acc.epsilon(events, delta=delta, accountant=self.accountant)
        except (LedgerError, ValueError, ArithmeticError):
            return None

    def _merged(self, ids: list[str] | None = None) -> dict[Pair, int] | None:
        merged: dict[Pair, int] = {}
        commits = [c for c in self.commits]
        extra = [self.reserved[i][0] for i in (ids or [])]
        for planned in extra:
            parsed = _mechanism(planned)
            if parsed is None:
                return None
            commits.append((None, parsed[0], parsed[1], parsed[2]))
        for _, pair, steps, _ in commits:
            if pair is None:
                return None
            merged[pair] = merged.get(pair, 0) + steps
        return merged

    def series(self) -> dict[str, Any]:
        """Epsilon after each committed round (consecutive commits of one round merged)."""
        groups = acc.round_ends(round_id for round_id, _, _, _ in self.commits)
        step = max(1, math.ceil(len(groups) / MAX_SERIES_POINTS))
        keep = [g for k, g in enumerate(groups) if k % step == step - 1 or k == len(groups) - 1]
        points: list[list[object]] = []
        merged: dict[Pair, int] = {}
        done, recorded = 0, True
        for round_id, last in keep:
            for _, pair, steps, _ in self.commits[done : last + 1]:
                recorded = recorded and pair is not None
                if pair is not None:
                    merged[pair] = merged.get(pair, 0) + steps
            done = last + 1
            eps = self._epsilon(merged, 1.0) if recorded else None
            points.append([round_id, NOT_RECORDED if eps is None else str(eps)])
        return {
            "participant": self.participant,
            "asset": self.asset,
            "rounds": len(groups),
            "every": step,
            "points": points,
        }

    def filing(self) -> dict[str, Any]:
        """Return the DP parameter filing row of this participant asset."""
        active = sorted(i for i, s in self.states.items() if s == "reserved")
        committed = self._merged()
        spent = None if committed is None else self._epsilon(committed, 1.0)
        held_pairs = self._merged(active)
        total = None if held_pairs is None else self._epsilon(held_pairs, 1.0)
        limit = _decimal(self.limit)
        reserved = None if spent is None or total is None else total - spent
        remaining = None
        if limit is not None and spent is not None and reserved is not None:
            remaining = max(Decimal(0), limit - spent - reserved)
        sigmas = [c[1][0] for c in self.commits if c[1] is not None]
        rates = [c[1][1] for c in self.commits if c[1] is not None]

        def text(value: object) -> str:
            return (
                NOT_RECORDED
                if value is None
                else (format(value, "f") if isinstance(value, Decimal) else str(value))
            )

        return {
            "participant": self.participant,
            "asset": self.asset,
            "budget_entries": self.set_entries,
            "accountant": text(self.accountant),
            "delta": text(self.delta),
            "epsilon_limit": text(self.limit),
            "epsilon_spent": text(spent),
            "epsilon_reserved": text(reserved),
            "epsilon_remaining": text(remaining),
            "committed_events": len(self.commits),
            "active_reservations": len(active),
            "refusals": self.refusals,
            "steps": sum(c[2] for c in self.commits) if self.commits else 0,
            "mechanism": _joined(self.mechanisms),
            "noise_multiplier": _span(sigmas),
            "sample_rate": _span(rates),
            "secure_rng": _rng(self.secure_rng),
            "privacy_unit": _joined(self.privacy_units),
            "empirical_audit": self.empirical(),
        }


def _joined(values: set[str]) -> str:
    return ", ".join(sorted(values)) if values else NOT_RECORDED


def _rng(values: set[str]) -> str:
    if not values or values == {NOT_RECORDED}:
        return NOT_RECORDED
    lowered = {v.lower() for v in values}
    if lowered == {"true"}:
        return "on"
    if lowered == {"false"}:
        return "off"
    return "mixed (" + ", ".join(sorted(values)) + ")"

"""Weights that reward being right: base share x merit x factors, capped; entropy reduction.

One formula turns a round's evidence, copies counts and outlier decisions into the
published weights (:meth:`DynamicWeighting.weigh`; docs/learning.md, "Weights that
reward being right", and docs/federation.md, section 5):

    b_k      = n_k / sum_j n_j                                     (base share)
    c_k^(t)  = beta * c_k^(t-1) + (1 - beta) * e_k^(t)             (EMA of the evidence)
    r        = quantile_q(c)                  (q = 1/4: the lower quartile)
    m_k      = clip(exp(alpha * (c_k - r) / |r|), m_min, 1)        (merit, at most 1)
    m_k      = min(m_k, m_chance)  if min(c_k, e_k) <= 0            (no better than chance)
    f_k      = the outlier policy's factor, in (0, 1]              (closeness factor)
    u_k      = 1 / (1 + copies_k)                                  (near-duplicates share)
    v_k      = b_k * m_k * f_k * u_k
    W_k      = min(w_max, lambda * v_k), sum_k W_k = 1             (capped, published)

over the participants that were not excluded. ``n_k`` is the sample count an
administrator registered for the participant (equal shares when none was
registered); a self-declared count in an upload header never enters (an
unverifiable claim of 1e9 rows would otherwise buy the weight). ``e_k`` is the
participant's *evidence of correctness*: its mean centred true-class logit on a
labeled slice of the public set, a public linear function of its upload that the
secure modes compute without opening the upload
(:mod:`secure_fed.secure.scoring.evidence`). The merit is a softmax with
temperature ``1 / alpha`` over the smoothed evidence, relative to the size of the
reference (the seeds' contribution weighting by validation accuracy: FedFomo,
Zhang et al. 2021; CFFL, Lyu et al. 2020), normalised so that a participant at
the reference has merit 1 and capped at 1: being right cannot raise a weight
beyond the base share. The reference is the lower quartile, not the median:
only the clearly less right lose weight, and a minority that shows large
evidence (overconfident logits) pushes fewer honest participants below it.
``copies_k`` is the number of other uploads that are near-duplicates of ``k``'s
(FoolsGold, Fung et al. 2020): a group that sends one matrix shares one weight.
``f_k`` in ``(0, 1]`` is the outlier policy's factor: closeness to the consensus
can only lower a weight, never raise it (excluded participants have weight 0),
and it always applies, whatever the evidence. The evidence covers a labeled
slice of about a hundred rows of the public set, the outlier score all of it: a
participant right on the slice and poisoned elsewhere has top evidence, and a
waiver of the factor for good evidence would give it back its full base share.
Without evidence (a mode or a task without a labeled slice) every merit is 1.

**The chance rule.** The evidence is a centred logit: an upload that carries no
information about the labels (constant rows, noise) has evidence 0 in
expectation, one that points away from the true classes has evidence below 0.
A participant whose smoothed evidence *or* this round's evidence is at or below
0 is no better than chance on the secret labelled slice, and its merit is at
most ``m_chance`` (:data:`CHANCE_MERIT`, 1e-3), far below the soft floor ``m_min``
and the outlier policy's smallest factor (0.05). The reference ``r`` is a
quantile of everybody's evidence, so a coalition of a quarter of the roster
below 0 drags it below 0 and softens its own merit (the jitter coalition under
label skew had merit 0.5 to 0.6); 0 is a reference no participant moves. The
gap below ``m_min`` matters under the cap: the weight the capped participants
cannot take is spread over everybody below the cap in proportion to ``v_k``,
and with the attackers at ``m_min = 0.05`` and the honest participants the
coalition pushed out of the robust subset at ``f = 0.05`` that spread gave both
the same share. Testing this round's evidence as well as the EMA removes the
EMA's lag for this one rule: a clean history does not carry a participant that
turns against the labels through its first attacking round.

Bound on a group ``G``: ``W_G <= sum_{k in G} b_k / sum_j b_j m_j u_j f_j``
whatever ``G`` uploads, since every factor of ``G`` is at most 1; the denominator
falls only by what the other participants lose (their own evidence, copies and
outlier factors).

Entropy reduction follows DS-FL (Itahara et al., "Distillation-Based
Semi-Supervised Federated Learning", IEEE TMC 2021): the averaged soft labels
are sharpened with a temperature below 1 before distillation. On logits this
is a division by that temperature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secure_fed.errors import WeightingInvalid
from secure_fed.secure.release_plan import WEIGHT_FLOOR

#: Merit of a participant no better than chance on the labelled slice (the chance rule).
CHANCE_MERIT = 1e-3

#: Smallest weight before the cap: twice the codec's resolution, so the published
#: weight stays above the release plan's floor.
MIN_WEIGHT = 2 * WEIGHT_FLOOR

__all__ = [
    "CHANCE_MERIT",
    "MAX_COUNT",
    "MIN_WEIGHT",
    "DynamicWeighting",
    "WeightTerms",
    "apply_factors",
    "base_shares",
    "below_chance",
    "cap_weights",
    "check_cap",
    "merits",
    "sharpen_logits",
    "softmax_entropy",
]


def base_shares(ids: list[str], registered: Mapping[str, int]) -> dict[str, float]:
    """Return ``n_k / sum_j n_j`` over ``ids`` (equal shares when nothing is registered).

    Raises
    ------
    WeightingInvalid
        If ``ids`` is empty, some but not all of them are registered, or a count
        is not an integer in ``[1, 2^53]``.
    """
    if not ids:
        raise WeightingInvalid("no participant to share the weight")
    known = [p for p in ids if p in registered]
    if not known:
        return {p: 1.0 / len(ids) for p in ids}
    if len(known) != len(ids):
        raise WeightingInvalid(f"no registered sample count for {sorted(set(ids) - set(known))}")
    for pid in ids:
        _check_count(pid, registered[pid])
    total = sum(registered[p] for p in ids)  # exact integers: no overflow, no rounding
    return {p: registered[p] / total for p in ids}


#: Largest registered sample count (2^53: every count is exact as a float).
MAX_COUNT = 2**53


def _check_count(pid: str, n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COUNT:
        raise WeightingInvalid(
            f"registered sample count of {pid!r} must be in [1, 2^53], got {n!r}"
        )


def merits(
    correctness: Mapping[str, float], *, alpha: float, floor: float, quantile: float = 0.5
) -> tuple[float, dict[str, float]]:
    """Return ``r`` (the ``quantile``) and ``clip(exp(alpha (c_k - r) / |r|), floor, 1)`` each.

    Relative to the reference's size, so the merit does not depend on the logit
    scale of the task (``|r|`` at least ``1e-6``). Computed without overflow for
    any finite input: at or above the reference the merit is 1 (the clip's upper
    side, so ``exp`` is never evaluated there), below it the exponent is clamped
    at ``-700``; a reference near 0 therefore gives 1 or the floor, never an
    ``OverflowError``.

    Raises
    ------
    WeightingInvalid
        If ``correctness`` is empty or holds a non-finite value, ``alpha`` is not
        a finite number ``>= 0``, ``floor`` is outside ``(0, 1]`` or ``quantile``
        outside ``[0, 1]``.
    """
    if not correctness:
        raise WeightingInvalid("no evidence to rank")
    for pid, c in correctness.items():
        if not math.isfinite(c):
            raise WeightingInvalid(f"correctness of {pid!r} must be finite, got {c!r}")
    if not (math.isfinite(alpha) and alpha >= 0):
        raise WeightingInvalid(f"alpha must be a finite number >= 0, got {alpha!r}")
    if not (math.isfinite(floor) and 0 < floor <= 1):
        raise WeightingInvalid(f"floor must be in (0, 1], got {floor!r}")
    reference = _quantile(list(correctness.values()), quantile)
    scale = max(abs(reference), 1e-6)
    out = {}
    for p, c in correctness.items():
        if c >= reference or alpha == 0:
            out[p] = 1.0
            continue
        with np.errstate(over="ignore"):  # c - r may overflow to -inf: the floor then
            exponent = float(np.float64(alpha) * ((np.float64(c) - reference) / scale))
        out[p] = min(1.0, max(floor, math.exp(max(-700.0, exponent))))
    return reference, out


def below_chance(smoothed: Mapping[str, float], evidence: Mapping[str, float]) -> dict[str, bool]:
    """Return, per participant, whether its smoothed or this round's evidence is ``<= 0``.

    The chance rule of the module docstring: ``min(c_k, e_k) <= 0``. Both maps
    name the same participants; every value is finite (checked by the caller,
    :meth:`DynamicWeighting.smooth`).

    Raises
    ------
    WeightingInvalid
        If the maps name different participants or a value is not finite.
    """
    if set(smoothed) != set(evidence):
        raise WeightingInvalid("smoothed and round evidence name different participants")
    out = {}
    for pid, c in smoothed.items():
        e = evidence[pid]
        if not (math.isfinite(c) and math.isfinite(e)):
            raise WeightingInvalid(f"evidence of {pid!r} must be finite, got {c!r}, {e!r}")
        out[pid] = min(c, e) <= 0
    return out


def _quantile(values: list[float], q: float) -> float:
    """``np.quantile(values, q)`` (linear), finite for finite values of any size.

    Interpolating between ``-1e308`` and ``1e308`` overflows; the values are then
    scaled by their largest magnitude first (the result stays in their range).

    Raises
    ------
    WeightingInvalid
        If ``q`` is outside ``[0, 1]``.
    """
    if not (math.isfinite(q) and 0 <= q <= 1):
        raise WeightingInvalid(f"quantile must be in [0, 1], got {q!r}")
    arr = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        direct = float(np.quantile(arr, q))
    if math.isfinite(direct):
        return min(max(direct, float(arr.min())), float(arr.max()))
    top = float(np.abs(arr).max())
    scaled = float(np.quantile(arr / top, q)) * top
    return min(max(scaled, float(arr.min())), float(arr.max()))


def _check_factors(factors: Mapping[str, float]) -> None:
    for pid, f in factors.items():
        if not (math.isfinite(f) and 0 < f <= 1):
            raise WeightingInvalid(f"factor of {pid!r} must be in (0, 1], got {f!r}")


def apply_factors(dynamic: Mapping[str, float], factors: Mapping[str, float]) -> dict[str, float]:
    """Return the published weights ``f_k * d_k / sum_j f_j * d_j`` (sum to 1).

    Raises
    ------
    WeightingInvalid
        If there are no ids or they differ, a factor is outside ``(0, 1]`` or a
        weight is not positive and finite.
    """
    if set(dynamic) != set(factors):
        raise WeightingInvalid("dynamic weights and factors name different participants")
    if not dynamic:
        raise WeightingInvalid("no participant to weigh")
    _check_factors(factors)
    for pid in factors:
        if not (math.isfinite(dynamic[pid]) and dynamic[pid] > 0):
            raise WeightingInvalid(f"weight of {pid!r} must be > 0, got {dynamic[pid]!r}")
    return _normalised({pid: math.log(factors[pid]) + math.log(w) for pid, w in dynamic.items()})


def _normalised(logs: Mapping[str, float]) -> dict[str, float]:
    """``exp(l_k) / sum_j exp(l_j)`` from finite logs, without overflow or a zero total.

    The largest term is 1 after the shift, so the total is in ``[1, n]``; a term
    more than ~745 below the largest is 0.
    """
    top = max(logs.values())
    terms = {p: math.exp(max(-745.0, v - top)) for p, v in logs.items()}
    total = math.fsum(terms.values())
    return {p: w / total for p, w in terms.items()}


def check_cap(cap: float, participants: int) -> None:
    """Refuse a cap outside ``(0, 1]`` or one ``participants`` weights cannot satisfy.

    Weights sum to 1, so ``n`` weights of at most ``cap`` exist only when
    ``n * cap >= 1``.

    Raises
    ------
    WeightingInvalid
        Naming the cap and the number of participants.
    """
    if isinstance(cap, bool) or not isinstance(cap, int | float):
        raise WeightingInvalid(f"max_weight must be a number, got {cap!r}")
    if not (math.isfinite(cap) and 0 < cap <= 1):
        raise WeightingInvalid(f"max_weight must be in (0, 1], got {cap!r}")
    if participants < 1 or participants * cap < 1 - 1e-12:
        raise WeightingInvalid(
            f"max_weight {cap!r} cannot be met by {participants} participants "
            f"(weights sum to 1: it must be >= 1/{participants})"
        )


def cap_weights(weights: Mapping[str, float], cap: float) -> dict[str, float]:
    """Return ``W_k = min(cap, lambda * v_k)`` summing to 1 (water-filling).

    ``weights`` are positive (``v_k``); ``lambda > 0`` is the one scale that
    makes the capped weights sum to 1. Computed by iterative capping: with
    ``F`` the capped set (empty at first), set
    ``lambda = (1 - cap |F|) / sum_{k not in F} v_k``; every ``k`` not in ``F``
    with ``lambda v_k > cap`` joins ``F``; stop when none does.

    Termination: each pass that does not stop adds at least one participant to
    ``F``, and ``F`` never shrinks, so there are at most ``n`` passes. ``F``
    never takes everybody while ``n * cap > 1``: the uncapped set ``U`` of the
    last pass has ``sum_U lambda v_k = 1 - cap |F| <= cap (n - |F|) = cap |U|``
    because ``n * cap >= 1``, so not every member of ``U`` can exceed ``cap``.
    When ``n * cap == 1`` (to 1e-12) every weight is ``1 / n``. Correctness:
    ``lambda`` only grows from pass to pass (the capped weights removed were
    above ``cap``, so the mass left per unit of ``v`` rises), hence a capped
    participant stays above ``cap`` under the final ``lambda`` and
    ``W_k = min(cap, lambda v_k)`` for all ``k``; no weight exceeds ``cap``
    (uncapped ones were checked against it) and the weights keep the order
    of ``v``.

    Raises
    ------
    WeightingInvalid
        If a weight is not positive and finite, or ``cap`` cannot be met.
    """
    check_cap(cap, len(weights))
    for pid, w in weights.items():
        if not (math.isfinite(w) and w > 0):
            raise WeightingInvalid(f"weight of {pid!r} must be > 0, got {w!r}")
    if len(weights) * cap <= 1 + 1e-12:
        return {pid: 1.0 / len(weights) for pid in weights}
    top = max(weights.values())  # ratios only matter: no sum overflows, no tiny total
    weights = {p: w / top for p, w in weights.items()}
    capped: set[str] = set()
    while True:
        free = {p: w for p, w in weights.items() if p not in capped}
        scale = (1.0 - cap * len(capped)) / math.fsum(free.values())
        over = {p for p, w in free.items() if scale * w > cap}
        if not over:
            break
        capped |= over
    return {p: cap if p in capped else scale * w for p, w in weights.items()}


@dataclass(frozen=True, kw_only=True)
class WeightTerms:
    """How one participant's published weight was formed (see the module formula).

    Attributes
    ----------
    base
        ``b_k``, the base share among this round's weighted participants.
    evidence
        ``e_k`` of this round (None: the round had no evidence).
    correctness
        ``c_k``, the EMA of the evidence (None without evidence).
    merit
        ``m_k`` in ``[m_min, 1]`` (1 without evidence).
    copies
        Other uploads that are near-duplicates of this one (0 when not measured).
    factor
        ``f_k``, the outlier policy's factor as applied (always the policy's).
    weight
        ``W_k``, the published weight, at most ``max_weight``.
    max_weight
        The round's cap ``w_max``.
    below_chance
        True when the chance rule applied (the smoothed or this round's evidence
        at or below 0: the merit is at most ``m_chance``); False without evidence.
    """

    base: float
    evidence: float | None
    correctness: float | None
    merit: float
    copies: int
    factor: float
    weight: float
    max_weight: float
    below_chance: bool = False

    @property
    def copy_factor(self) -> float:
        """``u_k = 1 / (1 + copies)``."""
        return 1.0 / (1 + self.copies)


@dataclass(kw_only=True)
class DynamicWeighting:
    """Base share x merit from evidence (EMA-smoothed) x copy and outlier factors, capped.

    Parameters
    ----------
    alpha
        Inverse temperature of the merit, per relative distance of the evidence
        from the median (>= 0); 0 ignores the evidence (every merit 1).
    beta
        EMA coefficient of the evidence in ``[0, 1)``; 0 disables smoothing.
    min_merit
        Smallest merit ``m_min`` in ``(0, 1]``.
    quantile
        Quantile of the smoothed evidence that gives the merit's reference
        (default the lower quartile).
    registered
        Sample count an administrator registered per participant (not a header's
        claim); empty: equal base shares.
    history
        Smoothed evidence ``c_k`` of every participant seen so far (persisted state).
    chance_merit
        Largest merit ``m_chance`` in ``(0, 1]`` of a participant no better than
        chance (the chance rule: its merit is ``min(m_k, m_chance)``, never
        raised); None disables the rule (the soft merit alone).
    """

    alpha: float = 1.0
    beta: float = 0.5
    min_merit: float = 0.05
    quantile: float = 0.25
    registered: dict[str, int] = field(default_factory=dict)
    history: dict[str, float] = field(default_factory=dict)
    chance_merit: float | None = CHANCE_MERIT

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and 0 <= self.alpha <= 100):
            raise WeightingInvalid(f"alpha must be in [0, 100], got {self.alpha!r}")
        if not (math.isfinite(self.beta) and 0 <= self.beta < 1):
            raise WeightingInvalid(f"beta must be in [0, 1), got {self.beta!r}")
        if not (math.isfinite(self.quantile) and 0 <= self.quantile <= 1):
            raise WeightingInvalid(f"quantile must be in [0, 1], got {self.quantile!r}")
        if not (math.isfinite(self.min_merit) and 0 < self.min_merit <= 1):
            raise WeightingInvalid(f"min_merit must be in (0, 1], got {self.min_merit!r}")
        m = self.chance_merit
        number = isinstance(m, int | float) and not isinstance(m, bool)
        if m is not None and not (number and math.isfinite(m) and 0 < m <= 1):
            raise WeightingInvalid(f"chance_merit must be in (0, 1] or None, got {m!r}")
        for pid, n in self.registered.items():
            _check_count(pid, n)

    def smooth(self, evidence: Mapping[str, float]) -> dict[str, float]:
        """Fold this round's evidence into the EMA history; return the smoothed values.

        A participant without history starts from its evidence.

        Raises
        ------
        WeightingInvalid
            If a value is not finite.
        """
        for pid, e in evidence.items():
            if not math.isfinite(e):
                raise WeightingInvalid(f"evidence of {pid!r} must be finite, got {e!r}")
            if pid in self.history and not math.isfinite(self.history[pid]):
                raise WeightingInvalid(
                    f"history of {pid!r} must be finite, got {self.history[pid]!r}"
                )
        out = {
            p: self._ema(self.history[p], e) if p in self.history else e
            for p, e in evidence.items()
        }
        self.history.update(out)
        return out

    def _ema(self, previous: float, e: float) -> float:
        """``beta * previous + (1 - beta) * e``, kept between the two (no rounding to inf)."""
        with np.errstate(over="ignore"):
            mixed = float(np.float64(self.beta) * previous + (1 - self.beta) * np.float64(e))
        return min(max(mixed, min(previous, e)), max(previous, e))

    def weigh(
        self,
        factors: Mapping[str, float],
        *,
        max_weight: float = 1.0,
        evidence: Mapping[str, float] | None = None,
        copies: Mapping[str, int] | None = None,
    ) -> dict[str, WeightTerms]:
        """Return every term of this round's published weights; update the EMA history.

        ``factors`` names the participants that take part in the aggregate (the
        excluded ones are left out by the caller); ``evidence`` and ``copies``,
        when given, name the same participants. This is the one place the cap
        is applied: every returned ``weight`` is at most ``max_weight`` and they
        sum to 1 (:func:`cap_weights`).

        Raises
        ------
        WeightingInvalid
            On mismatched ids, out-of-range inputs or a cap the participants
            cannot meet (nothing is updated then).
        """
        ids = sorted(factors)
        if not ids:
            raise WeightingInvalid("no participant to weigh")
        for name, given in (("evidence", evidence), ("copies", copies)):
            if given is not None and set(given) != set(ids):
                raise WeightingInvalid(f"{name} and factors name different participants")
        _check_factors(factors)
        check_cap(max_weight, len(ids))
        dup = dict(copies) if copies is not None else dict.fromkeys(ids, 0)
        for pid, n in dup.items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < len(ids):
                raise WeightingInvalid(f"copies of {pid!r} must be in [0, {len(ids)}), got {n!r}")
        base = base_shares(ids, self.registered)
        smoothed = self.smooth(evidence) if evidence is not None else None
        merit = (
            merits(smoothed, alpha=self.alpha, floor=self.min_merit, quantile=self.quantile)[1]
            if smoothed
            else None
        )
        chance = (
            below_chance(smoothed, evidence)
            if smoothed and evidence is not None and self.chance_merit is not None
            else dict.fromkeys(ids, False)
        )
        if merit is not None and self.chance_merit is not None:
            merit = {p: min(m, self.chance_merit) if chance[p] else m for p, m in merit.items()}
        # in logs: b_k m_k g_k u_k of tiny terms would underflow to a zero weight
        shares = _normalised(
            {
                p: math.log(base[p])
                + math.log(merit[p] if merit else 1.0)
                + math.log(factors[p])
                - math.log1p(dup[p])
                for p in ids
            }
        )
        # a weight the shares codec would round to zero is refused by the release plan
        weights = cap_weights({p: max(w, MIN_WEIGHT) for p, w in shares.items()}, max_weight)
        return {
            p: WeightTerms(
                base=base[p],
                evidence=evidence[p] if evidence is not None else None,
                correctness=smoothed[p] if smoothed is not None else None,
                merit=merit[p] if merit else 1.0,
                copies=dup[p],
                factor=factors[p],
                weight=weights[p],
                max_weight=max_weight,
                below_chance=chance[p],
            )
            for p in ids
        }


def sharpen_logits(logits: np.ndarray, *, temperature: float) -> np.ndarray:
    """DS-FL entropy reduction: divide logits by ``temperature`` in ``(0, 1]``.

    ``softmax(z / T)`` with ``T < 1`` lowers the entropy of the averaged soft
    labels; ``T = 1`` returns the input unchanged.

    Raises
    ------
    WeightingInvalid
        If ``temperature`` is outside ``(0, 1]``, the logits are not a finite
        non-empty matrix (:func:`softmax_entropy`) or their quotient overflows.
    """
    if not (math.isfinite(temperature) and 0 < temperature <= 1 and np.float32(temperature) > 0):
        raise WeightingInvalid(f"temperature must be in (0, 1], got {temperature!r}")
    z = _finite_logits(logits, dtype=np.float32)
    with np.errstate(over="ignore"):
        out = z / np.float32(temperature)
    if not np.isfinite(out).all():
        raise WeightingInvalid(f"logits / {temperature!r} overflow float32")
    return out


def _finite_logits(logits: object, *, dtype: type[np.floating[Any]]) -> np.ndarray:
    """``logits`` as a 2-D array of ``dtype`` with at least one row and column, all finite.

    Raises
    ------
    WeightingInvalid
        If it is not one (ragged, wrong rank, empty, non-numeric, NaN or infinite).
    """
    try:
        with np.errstate(over="ignore"):
            z = np.asarray(logits, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise WeightingInvalid(f"logits must be a numeric matrix: {exc}") from None
    if z.ndim != 2 or 0 in z.shape:
        raise WeightingInvalid(f"logits must be a non-empty (rows, classes) matrix, got {z.shape}")
    if not np.isfinite(z).all():
        raise WeightingInvalid("logits must be finite")
    return z


def softmax_entropy(logits: np.ndarray) -> float:
    """Mean Shannon entropy (nats) of ``softmax(logits)`` over rows.

    Raises
    ------
    WeightingInvalid
        If ``logits`` is not a non-empty 2-D matrix of finite numbers.
    """
    z = _finite_logits(logits, dtype=np.float64)
    with np.errstate(over="ignore"):  # a gap beyond the float range is -inf: probability 0
        z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return float(-(p * np.log(np.clip(p, 1e-300, None))).sum(axis=1).mean())

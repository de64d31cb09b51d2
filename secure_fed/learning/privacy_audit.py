"""One-run empirical privacy audit of a participant's DP-SGD (Steinke, Nasr and Jagielski 2023).

The audit puts a high-confidence *lower* bound on the epsilon a participant's
private training actually has, beside the epsilon the ledger accounts:

1. before the first round, ``m`` synthetic canaries are drawn (never real
   records: every feature is the public set's minimum or maximum of that
   feature, chosen by a fair coin, and the label is uniform) and each is
   included in the participant's DP-SGD training rows with probability 1/2;
   canaries and coins stay fixed over all the participant's rounds;
2. after a round, the participant's own model scores every canary
   (:func:`membership_scores`), guesses "in" for the ``k`` highest scores and
   "out" for the ``k`` lowest, abstaining on the rest (``k`` is fixed by
   :class:`AuditSettings` before training, never chosen after seeing scores);
3. :func:`epsilon_lower_bound` turns the number of correct guesses into the
   largest epsilon that an (epsilon, delta)-DP training would make unlikely
   (p-value below ``1 - confidence``) under the paper's bound for (epsilon, delta)-DP
   (the p-value its Appendix D algorithm computes).

The bound is a lower bound, never a proof of privacy: a small bound is what a
correct DP-SGD yields and says nothing about the privacy above it
(``docs/audit/dp-accounting.md``, section "Empirical audit").

Randomness: canaries and coins come from a ``numpy`` generator seeded from
``secrets`` (or, only under the demo's INSECURE ``--reproducible``, from the
run seed), as the project's rules allow for canary sampling.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

import numpy as np
from scipy import stats
from torch import nn

from secure_fed.errors import LearningParameterInvalid

__all__ = [
    "METHOD",
    "SCORE",
    "AuditResult",
    "AuditSettings",
    "CanaryAudit",
    "Canaries",
    "audit_p_value",
    "epsilon_lower_bound",
    "guess_membership",
    "make_canaries",
    "membership_scores",
]

#: What the ledger event's ``method`` field says: the one-run audit, input-space canaries.
METHOD = "steinke-nasr-jagielski-2023/input-canaries"
#: What the ledger event's ``score`` field says (:func:`membership_scores`).
SCORE = "logp-label-minus-mean-logp"


@dataclass(frozen=True, kw_only=True)
class AuditSettings:
    """How a participant audits itself, fixed before training.

    Parameters
    ----------
    canaries
        Number ``m`` of synthetic canaries (>= 2); each enters training with
        probability 1/2.
    guess_fraction
        Fraction of the canaries guessed on each side: ``k = floor(m *
        guess_fraction)`` guessed "in" (highest scores) and ``k`` "out"
        (lowest), the rest abstained. In (0, 0.5]. Fixed here, before training:
        choosing ``k`` after seeing the scores would need a correction.
    confidence
        Confidence of the lower bound, in (0, 1) (0.95: wrong at most 5% of
        audits of a mechanism that is in fact as private as accounted).
    """

    canaries: int = 64
    guess_fraction: float = 0.25
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if isinstance(self.canaries, bool) or not isinstance(self.canaries, int):
            raise LearningParameterInvalid(f"canaries must be an integer, got {self.canaries!r}")
        if not 2 <= self.canaries <= 100_000:
            raise LearningParameterInvalid(f"canaries must be in [2, 100000], got {self.canaries}")
        if not (math.isfinite(self.guess_fraction) and 0 < self.guess_fraction <= 0.5):
            raise LearningParameterInvalid(
                f"guess_fraction must be in (0, 0.5], got {self.guess_fraction!r}"
            )
        if self.per_side < 1:
            raise LearningParameterInvalid(
                f"guess_fraction {self.guess_fraction!r} of {self.canaries} canaries guesses none"
            )
        if not (math.isfinite(self.confidence) and 0 < self.confidence < 1):
            raise LearningParameterInvalid(f"confidence must be in (0, 1), got {self.confidence!r}")

    @property
    def per_side(self) -> int:
        """Guesses on each side, ``k = floor(m * guess_fraction)``."""
        return int(self.canaries * self.guess_fraction)


def _check_counts(canaries: int, guesses: int, correct: int) -> None:
    for name, value in (("canaries", canaries), ("guesses", guesses), ("correct", correct)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise LearningParameterInvalid(f"{name} must be an integer, got {value!r}")
    if not 0 <= correct <= guesses <= canaries:
        raise LearningParameterInvalid(
            "need 0 <= correct <= guesses <= canaries, got "
            f"correct={correct}, guesses={guesses}, canaries={canaries}"
        )


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, int | float) and math.isfinite(delta) and 0 <= delta < 1):
        raise LearningParameterInvalid(f"delta must be in [0, 1), got {delta!r}")


def audit_p_value(
    canaries: int, guesses: int, correct: int, *, epsilon: float, delta: float
) -> float:
    """P-value of ``correct`` right guesses if training were (epsilon, delta)-DP.

    The (epsilon, delta) bound of Steinke, Nasr and Jagielski (2023), as their
    Appendix D algorithm computes it: with ``q = e^eps / (1 + e^eps)``,
    ``p = P[Bin(r, q) >= v] + 2 m delta max_{1<=i<=v} P[v - i <= Bin(r, q) < v] / i``.

    Parameters
    ----------
    canaries, guesses, correct
        ``m`` canaries, ``r`` guesses made, ``v`` of them right (0 <= v <= r <= m).
    epsilon
        Epsilon of the null hypothesis (>= 0).
    delta
        Delta of the null hypothesis, in [0, 1).

    Returns
    -------
    float
        The p-value, in [0, 1].

    Raises
    ------
    LearningParameterInvalid
        Counts out of order, epsilon negative, delta out of range.
    """
    _check_counts(canaries, guesses, correct)
    _check_delta(delta)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise LearningParameterInvalid(f"epsilon must be finite and >= 0, got {epsilon!r}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    beta = float(stats.binom.sf(correct - 1, guesses, q))
    alpha = 0.0
    if delta > 0 and correct > 0:
        below = stats.binom.pmf(np.arange(correct - 1, -1, -1), guesses, q)  # v-1, ..., 0
        alpha = float(np.max(np.cumsum(below) / np.arange(1, correct + 1)))
    return min(1.0, beta + alpha * delta * 2 * canaries)


def epsilon_lower_bound(
    canaries: int, guesses: int, correct: int, *, delta: float, confidence: float = 0.95
) -> float:
    """Largest epsilon the audit rejects at ``confidence``: training is not (eps, delta)-DP.

    Bisection on :func:`audit_p_value` (increasing in epsilon) for the
    largest epsilon whose p-value stays below ``1 - confidence``, to 1e-6.

    Parameters
    ----------
    canaries, guesses, correct
        As :func:`audit_p_value`.
    delta
        The delta the participant's budget uses.
    confidence
        In (0, 1); 0.95 by default.

    Returns
    -------
    float
        The lower bound (0.0 when even epsilon 0 is not rejected). With
        ``delta = 0`` and every guess right it is ``ln(q / (1 - q))`` with
        ``q = (1 - confidence) ** (1 / r)``.

    Raises
    ------
    LearningParameterInvalid
        Bad counts, delta or confidence.
    """
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise LearningParameterInvalid(f"confidence must be a float in (0, 1), got {confidence!r}")
    alpha = 1.0 - confidence
    if audit_p_value(canaries, guesses, correct, epsilon=0.0, delta=delta) >= alpha:
        return 0.0
    low, high = 0.0, 1.0
    while audit_p_value(canaries, guesses, correct, epsilon=high, delta=delta) < alpha:
        low, high = high, high * 2
        if high > 1e4:  # v = r with huge r only; never reached at the sizes audited
            return low
    while high - low > 1e-7:
        mid = (low + high) / 2
        if audit_p_value(canaries, guesses, correct, epsilon=mid, delta=delta) < alpha:
            low = mid
        else:
            high = mid
    return low


@dataclass(frozen=True)
class Canaries:
    """Synthetic canaries and their inclusion coins (fixed for every round).

    Attributes
    ----------
    x
        ``float32 [m, *input_shape]`` inputs.
    y
        ``int64 [m]`` labels, uniform over the classes.
    included
        ``bool [m]``: which canaries are in the training rows.
    """

    x: np.ndarray
    y: np.ndarray
    included: np.ndarray


def make_canaries(
    m: int, *, public_x: np.ndarray, num_classes: int, seed: int | None = None
) -> Canaries:
    """Draw ``m`` synthetic canaries from the public set's feature ranges, and their coins.

    Every feature of a canary is, by a fair coin, the public set's minimum or
    maximum of that feature: inside the input range, far from every real row
    (an out-of-distribution pattern no real record has), so a model that
    memorises its random label shows it. Nothing is drawn from private rows.

    Parameters
    ----------
    m
        Number of canaries (>= 2).
    public_x
        The public set (its per-feature minimum and maximum only).
    num_classes
        Labels are uniform over ``range(num_classes)`` (>= 2).
    seed
        ``None`` (default): a generator seeded from ``secrets``. An integer
        makes canaries and coins reproducible (INSECURE demo mode only: who
        knows the seed knows the coins).

    Returns
    -------
    Canaries
        Inputs, labels, and the coins (each ``True`` with probability 1/2).
    """
    if m < 2 or num_classes < 2 or len(public_x) == 0:
        raise LearningParameterInvalid(
            f"need m >= 2, num_classes >= 2 and a public set, got {m}, {num_classes}, "
            f"{len(public_x)} rows"
        )
    rng = np.random.default_rng(secrets.randbits(128) if seed is None else seed)
    public = np.asarray(public_x, dtype=np.float32)
    low, high = public.min(axis=0), public.max(axis=0)
    pick = rng.integers(0, 2, size=(m, *public.shape[1:])).astype(bool)
    x = np.where(pick, high, low).astype(np.float32)
    y = rng.integers(0, num_classes, size=m).astype(np.int64)
    included = rng.integers(0, 2, size=m).astype(bool)
    return Canaries(x=x, y=y, included=included)


def membership_scores(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Score each canary: log-probability of its label minus the mean over all labels.

    A canary's label is uniform and independent of its input, so for a
    canary left out of training its label is exchangeable with every other
    label and the score centres on 0; a memorised canary scores high. The
    mean over labels is each canary's own reference (a hard, off-manifold
    input lowers every label's log-probability alike), which loss alone lacks.

    Parameters
    ----------
    logits
        ``[m, C]`` logits of the participant's model on the canaries.
    labels
        ``[m]`` canary labels.

    Returns
    -------
    numpy.ndarray
        ``float64 [m]``; higher means "more likely trained on".
    """
    z = np.asarray(logits, dtype=np.float64)
    log_p = z - z.max(axis=1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(axis=1, keepdims=True))
    picked = log_p[np.arange(len(z)), np.asarray(labels, dtype=np.int64)]
    return np.asarray(picked - log_p.mean(axis=1), dtype=np.float64)


def guess_membership(scores: np.ndarray, included: np.ndarray, *, per_side: int) -> tuple[int, int]:
    """Guess "in" for the ``per_side`` highest scores, "out" for the lowest; count right guesses.

    Ties are broken by canary position (fixed before the coins, so it tells
    nothing about them).

    Returns
    -------
    tuple of int
        ``(guesses, correct)``, ``guesses = 2 * per_side``.
    """
    s, inc = np.asarray(scores), np.asarray(included, dtype=bool)
    if not 1 <= per_side <= len(s) // 2 or len(inc) != len(s):
        raise LearningParameterInvalid(
            f"per_side must be in [1, m/2] for m={len(s)} scores and coins, got {per_side}"
        )
    order = np.argsort(-s, kind="stable")
    top, bottom = order[:per_side], order[len(s) - per_side :]
    correct = int(inc[top].sum()) + int((~inc[bottom]).sum())
    return 2 * per_side, correct


@dataclass(frozen=True, kw_only=True)
class AuditResult:
    """One audit of a participant over its ledger rounds ``rounds_from..rounds_to``.

    ``rounds_from`` and ``rounds_to`` are the ledger round labels of the first
    and last charge the audited training made (``r1-label-prior`` or ``r1``,
    ``r5``). ``epsilon_lower_bound`` and ``epsilon_accounted`` are decimal
    strings: the bound rounded down to 1e-4, the accountant's epsilon of the
    budget's history as the gate gave it.
    """

    participant: str
    asset: str
    rounds_from: str
    rounds_to: str
    canaries: int
    guesses: int
    correct: int
    score: str
    confidence: str
    delta: str
    epsilon_lower_bound: str
    epsilon_accounted: str
    method: str = METHOD

    def fields(self) -> dict[str, object]:
        """Return the ``budget.audited`` event's fields (integers and strings, no floats)."""
        return {
            "participant": self.participant,
            "asset": self.asset,
            "rounds_from": self.rounds_from,
            "rounds_to": self.rounds_to,
            "canaries": self.canaries,
            "guesses": self.guesses,
            "correct": self.correct,
            "score": self.score,
            "confidence": self.confidence,
            "delta": self.delta,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "epsilon_accounted": self.epsilon_accounted,
            "method": self.method,
        }

    @property
    def exceeds_accounted(self) -> bool:
        """True when the audit's bound is above the accounted epsilon (the accounting failed)."""
        return Decimal(self.epsilon_lower_bound) > Decimal(self.epsilon_accounted)


class CanaryAudit:
    """A participant's canaries, coins and settings, and the audit after each round.

    Parameters
    ----------
    canaries
        From :func:`make_canaries`.
    settings
        The fixed ``m``, ``k`` and confidence (``settings.canaries == len(canaries.y)``).
    delta
        The delta the participant's budget uses.
    """

    def __init__(self, canaries: Canaries, settings: AuditSettings, *, delta: float) -> None:
        if len(canaries.y) != settings.canaries:
            raise LearningParameterInvalid(
                f"{len(canaries.y)} canaries drawn, settings say {settings.canaries}"
            )
        _check_delta(delta)
        self.canaries, self.settings, self.delta = canaries, settings, float(delta)

    @property
    def included(self) -> int:
        """Number of canaries in the training rows."""
        return int(self.canaries.included.sum())

    def training_rows(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the private rows with the included canaries appended (what DP-SGD trains on)."""
        keep = self.canaries.included
        xs = np.concatenate([np.asarray(x, dtype=np.float32), self.canaries.x[keep]])
        ys = np.concatenate([np.asarray(y, dtype=np.int64), self.canaries.y[keep]])
        return xs, ys

    def run(
        self,
        model: nn.Module,
        *,
        participant: str,
        asset: str,
        rounds: tuple[str, str],
        epsilon_accounted: Decimal | str,
    ) -> AuditResult:
        """Score the canaries with ``model``, guess, and bound epsilon.

        Parameters
        ----------
        model
            The participant's model after the last round audited.
        participant, asset
            Whose training it is.
        rounds
            ``(rounds_from, rounds_to)``, the ledger labels of the first and last
            charge of the training the model went through.
        epsilon_accounted
            The accountant's epsilon over the same rounds (the ledger's).
        """
        from secure_fed.learning.private_training import predict_logits  # avoid a cycle

        scores = membership_scores(predict_logits(model, self.canaries.x), self.canaries.y)
        guesses, correct = guess_membership(
            scores, self.canaries.included, per_side=self.settings.per_side
        )
        bound = epsilon_lower_bound(
            self.settings.canaries,
            guesses,
            correct,
            delta=self.delta,
            confidence=float(self.settings.confidence),
        )
        return AuditResult(
            participant=participant,
            asset=asset,
            rounds_from=rounds[0],
            rounds_to=rounds[1],
            canaries=self.settings.canaries,
            guesses=guesses,
            correct=correct,
            score=SCORE,
            confidence=str(Decimal(repr(float(self.settings.confidence)))),
            delta=str(Decimal(repr(self.delta))),
            epsilon_lower_bound=str(Decimal(bound).quantize(Decimal("0.0001"), ROUND_FLOOR)),
            epsilon_accounted=str(epsilon_accounted),
        )

"""Test tolerances derived from the CKKS presets' own error model, never typed by hand.

A CKKS preset states two numbers for a released value (``crypto/ckks/presets.py``):
``E`` (``decryption_error_bound``), the largest CKKS error of the result it is
meant for, and ``flood_sigma``, the Gaussian noise the key authority adds to
every released value (relative to ``max(|score|, 1)`` for scores). One released
value is therefore within ``E + z * flood_sigma``; ``z`` is chosen so that an
honest run of ``values`` released values exceeds the tolerance with probability
below ``FALSE_ALARM`` (Gaussian tail, union bound over the values). The
tolerance is thus about twice the largest error an honest run shows
(``docs/benchmarks.md``), and tightens by itself when a preset does.
"""

from __future__ import annotations

from scipy.stats import norm

from crypto.ckks.presets import CkksPreset
from crypto.shares import RING_PREDICTIONS, RING_WEIGHTS

#: Probability that an honest run fails a tolerance (per assertion).
FALSE_ALARM = 1e-6


def flood_z(values: int) -> float:
    """``z`` with ``P(max of values |N(0,1)| > z) <= FALSE_ALARM`` (union bound)."""
    return float(norm.isf(FALSE_ALARM / (2 * max(values, 1))))


def aggregate_tolerance(preset: CkksPreset, *, values: int, extra: float = 0.0) -> float:
    """Absolute tolerance of ``values`` released aggregate values (plus a known ``extra``)."""
    return preset.decryption_error_bound + flood_z(values) * preset.flood_sigma + extra


def score_tolerance(preset: CkksPreset, score: float, *, values: int = 1) -> float:
    """Absolute tolerance of a released score of size ``score`` (flooding is relative)."""
    scale = max(abs(score), 1.0)
    return preset.decryption_error_bound + flood_z(values) * preset.flood_sigma * scale


def shares_tolerance(contributions: int) -> float:
    """Worst-case error of a shares-mode weighted sum over ``contributions`` uploads.

    Each input is rounded to the prediction codec's ``2^-f`` (half a step), each
    weight to the weight codec's (half a step, times the clip bound per
    contribution), and the opened sum once more to ``2^-f``: a bound, not a
    probability, read from ``crypto.shares.RING_PREDICTIONS`` and ``RING_WEIGHTS``.
    """
    inputs = 2.0 ** -(RING_PREDICTIONS.frac_bits + 1)
    weights = contributions * RING_PREDICTIONS.clip_bound * 2.0 ** -(RING_WEIGHTS.frac_bits + 1)
    return 2 * inputs + weights

"""Central DP on the published aggregate: the noise, its sensitivity, and its ledger charge.

The key authority adds Gaussian noise to the published aggregate *before* it
leaves the authority, so the aggregator only ever sees the noisy values, and
charges every contributor one participant-level Gaussian mechanism
(Dwork and Roth 2014, Theorem A.1; composed with the rest of the history by
the ledger's RDP accountant). Replacing one participant's matrix moves a
weighted sum by at most ``max_weight * 2 * bound`` per value, so the L2
sensitivity over the ``N x C`` released values is
``max_weight * 2 * bound * sqrt(N * C)``.

The noise is calibrated to the caps the deployment enforces, configured in
:class:`CentralDP` (``bound``: the public clip bound every honest encoder
applies; ``max_weight``: the public cap on one participant's weight), never to
what a request claims: the ``bound`` and ``max_weight`` an aggregator sends may
only *raise* the sensitivity (:func:`add_central_noise` takes the larger).
Without configured caps the claims are all there is, and an aggregator that
under-states them gets less noise than the ledger charges for; configure both.

:class:`ChargeGate` is the part of a budget gate this needs (reserve, commit,
abort), defined in :mod:`privacy_ledger.budget.types` and re-exported here;
``privacy_ledger.PrivacyLedger`` implements it, and so does any budget gate of
the learning code, without the secure layer importing the learning layer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crypto.ckks.flooding import csprng_normal
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.types import ChargeGate
from secure_fed.errors import AuthorityRequestMalformed, KeyAuthorityConfigInvalid

__all__ = ["CentralDP", "ChargeGate", "add_central_noise", "central_sensitivity"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CentralDP:
    """Central Gaussian noise on the published aggregate (participant-level DP).

    Parameters
    ----------
    noise_multiplier
        ``z``: noise standard deviation over the L2 sensitivity (> 0).
    delta
        Delta recorded with the mechanism, in ``(0, 1)``.
    asset_id
        Ledger asset the mechanism is charged to.
    bound, max_weight
        The enforced caps the sensitivity is computed from: the public clip
        bound of every upload value and the public cap on one participant's
        weight, in ``(0, 1]`` (``None``: not configured, see the module notes).
    """

    noise_multiplier: float
    delta: float = 1e-5
    asset_id: str = "private-train"
    bound: float | None = None
    max_weight: float | None = None

    def __post_init__(self) -> None:
        z = self.noise_multiplier
        if not (isinstance(z, int | float) and math.isfinite(z) and z > 0):
            raise KeyAuthorityConfigInvalid(f"noise_multiplier must be > 0, got {z!r}")
        if not 0 < self.delta < 1:
            raise KeyAuthorityConfigInvalid(f"delta must be in (0, 1), got {self.delta!r}")
        if not isinstance(self.asset_id, str) or not self.asset_id:
            raise KeyAuthorityConfigInvalid(
                f"asset_id must be a non-empty string, got {self.asset_id!r}"
            )
        b, w = self.bound, self.max_weight
        if b is not None and not (_number(b) is not None and b > 0):
            raise KeyAuthorityConfigInvalid(f"bound must be > 0, got {b!r}")
        if w is not None and not (_number(w) is not None and 0 < w <= 1):
            raise KeyAuthorityConfigInvalid(f"max_weight must be in (0, 1], got {w!r}")

    def enforced_sensitivity(self, size: int) -> float:
        """L2 sensitivity from the configured caps (0.0 when they are not configured)."""
        if self.bound is None or self.max_weight is None:
            return 0.0
        return central_sensitivity(size=size, bound=self.bound, max_weight=self.max_weight)


def central_sensitivity(*, size: int, bound: object, max_weight: object) -> float:
    """L2 sensitivity of a weighted sum of ``size`` values clipped to ``[-bound, bound]``.

    ``bound`` and ``max_weight`` come from an untrusted request, hence the checks.

    Raises
    ------
    AuthorityRequestMalformed
        If ``bound`` is not > 0 or ``max_weight`` not in ``(0, 1]``.
    """
    b, w = _number(bound), _number(max_weight)
    if b is None or w is None or not (b > 0 and 0 < w <= 1):
        raise AuthorityRequestMalformed("central DP needs 'bound' > 0 and 'max_weight' in (0, 1]")
    return w * 2.0 * b * math.sqrt(size)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def add_central_noise(
    values: np.ndarray,
    *,
    dp: CentralDP,
    gate: ChargeGate,
    participant_ids: Sequence[str],
    sensitivity: float,
    round_id: int,
) -> np.ndarray:
    """Charge every contributor, then return ``values`` plus Gaussian noise.

    The noise scale is ``noise_multiplier`` times the larger of ``sensitivity``
    (from the request's claims) and the caps configured in ``dp``, and the
    ledger event records that applied sensitivity. Every reservation is held
    before any noise is drawn; if one contributor's budget refuses, the
    reservations already held are aborted and the refusal propagates (nothing
    is released, nothing is charged).
    """
    sensitivity = max(sensitivity, dp.enforced_sensitivity(values.size))
    event = MechanismEvent(
        noise_multiplier=dp.noise_multiplier,
        sample_rate=1.0,
        steps=1,
        delta=dp.delta,
        max_grad_norm=sensitivity,
        mechanism="gaussian",
    )
    held: list[str] = []
    try:
        for pid in participant_ids:
            reservation = gate.reserve(pid, dp.asset_id, event, round_id=f"r{round_id}-central")
            held.append(reservation.id)
    except Exception:
        for rid in held:
            gate.abort(rid)
        raise
    noise = csprng_normal(values.size).reshape(values.shape)
    noisy = values + dp.noise_multiplier * sensitivity * noise
    for rid in held:
        gate.commit(rid)
    _log.info(
        "central DP: round %d, z=%s, %d contributors charged",
        round_id,
        dp.noise_multiplier,
        len(held),
    )
    return np.asarray(noisy, dtype=np.float64)

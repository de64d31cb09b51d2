"""``shares`` aggregation mode: two additive shares over Z_2^64, Beaver-squared scores.

Participant side (:class:`SharesEncoder`, holding its :class:`SharesEnrolment`):
fixed-point encode (``RING_PREDICTIONS``, 12 fractional bits, bound 8), split
with a fresh PRG seed (:func:`crypto.shares.split_with_seed`); the explicit
share goes to the aggregator tagged with HMAC-SM3, the 32-byte seed goes to the
helper tagged and sealed with SM4-GCM under a key the aggregator does not hold.
The upload is about ``8 N C`` bytes plus a few hundred (under 1 MB for 10,000 x 10).

Server side (:class:`SharesAggregator`, party 0, holding :class:`SharesKeys`) and
:class:`~secure_fed.secure.parties.helper.HelperParty` (party 1) run the same
local steps; the key authority deals Beaver triples and holds no shares.
Openings happen only through the helper's gate: weighted sums over at least
``min_participants``, pooled second moments, scalar scores (one
:class:`SharesScoringRound` per round), evidence scalars, and at the plan's
``copies`` step one near-duplicate count each (never a distance or a pair). A
participant that drops out contributes nothing: sums run over the uploads
present. A tampered share fails its tag (``ShareTampered`` -> ``UploadMalformed``).

The in-process deployment that enrols the participants, starts the helper and
registers the mode is :class:`secure_fed.secure.inprocess.shares.SharesDeployment`;
``modes/`` imports no party.
"""

from __future__ import annotations

from secure_fed.secure.modes.shares_aggregator import SharesAggregator
from secure_fed.secure.modes.shares_keys import (
    CODEC,
    SECRET_BYTES,
    Dealer,
    SharesEncoder,
    SharesEnrolment,
    SharesKeys,
)
from secure_fed.secure.modes.shares_scoring import SharesScoringRound

__all__ = [
    "CODEC",
    "SECRET_BYTES",
    "Dealer",
    "SharesAggregator",
    "SharesEncoder",
    "SharesEnrolment",
    "SharesKeys",
    "SharesScoringRound",
]

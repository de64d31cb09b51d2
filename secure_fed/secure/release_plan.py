"""A round's release plan: which values are opened, over whom, with which weights.

The plan is fixed when the round opens, before any upload is accepted, and
both gatekeepers (the key authority in ckks mode, the helper in shares mode)
hold it next to the aggregator. It allows, per round and in this order:

1. ``ranking`` (when the plan ranks): one scalar score per participant of the
   round's roster, ``mean_{i<S} ||p_ki - p̄_i||^2`` with ``p̄`` the mean over the
   roster, never opened (``W = I``);
2. ``moments``: ONE second-order release, the centred pooled second moment of
   the robust subset ``H`` (the ``h`` lowest ranking scores; ``h`` from the
   plan's rule), centred on ``H``'s never-opened mean;
3. ``final``: one scalar per participant, whitened with the ``W`` derived from
   that covariance and centred on ``H``'s mean;
4. ``evidence`` (when the plan names a labeled slice of the public set,
   ``evidence``): one scalar per participant of the roster, ``sum(M * p_k)``
   with ``M`` the mask of exactly that slice
   (:mod:`secure_fed.secure.scoring.evidence`): a public linear function of one
   upload, the same kind of release as a score. The plan carries the slice's
   rows and labels, so a gatekeeper refuses a request naming any other mask
   (one row would reveal one prediction);
5. ``copies`` (when the plan detects copies, ``copies``): near-duplicate
   detection over the copy set ``A`` (inside the scored roster, at most a
   minority left out, each left-out member scored above the exclusion floor:
   the publication's rule). One pair distance ``d_jk = mean_i ||p_j,i -
   p_k,i||^2`` per pair of ``A``, each pair once (purpose ``distance``); the
   gatekeeper keeps every distance to itself and, once the last pair is
   decrypted, releases only ``copies_k``, the number of others within
   ``theta`` times the typical distance
   (:func:`~secure_fed.secure.scoring.evidence.near_duplicates`), one integer
   per member of ``A``. The publication's accepted set must then be ``A``;
6. ``publication``: exactly ONE first-order release, the weighted sum over
   the accepted set ``A``: ``A`` inside the roster, ``|A| >= min_participants``,
   at most a minority excluded, and every excluded participant's final score
   above the plan's exclusion floor or negative (no honest squared distance is:
   :func:`~secure_fed.secure.scoring.outlier.impossible_score`); every weight at least the codec's
   resolution (a weight that rounds to zero is refused, not treated as an
   exclusion) and at most ``max_weight``.

No mean is ever opened: the only linear function of the uploads a round reveals
is its publication. :class:`PlanTracker` is a deterministic state machine the
aggregator and each gatekeeper run on the values opened so far, so a
gatekeeper derives the next allowed opening (the subset, the whitening, the
row counts) itself instead of trusting the request. :class:`PlanBook` plugs
the trackers into :class:`~secure_fed.secure.release_policy.ReleasePolicy` as
an observing release rule; its refusals become ``access.denied`` events.
"""

from __future__ import annotations

from secure_fed.secure.plan_book import PlanBook
from secure_fed.secure.plan_tracker import PlanTracker
from secure_fed.secure.release_plan_core import (
    CAP_TOLERANCE,
    MIN_EVIDENCE_ROWS,
    MIN_MOMENT_ROWS,
    STEPS,
    WEIGHT_FLOOR,
    WHITENING_RTOL,
    ReleasePlan,
    exclusion_floor,
)

__all__ = [
    "CAP_TOLERANCE",
    "MIN_EVIDENCE_ROWS",
    "MIN_MOMENT_ROWS",
    "STEPS",
    "WEIGHT_FLOOR",
    "WHITENING_RTOL",
    "PlanBook",
    "PlanTracker",
    "ReleasePlan",
    "exclusion_floor",
]

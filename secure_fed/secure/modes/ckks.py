"""``ckks`` aggregation mode: class-major CKKS uploads, encrypted pooled Mahalanobis scores.

Participant side (:class:`CkksEncoder`): clip to the public bound and encrypt
class-major under the key epoch's public context (CKKS, Cheon-Kim-Kim-Song 2017,
via TenSEAL; ``crypto.ckks``). The context is distributed once per key epoch
and cited by its SM3 fingerprint, never attached to uploads.

Server side (:class:`CkksAggregator`, holding only :class:`CkksKeys`: no secret key):

* weighted sum with public weights: plaintext-scalar multiplies and additions;
* scoring (:mod:`secure_fed.secure.scoring.mahalanobis`, one :class:`CkksScoringRound`
  per round): the equal-weight mean is an aggregate the key authority decrypts;
  the second moments are ``ct_c * ct_c'`` of every participant's first
  ciphertext run (``S = N/2`` samples), summed over the participant set,
  slot-summed by rotations and decrypted as ``C(C+1)/2`` aggregate scalars;
  each score is ``z = W (ct - p̄)`` (plaintext-scalar multiplies, no
  rotations), squared, summed over classes and slot-summed *before*
  decryption, so the key authority only ever sees one scalar per participant,
  never a per-sample vector.

Publication epoch (the default; :data:`PUBLICATION_PRESET`): each participant
also encrypts its matrix under a second key epoch, ``CKKS_PUBLICATION``, whose
flooding keeps ``s >= 40`` bits for 16,384 decrypted ciphertexts. The upload is
then a ``ckks_upload`` frame (scoring ciphertexts, publication ciphertexts); the
published weighted sum is computed on the publication ciphertexts only and the
key authority decrypts it only under that epoch, scores and second moments only
under the scoring epoch. ``DeploymentPlan(publication_preset=None)`` turns it
off (weaker: the publication is then flooded like the scores, see
``docs/audit/threat-model.md``).

The second moments are centred on the revealed mean before multiplying, so
the pooled covariance suffers no cancellation (``E[pp^T] - p̄p̄^T`` lost about
1e-4 relative precision in CKKS, enough to move scores by 1%).

The in-process deployment that generates the key epoch in a key authority and
registers the mode is :class:`secure_fed.secure.inprocess.ckks.CkksDeployment`;
``modes/`` imports no party.
"""

from __future__ import annotations

from secure_fed.secure.modes.ckks_aggregator import CkksAggregator
from secure_fed.secure.modes.ckks_keys import PRESET, PUBLICATION_PRESET, CkksEncoder, CkksKeys
from secure_fed.secure.modes.ckks_round import CkksScoringRound
from secure_fed.secure.modes.ckks_upload import encode_upload, epoch_part, split_upload

__all__ = [
    "PRESET",
    "PUBLICATION_PRESET",
    "CkksAggregator",
    "CkksEncoder",
    "CkksKeys",
    "CkksScoringRound",
    "encode_upload",
    "epoch_part",
    "split_upload",
]

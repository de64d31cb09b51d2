"""One round's encrypted scoring backend of the ``ckks`` mode (:class:`CkksScoringRound`).

Importable from :mod:`secure_fed.secure.modes.ckks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix
from crypto.errors import CryptoError
from secure_fed.errors import (
    DecryptionRefused,
    ScoringInvalid,
)
from secure_fed.secure.ckks_claims import evaluate as evaluate_claim
from secure_fed.secure.computation.requests import score_request
from secure_fed.secure.modes.ckks_keys import CkksKeys, _decrypt
from secure_fed.secure.protocol.authority_requests import decryption_request
from secure_fed.secure.protocol.vocabulary import ClaimOp, Purpose, Step
from secure_fed.secure.release_plan import PlanTracker
from secure_fed.secure.release_policy import ReleaseRequest

__all__ = ["CkksScoringRound"]


class CkksScoringRound:
    """One round's encrypted scoring backend (``ScoringBackend``); discard after the round.

    No mean is decrypted: every centre is the hidden mean of a participant set
    (:mod:`secure_fed.secure.computation.ckks_scoring`). Every request names
    ``round_id``, is signed and claims how its ciphertext was computed (the
    centre's uploads, the whitening, the rows, the plan step); this side runs
    the round's plan state machine (``tracker``) on every opening, like the key
    authority.
    """

    def __init__(
        self,
        *,
        keys: CkksKeys,
        shape: tuple[int, int],
        samples: int,
        uploads: Mapping[str, EncryptedMatrix],
        round_id: int,
        digests: Mapping[str, str],
        tracker: PlanTracker,
    ) -> None:
        self.keys, self.shape, self.samples = keys, shape, samples
        self.uploads, self.round_id = dict(uploads), round_id
        self.digests, self.tracker = dict(digests), tracker
        self.public = keys.public_context

    def _claim(self, op: str, ids: Sequence[str], **params: object) -> dict[str, Any]:
        return {"op": op, "uploads": [[p, self.digests[p]] for p in ids], **params}

    def _open(self, purpose: str, claim: dict[str, Any], shape: tuple[int, int]) -> np.ndarray:
        """Compute the claimed ciphertext, sign the request naming the claim, decrypt."""
        matrix = evaluate_claim(claim, self.uploads, self.public)
        request = decryption_request(
            round_id=self.round_id,
            purpose=purpose,
            participant_ids=[u[0] for u in claim["uploads"]],
            shape=shape,
            ciphertext=matrix.to_bytes(),
            signer=self.keys.signer,
            claim=claim,
            epoch=self.public.fingerprint.hex(),
        )
        return _decrypt(self.keys, request)

    def ranking_scores(self, ids: Sequence[str], samples: int) -> dict[str, float]:
        """Decrypted ``mean_{i<S} ||p_k - p̄_i||^2`` per id, ``p̄`` the hidden mean of ``ids``."""
        if samples != self.samples:
            raise ScoringInvalid(f"ckks ranking scores use the first {self.samples} samples")
        return self._scores(Step.RANKING, ids, ids, np.eye(self.shape[1]), samples)

    def final_scores(
        self, ids: Sequence[str], subset: Sequence[str], whiten: np.ndarray
    ) -> dict[str, float]:
        """Decrypted ``mean_i ||W (p_k - p̄H_i)||^2`` per id (``p̄H``: hidden mean of subset)."""
        return self._scores(Step.FINAL, ids, subset, whiten, self.shape[0])

    def _scores(
        self, step: str, ids: Sequence[str], centre: Sequence[str], whiten: np.ndarray, rows: int
    ) -> dict[str, float]:
        matrix = np.asarray(whiten, dtype=np.float64)
        claimed = tuple(tuple(float(x) for x in row) for row in matrix)
        out = {}
        for pid in ids:
            ask = score_request(
                round_id=self.round_id,
                step=step,
                participant=pid,
                roster=ids,
                centre=centre,
                samples=rows,
                whitening=claimed,
            )
            self.tracker.require(ask, DecryptionRefused)
            claim = self._claim(
                "score",
                [pid],
                centre=[[p, self.digests[p]] for p in centre],
                samples=rows,
                whitening=matrix.tolist(),
                step=step,
                roster=list(ids),
            )
            try:
                value = self._open(Purpose.SCORE, claim, (rows, self.shape[1]))
            except CryptoError as exc:
                raise ScoringInvalid(f"encrypted score of {pid!r} refused: {exc}") from exc
            self.tracker.record(ask, value)
            out[pid] = float(value[0])
        return out

    def moments(self, subset: Sequence[str], samples: int) -> np.ndarray:
        """Decrypted ``C x C`` second moment of ``subset`` centred on its hidden mean.

        Products are summed over the subset, then over the slots (rotations)
        *before* decryption: per-sample sums over participants are never
        revealed (with two participants they would give both vectors up to order).
        """
        if samples != self.samples:
            raise ScoringInvalid(f"ckks second moments use {self.samples} samples, not {samples}")
        c = self.shape[1]
        ask = ReleaseRequest(
            round_id=self.round_id,
            purpose=Purpose.MOMENTS,
            contributors=tuple(subset),
            value_kind="aggregate",
            shape=(c, c),
            centre=tuple(subset),
            samples=samples,
        )
        self.tracker.require(ask, DecryptionRefused)
        centre = [[p, self.digests[p]] for p in subset]
        claim = self._claim(ClaimOp.MOMENTS, subset, centre=centre, samples=samples)
        moment = self._open(Purpose.MOMENTS, claim, (1, c * (c + 1) // 2)).reshape(c, c)
        self.tracker.record(ask, moment)
        return moment

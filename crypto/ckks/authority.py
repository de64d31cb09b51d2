"""Key-authority decryption: only aggregates and scalar scores, always noise-flooded.

The key authority holds the CKKS secret key and decrypts exactly two kinds of
ciphertexts (docs/architecture.md, parties): weighted sums over several
participants and per-participant scalar scores. It refuses uploads (a single
participant's predictions) and aggregates claiming fewer than
``min_contributors``; every released value is flooded (see
:mod:`crypto.ckks.flooding`, Li and Micciancio 2021).
"""

from __future__ import annotations

import hmac
import logging

import numpy as np
from numpy.typing import NDArray

from crypto.ckks import _tenseal
from crypto.ckks.aggregate import score_factor
from crypto.ckks.flooding import flood
from crypto.ckks.keys import KeyAuthorityKeys, _private_context, _reserve_releases
from crypto.ckks.packing import EncryptedMatrix, unpack_class_major
from crypto.errors import ContextMismatch, ParameterInvalid

__all__ = ["decrypt_aggregate", "decrypt_score"]

logger = logging.getLogger(__name__)


def _check_epoch(keys: KeyAuthorityKeys, matrix: EncryptedMatrix, kind: str) -> None:
    if not isinstance(matrix, EncryptedMatrix) or matrix.kind != kind:
        raise ParameterInvalid(f"the key authority decrypts only {kind}s here")
    if matrix.preset is not keys.preset or not hmac.compare_digest(
        matrix.fingerprint, keys.fingerprint
    ):
        raise ContextMismatch("ciphertexts belong to another key epoch than these keys")


def decrypt_aggregate(
    keys: KeyAuthorityKeys, aggregate: EncryptedMatrix, *, min_contributors: int = 2
) -> NDArray[np.float64]:
    """Decrypt a weighted sum and release it flooded, as a ``[N_pub, C]`` matrix.

    Parameters
    ----------
    keys
        The key authority's keys of the aggregate's epoch.
    aggregate
        Output of :func:`crypto.ckks.weighted_sum` (possibly via the wire).
    min_contributors
        Refuse aggregates over fewer uploads than this (at least 2).

    Raises
    ------
    ParameterInvalid
        Not an aggregate, or fewer contributors than ``min_contributors``.
    ContextMismatch
        Another key epoch.
    ReleaseLimitReached
        The epoch already released the ciphertexts its preset is sized for.
    DecryptionFailed
        SEAL refused to decrypt.
    """
    _check_epoch(keys, aggregate, "aggregate")
    if not isinstance(min_contributors, int) or min_contributors < 2:
        raise ParameterInvalid("min_contributors must be an integer >= 2")
    if aggregate.contributors < min_contributors:
        raise ParameterInvalid(
            f"aggregate over {aggregate.contributors} uploads; at least {min_contributors} needed"
        )
    _reserve_releases(keys, len(aggregate.vectors))  # before anything is decrypted
    ctx = _private_context(keys)
    runs = [_tenseal.decrypt_vector(ctx, v) for v in aggregate.vectors]
    matrix = unpack_class_major(aggregate.layout, runs)
    if aggregate.weight_bits:
        matrix = matrix / float(1 << aggregate.weight_bits)
    logger.info(
        "released flooded aggregate %dx%d over %d contributors",
        aggregate.layout.n_samples,
        aggregate.layout.n_classes,
        aggregate.contributors,
    )
    return flood(matrix, sigma=keys.preset.flood_sigma)


def decrypt_score(keys: KeyAuthorityKeys, score: EncryptedMatrix) -> float:
    """Decrypt one participant's score and release the flooded mean over samples.

    The flooding is relative: standard deviation ``flood_sigma * max(|score|, 1)``.

    Raises
    ------
    ParameterInvalid
        Not a score.
    ContextMismatch
        Another key epoch.
    ReleaseLimitReached
        The epoch already released the ciphertexts its preset is sized for.
    DecryptionFailed
        SEAL refused to decrypt.
    """
    _check_epoch(keys, score, "score")
    _reserve_releases(keys, 1)  # before anything is decrypted
    value = _tenseal.decrypt_vector(_private_context(keys), score.vectors[0])
    n = score.layout.n_samples
    mean = float(value[0]) / (score_factor(n) ** 2 * n)
    logger.info("released one flooded score")
    sigma = keys.preset.flood_sigma * max(abs(mean), 1.0)
    return float(flood(np.array([mean]), sigma=sigma)[0])

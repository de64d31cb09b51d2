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
import math

import numpy as np
from numpy.typing import NDArray

from crypto.ckks import _tenseal
from crypto.ckks.aggregate import score_factor
from crypto.ckks.flooding import flood
from crypto.ckks.keys import KeyAuthorityKeys, _private_context, _reserve_releases
from crypto.ckks.packing import EncryptedMatrix, unpack_class_major
from crypto.ckks.presets import CkksPreset
from crypto.errors import AggregateInconsistent, ContextMismatch, ParameterInvalid

__all__ = [
    "WITNESS_SIGMAS",
    "decrypt_aggregate",
    "decrypt_checked_publication",
    "decrypt_score",
    "publication_tolerance",
]

#: Standard deviations of the flooded difference a consistent publication stays within,
#: per value: over 10^5 values the chance that an honest one crosses it is about 3e-7.
WITNESS_SIGMAS = 7.0

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


def publication_tolerance(
    publication: CkksPreset, witness: CkksPreset, *, contributors: int
) -> float:
    """Largest honest difference between a flooded publication and its flooded witness.

    Per value: ``WITNESS_SIGMAS`` standard deviations of the two floodings' difference,
    both presets' stated CKKS error bounds, and the integer-weight rounding of the
    publication (``contributors * input_bound * 2^-weight_bits``: each integer weight is
    within ``2^-weight_bits`` of the real weight the witness applies).

    Raises
    ------
    ParameterInvalid
        If ``contributors`` is not a positive integer.
    """
    if not isinstance(contributors, int) or isinstance(contributors, bool) or contributors < 1:
        raise ParameterInvalid(f"contributors must be a positive integer, got {contributors!r}")
    sigma = math.hypot(publication.flood_sigma, witness.flood_sigma)
    rounding = (
        contributors * publication.input_bound * 2.0**-publication.weight_bits
        if publication.weight_encoding == "integer"
        else 0.0
    )
    errors = publication.decryption_error_bound + witness.decryption_error_bound
    return WITNESS_SIGMAS * sigma + errors + rounding


def decrypt_checked_publication(
    keys: KeyAuthorityKeys,
    aggregate: EncryptedMatrix,
    *,
    witness_keys: KeyAuthorityKeys,
    witness: EncryptedMatrix,
    min_contributors: int = 2,
) -> NDArray[np.float64]:
    """Decrypt a publication only if it is the weighted sum of the values that were scored.

    With two key epochs each upload carries its matrix twice: under the scoring epoch
    (scored, compared, read for evidence) and under the publication epoch (published).
    Nothing a participant sends proves the two parts equal, so the aggregator sends,
    with the publication, its *witness*: the same weighted sum of the same uploads'
    scoring-epoch ciphertexts. Both are decrypted and flooded here; the publication is
    returned only if every value is within :func:`publication_tolerance` of the
    witness and within the preset's public input bound (a weighted mean of clipped
    values is clipped). The witness never leaves this function.

    Parameters
    ----------
    keys, aggregate
        The publication epoch's keys and the publication.
    witness_keys, witness
        The scoring epoch's keys and the same weighted sum under it.
    min_contributors
        As in :func:`decrypt_aggregate`, for both.

    Raises
    ------
    AggregateInconsistent
        The two sums differ beyond the tolerance, or a published value is out of bound
        (nothing is returned; the message names no value).
    ParameterInvalid, ContextMismatch, ReleaseLimitReached, DecryptionFailed
        As :func:`decrypt_aggregate`, for either; or the two differ in layout or
        contributor count.
    """
    _check_epoch(keys, aggregate, "aggregate")
    _check_epoch(witness_keys, witness, "aggregate")
    if witness.layout.n_samples != aggregate.layout.n_samples or (
        witness.layout.n_classes != aggregate.layout.n_classes
    ):
        raise ParameterInvalid("the witness is not of the publication's shape")
    if witness.contributors != aggregate.contributors:
        raise ParameterInvalid(
            f"the witness sums {witness.contributors} uploads, the publication "
            f"{aggregate.contributors}"
        )
    published = decrypt_aggregate(keys, aggregate, min_contributors=min_contributors)
    scored = decrypt_aggregate(witness_keys, witness, min_contributors=min_contributors)
    tolerance = publication_tolerance(
        keys.preset, witness_keys.preset, contributors=aggregate.contributors
    )
    if not (np.isfinite(published).all() and np.isfinite(scored).all()):
        raise AggregateInconsistent("the publication or its witness decrypts to no number")
    if float(np.max(np.abs(published - scored))) > tolerance:
        raise AggregateInconsistent(
            "the publication is not the weighted sum of the scored ciphertexts "
            f"(tolerance {tolerance:.3g} per value)"
        )
    if float(np.max(np.abs(published))) > keys.preset.input_bound + tolerance:
        raise AggregateInconsistent(
            f"a published value lies outside the input bound {keys.preset.input_bound:g}"
        )
    logger.info("publication matches its scoring-epoch witness")
    return published

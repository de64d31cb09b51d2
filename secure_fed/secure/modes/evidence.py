"""The evidence of correctness and pairwise distances under CKKS and under additive shares.

The evidence of participant ``k`` is ``e_k = sum_{i,c} M[i, c] p_k[i, c]`` with
``M`` the public mask of the labeled slice
(:func:`secure_fed.secure.scoring.evidence.evidence_mask`): a PUBLIC linear
function of one upload, so neither mode needs the upload in the clear.

* **ckks** (:func:`ckks_evidence`): per class and ciphertext run, ciphertext x
  plaintext mask column (one level), added over classes, then summed over the
  slots (rotations) *before* decryption: the key authority decrypts one scalar,
  as for a score, and never a per-row value. The mask is pre-scaled so that
  :func:`crypto.ckks.decrypt_score` returns ``e_k`` (its ``n^-1/2`` scaling and
  TenSEAL's rescale bias are folded in, as in the scores).
* **shares** (:func:`share_evidence`): each server applies the integer mask
  ``C 1[c = y_i] - 1`` to its own share and sums (a local linear map over
  ``Z_2^64``, no communication); opening the two sums gives
  ``C |R| 2^f e_k`` exactly (:func:`open_evidence`).

Near-duplicate detection (FoolsGold, Fung et al. 2020) needs the pairwise mean
squared distances ``d_jk``: under CKKS :func:`ckks_pair_distance` is the hidden-
centre score of ``k`` against the one-participant centre ``{j}`` with ``W = I``
(depth 2), decrypted by the key authority, which then learns every ``d_jk``
and should release only the per-participant count of near-duplicates
(docs/learning.md, "Colluders and copies").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, Layout
from crypto.ckks.aggregate import score_factor
from crypto.shares.codec import RING_PREDICTIONS
from secure_fed.errors import ScoringInvalid
from secure_fed.secure.modes import ckks_scoring

__all__ = [
    "ckks_evidence",
    "ckks_pair_distance",
    "integer_mask",
    "open_evidence",
    "share_evidence",
]


def ckks_evidence(up: EncryptedMatrix, mask: np.ndarray) -> EncryptedMatrix:
    """Encrypted ``sum(mask * upload)``, one slot-summed ciphertext (``kind="score"``).

    Raises
    ------
    ScoringInvalid
        If the mask's shape is not the upload's or the preset lacks Galois keys.
    """
    layout = up.layout
    m = np.asarray(mask, dtype=np.float64)
    if m.shape != (layout.n_samples, layout.n_classes) or not np.isfinite(m).all():
        raise ScoringInvalid(f"mask shape {m.shape} is not the upload's")
    if not up.preset.galois_keys:
        raise ScoringInvalid(f"the slot sum needs Galois keys; {up.preset.name} has none")
    # decrypt_score divides by f^2 n = sqrt(n); the rescale factor cancels TenSEAL's bias
    scale = score_factor(layout.n_samples) ** 2 * layout.n_samples
    scale *= up.preset.rescale_factor(up.preset.data_primes)
    total: Any = None
    for chunk in range(layout.chunks):
        start, stop = layout.run(chunk)
        acc: Any = None
        for cls in range(layout.n_classes):
            column = m[start:stop, cls] * scale
            if not column.any():
                continue
            term = up.vectors[layout.index(cls, chunk)] * column.tolist()
            acc = term if acc is None else acc.add_(term)
        if acc is not None:
            part = acc.sum()
            total = part if total is None else total.add_(part)
    if total is None:
        raise ScoringInvalid("the evidence mask is all zeros")
    out_layout = Layout(n_samples=layout.n_samples, n_classes=1, slots=layout.slots)
    return EncryptedMatrix(
        kind="score",
        preset=up.preset,
        fingerprint=up.fingerprint,
        layout=out_layout,
        vectors=[total],
    )


def ckks_pair_distance(first: EncryptedMatrix, second: EncryptedMatrix) -> EncryptedMatrix:
    """Encrypted ``mean_i ||p_first,i - p_second,i||^2``: a score centred on ``{second}``."""
    classes = first.layout.n_classes
    return ckks_scoring.score(first, [second], np.eye(classes), first.layout.n_samples)


def integer_mask(*, rows: np.ndarray, labels: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Return the ``int64`` mask ``C 1[c = y_i] - 1`` on ``rows`` (0 elsewhere).

    Raises
    ------
    ScoringInvalid
        If ``rows`` and ``labels`` differ in length or leave the shape.
    """
    n, c = shape
    r, y = np.asarray(rows, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    if (
        r.shape != y.shape
        or r.size == 0
        or r.min() < 0
        or r.max() >= n
        or y.min() < 0
        or y.max() >= c
    ):
        raise ScoringInvalid("evidence rows and labels must match and lie inside the shape")
    mask = np.zeros((n, c), dtype=np.int64)
    mask[r] = -1
    mask[r, y] += c
    return mask


def share_evidence(share: np.ndarray, mask: np.ndarray) -> np.uint64:
    """One server's share of ``sum(mask * x)`` over ``Z_2^64`` (local, no communication)."""
    s = np.asarray(share, dtype=np.uint64)
    if s.shape != mask.shape:
        raise ScoringInvalid(f"share shape {s.shape} is not the mask's {mask.shape}")
    with np.errstate(over="ignore"):
        return np.uint64(np.sum(s * mask.astype(np.uint64), dtype=np.uint64))


def open_evidence(first: np.uint64, second: np.uint64, *, rows: int, classes: int) -> float:
    """Open the two servers' sums: ``(s0 + s1) / (C |R| 2^f)`` as a signed value."""
    with np.errstate(over="ignore"):
        total = int(np.uint64(first) + np.uint64(second))
    if total >= 1 << 63:
        total -= 1 << 64
    return total / (classes * rows * math.ldexp(1.0, RING_PREDICTIONS.frac_bits))

"""The evidence of correctness and pairwise distances under CKKS and under additive shares.

The evidence of participant ``k`` is ``e_k = sum_{i,c} M[i, c] p_k[i, c]`` with
``M`` the public mask of the labeled slice
(:func:`secure_fed.secure.scoring.evidence.evidence_mask`): a PUBLIC linear
function of one upload, so neither mode needs the upload in the clear.

* **ckks** (:func:`ckks_evidence`): per class and ciphertext run, ciphertext x
  plaintext mask column (one level), added over classes, then summed over the
  slots (rotations) *before* decryption, then one plaintext-scalar multiply that
  brings it to the level of a score: the key authority decrypts one scalar, as
  for a score, and never a per-row value. The result is laid out as a score
  over the slice's ``|R|`` rows and pre-scaled so that
  :func:`crypto.ckks.decrypt_score` returns ``e_k`` (its ``|R|^-1/2`` scaling
  and TenSEAL's rescale bias are folded in, as in the scores).
* **shares** (:func:`share_evidence`, :func:`evidence_sums`): each server applies
  the integer mask ``C 1[c = y_i] - 1`` to its own share and sums (a local
  linear map over ``Z_2^64``, no communication); opening the two sums gives
  ``C |R| 2^f e_k`` exactly (:func:`open_evidence`). The helper applies the
  mask of the round's plan to its own shares, whatever the aggregator did with
  its own: the opened value is the plan's evidence plus an offset the
  aggregator chose and knows.

Near-duplicate detection (FoolsGold, Fung et al. 2020) needs the pairwise mean
squared distances ``d_jk``: under CKKS :func:`ckks_pair_distance` is the hidden-
centre score of ``k`` against the one-participant centre ``{j}`` with ``W = I``
(depth 2), decrypted by the key authority at the release plan's ``copies`` step;
it keeps every ``d_jk`` and releases only the per-participant count of
near-duplicates (docs/learning.md, "Copies").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, Layout
from crypto.ckks.aggregate import score_factor
from crypto.shares.codec import RING_PREDICTIONS
from secure_fed.errors import ScoringInvalid
from secure_fed.secure.computation import ckks_scoring
from secure_fed.secure.protocol.codecs import slice_fields, slice_from_fields
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = [
    "ckks_evidence",
    "ckks_pair_distance",
    "evidence_sums",
    "integer_mask",
    "open_evidence",
    "open_sums",
    "share_evidence",
    "slice_fields",
    "slice_from_fields",
]


def ckks_evidence(up: EncryptedMatrix, mask: np.ndarray) -> EncryptedMatrix:
    """Encrypted ``sum(mask * upload)``: one slot-summed ciphertext at a score's level.

    Laid out as a score over the mask's ``|R|`` non-zero rows (``kind="score"``,
    ``|R| x C``), so the key authority loads it with a score's checks (one value,
    the level after ``depth`` rescales) and :func:`crypto.ckks.decrypt_score`
    returns the value.

    Raises
    ------
    ScoringInvalid
        If the mask's shape is not the upload's, it is all zeros, or the preset
        lacks Galois keys or the depth of a score.
    """
    layout, preset = up.layout, up.preset
    m = np.asarray(mask, dtype=np.float64)
    if m.shape != (layout.n_samples, layout.n_classes) or not np.isfinite(m).all():
        raise ScoringInvalid(f"mask shape {m.shape} is not the upload's")
    if not preset.galois_keys or preset.depth < 2:
        raise ScoringInvalid(
            f"the slot sum needs Galois keys and depth 2; {preset.name} lacks them"
        )
    rows = int(np.count_nonzero(m.any(axis=1)))
    if rows == 0:
        raise ScoringInvalid("the evidence mask is all zeros")
    # decrypt_score divides by f^2 |R| = sqrt(|R|); the rescale factors cancel TenSEAL's bias
    top = preset.data_primes
    scale = score_factor(rows) ** 2 * rows * preset.rescale_factor(top)
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
    for level in range(top - 1, top - preset.depth, -1):  # down to the level of a score
        total = total * preset.rescale_factor(level)
    out_layout = Layout(n_samples=rows, n_classes=layout.n_classes, slots=layout.slots)
    return EncryptedMatrix(
        kind="score",
        preset=preset,
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


def evidence_sums(shares: Sequence[np.ndarray], piece: EvidenceSlice) -> np.ndarray:
    """One server's share of every upload's evidence: the slice's integer mask, summed locally."""
    if not shares:
        raise ScoringInvalid("no shares to apply the evidence mask to")
    shape = np.asarray(shares[0]).shape
    mask = integer_mask(rows=np.asarray(piece.rows), labels=np.asarray(piece.labels), shape=shape)
    return np.array([share_evidence(s, mask) for s in shares], dtype=np.uint64)


def open_sums(first: np.ndarray, second: np.ndarray, *, rows: int, classes: int) -> list[float]:
    """Open both servers' :func:`evidence_sums` into one evidence value per upload.

    Raises
    ------
    ScoringInvalid
        If the two vectors differ in shape.
    """
    a, b = np.asarray(first, dtype=np.uint64), np.asarray(second, dtype=np.uint64)
    if a.shape != b.shape or a.ndim != 1:
        raise ScoringInvalid(f"evidence sums of shapes {a.shape} and {b.shape} do not match")
    return [open_evidence(x, y, rows=rows, classes=classes) for x, y in zip(a, b, strict=True)]

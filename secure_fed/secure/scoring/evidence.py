"""Evidence of correctness and near-duplicate detection: one scalar per participant each.

Two per-participant releases the weighting uses (docs/learning.md, "Weights that
reward being right"), both computed here on plaintext matrices as the reference
the secure modes reproduce:

* **Evidence** (a public linear function of the upload). A labeled slice of the
  public set (rows ``R``, labels ``y``, both known to the servers) gives the mask
  ``M[i, c] = (1[c = y_i] - 1/C) / |R|`` on the rows of ``R`` and 0 elsewhere, and
  ``e_k = sum_{i,c} M[i, c] p_k[i, c]``: the mean *centred true-class logit*
  (the true class's logit minus the row's mean logit) over the slice. It is
  linear in the upload, so the ckks mode computes it as ciphertext x plaintext
  mask plus a slot sum, and the shares mode as a local linear map of each
  share, opening one scalar. Probabilities are not linear in the logits and
  cannot be computed this way; the centred logit is the linear stand-in, as in
  the margin-based validation scores of contribution-weighted aggregation
  (e.g. FedFomo, Zhang et al., ICLR 2021, which weights by validation loss).
* **Near-duplicates** (FoolsGold, Fung et al., "The Limitations of Federated
  Learning in Sybil Settings", RAID 2020). Pairwise mean squared distances
  ``d_jk = mean_i ||p_j,i - p_k,i||^2``; participant ``k``'s *copies* count is
  the number of others within ``theta`` times the typical distance (the median
  over participants of each one's median distance to the others), or within
  the absolute floor ``DUPLICATE_FLOOR`` (``10^-2``: an RMS logit difference of
  about ``0.1 / sqrt(C)``, some 30 times the CKKS decryption noise of a zero
  distance, so a group that is most of the set and whose typical distance is
  therefore about zero is still found under encryption).
  A group of ``n`` participants sending the same matrix then shares one
  participant's weight (each gets the factor ``1 / n``). The gatekeeper that
  computes the distances (the key authority in ckks mode) learns the ``K(K-1)/2``
  distances and releases only the count per participant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from secure_fed.errors import ScoringInvalid

__all__ = [
    "DUPLICATE_FLOOR",
    "DUPLICATE_THETA",
    "EvidenceSlice",
    "evidence_mask",
    "near_duplicates",
    "pairwise_distances",
    "plain_evidence",
]

#: Two uploads closer than this fraction of the median pairwise distance are near-duplicates.
DUPLICATE_THETA = 0.25
#: Two uploads whose mean squared row distance is at most this are near-duplicates anyway.
DUPLICATE_FLOOR = 1e-2


def evidence_mask(
    *, rows: Sequence[int], labels: Sequence[int], shape: tuple[int, int]
) -> np.ndarray:
    """Return the ``[N, C]`` mask ``M`` of the mean centred true-class logit over ``rows``.

    Raises
    ------
    ScoringInvalid
        If ``rows`` is empty, repeats a row, leaves ``[0, N)``, or a label leaves ``[0, C)``.
    """
    n, c = shape
    r = np.asarray(rows, dtype=np.int64)
    y = np.asarray(labels, dtype=np.int64)
    if r.ndim != 1 or r.size == 0 or r.shape != y.shape:
        raise ScoringInvalid("the evidence slice needs one label per row and at least one row")
    if len(np.unique(r)) != r.size or r.min() < 0 or r.max() >= n:
        raise ScoringInvalid(f"evidence rows must be distinct and in [0, {n})")
    if y.min() < 0 or y.max() >= c:
        raise ScoringInvalid(f"evidence labels must be in [0, {c})")
    mask = np.zeros((n, c), dtype=np.float64)
    mask[r] = -1.0 / c
    mask[r, y] += 1.0
    return mask / r.size


def plain_evidence(matrices: Mapping[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    """Return ``e_k = sum(M * p_k)`` per participant (the plaintext reference)."""
    m = np.asarray(mask, dtype=np.float64)
    out = {}
    for pid, p in matrices.items():
        arr = np.asarray(p, dtype=np.float64)
        if arr.shape != m.shape:
            raise ScoringInvalid(f"upload of {pid!r} has shape {arr.shape}, the mask {m.shape}")
        out[pid] = float(np.sum(m * arr))
    return out


def pairwise_distances(matrices: Mapping[str, np.ndarray]) -> dict[tuple[str, str], float]:
    """Return ``d_jk = mean_i ||p_j,i - p_k,i||^2`` for every pair ``j < k`` (sorted ids)."""
    ids = sorted(matrices)
    mats = {p: np.asarray(matrices[p], dtype=np.float64) for p in ids}
    out = {}
    for a, j in enumerate(ids):
        for k in ids[a + 1 :]:
            diff = mats[j] - mats[k]
            out[(j, k)] = float(np.mean(np.sum(diff * diff, axis=1)))
    return out


def near_duplicates(
    distances: Mapping[tuple[str, str], float],
    ids: Sequence[str],
    *,
    theta: float = DUPLICATE_THETA,
    floor: float = DUPLICATE_FLOOR,
) -> dict[str, int]:
    """Return, per id, how many others lie within ``max(theta x typical, floor)``.

    The typical distance is the median over participants of each one's median
    distance to the others: a minority far away (noise, scaling) cannot inflate
    it, since every honest participant's median is a distance to another honest
    one. A typical distance of zero (most uploads identical) makes every zero
    distance a duplicate, and ``floor`` every distance below the noise of an
    encrypted zero.

    Raises
    ------
    ScoringInvalid
        If ``theta`` is outside ``[0, 1)``, ``floor`` is negative, a distance is
        negative or not finite, or a pair of ``ids`` is missing.
    """
    if not 0 <= theta < 1:
        raise ScoringInvalid(f"theta must be in [0, 1), got {theta!r}")
    if not (np.isfinite(floor) and floor >= 0):
        raise ScoringInvalid(f"floor must be finite and >= 0, got {floor!r}")
    names = sorted(ids)
    pairs = [(j, k) for a, j in enumerate(names) for k in names[a + 1 :]]
    missing = [p for p in pairs if p not in distances]
    if missing:
        raise ScoringInvalid(f"pairwise distances lack {missing[:3]}")
    values = np.array([distances[p] for p in pairs], dtype=np.float64)
    if values.size and not (np.isfinite(values).all() and values.min() >= 0):
        raise ScoringInvalid("pairwise distances must be finite and >= 0")
    cut = max(theta * _typical(distances, names), floor)
    counts = dict.fromkeys(names, 0)
    for (j, k), d in zip(pairs, values, strict=True):
        if d <= cut:
            counts[j] += 1
            counts[k] += 1
    return counts


def _typical(distances: Mapping[tuple[str, str], float], names: Sequence[str]) -> float:
    """Median over ``names`` of each one's median distance to the others (0 for one name)."""
    if len(names) < 2:
        return 0.0
    per = [
        float(np.median([distances[(min(j, k), max(j, k))] for k in names if k != j]))
        for j in names
    ]
    return float(np.median(per))


@dataclass(frozen=True)
class EvidenceSlice:
    """The labeled slice of the public set: row indices and their labels (servers only).

    Parameters
    ----------
    rows
        Distinct public-set rows whose labels the servers know.
    labels
        One class per row.
    """

    rows: tuple[int, ...]
    labels: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.labels) or not self.rows:
            raise ScoringInvalid("the evidence slice needs one label per row and at least one row")

    def mask(self, shape: tuple[int, int]) -> np.ndarray:
        """Return :func:`evidence_mask` of this slice for uploads of ``shape``."""
        return evidence_mask(rows=self.rows, labels=self.labels, shape=shape)

    @property
    def size(self) -> int:
        """Rows in the slice."""
        return len(self.rows)

    def for_round(self, round_id: int) -> EvidenceSlice:
        """Return this slice for every round (a fixed slice; see the federation's pool)."""
        del round_id
        return self

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
  the number of others within ``tau = max(theta x typical, floor)``.
  The *typical* distance (:func:`round_typical`) comes from values the plan's
  scoring steps opened anyway, the same in every mode, so plaintext, shares
  and ckks take the same decisions. It is the smaller of two estimates of the
  distance between two honest uploads:

  - the mean pair distance within the robust subset ``H`` (:func:`subset_typical`):
    ``sum_{j<k in H} ||p_j - p_k||^2 = h sum_{k in H} ||p_k - pbar_H||^2`` (an
    identity), so the mean of ``d_jk`` over H's pairs on the moment rows is
    exactly ``2 h/(h-1) tr(Sigma_H)``. Uploads outside ``H`` (the ranking pass
    keeps the ``h`` closest to everybody's mean: far ones are outside) cannot
    move it, but one member of ``H`` far from the others can (a coalition whose
    far members pull everybody's mean lets another member sit inside ``H``);
  - ``2 (C-1) median_k s_k / ||W||_F^2`` from the final scores ``s_k`` and the
    whitening ``W`` (:func:`whitened_typical`): ``s_k = tr(P S_k)`` with
    ``P = W^T W`` and ``S_k`` the upload's scatter around ``pbar_H``, so the
    ratio is a ``P``-weighted mean of an honest upload's variances (the median
    score is an honest one's while honest uploads are a majority). Widening
    ``Sigma_H`` in any direction lowers ``P``'s weight there instead of raising
    the estimate; for identical honest spread it is the harmonic mean of the
    eigenvalues of the projected covariance, at most the arithmetic one.

  The minimum can only rise if both do. Without a ranking pass ``H`` is
  everybody and the threshold is the floor. ``floor`` =
  :data:`DUPLICATE_FLOOR` (``10^-2``: an RMS logit difference of about
  ``0.1 / sqrt(C)``, some 30 times the CKKS decryption noise of a zero
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
    "copies_threshold",
    "evidence_mask",
    "near_duplicates",
    "pairwise_distances",
    "plain_evidence",
    "round_typical",
    "subset_typical",
    "whitened_typical",
]

#: Two uploads closer than this fraction of the typical pair distance are near-duplicates.
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


def subset_typical(covariance: np.ndarray, *, subset: int) -> float:
    """Return the mean pair distance within the robust subset: ``2 h/(h-1) tr(Sigma_H)``.

    ``Sigma_H = M / (h S)`` is the pooled covariance the plan's ``moments`` step
    opened (:func:`~secure_fed.secure.scoring.mahalanobis.pooled_covariance`),
    ``M = sum_{k in H} sum_{i<S} (p_ki - pbar_H,i)(p_ki - pbar_H,i)^T``. Since
    ``sum_{j<k in H} ||p_j,i - p_k,i||^2 = h sum_{k in H} ||p_k,i - pbar_H,i||^2``
    for every row, the mean of ``d_jk`` over the ``h(h-1)/2`` pairs of ``H`` on
    the moment rows is exactly ``2 tr(M) / ((h-1) S) = 2 h/(h-1) tr(Sigma_H)``
    (for uploads drawn around a common mean with per-row covariance ``Sigma``,
    its expectation is ``2 tr(Sigma)``, the expected distance of two of them).
    Only members of ``H`` enter it: an upload the ranking pass left out cannot
    move it.

    Parameters
    ----------
    covariance
        ``C x C`` pooled covariance ``Sigma_H`` of the subset.
    subset
        ``h``, the subset's size (>= 2).

    Raises
    ------
    ScoringInvalid
        If ``subset < 2`` or ``covariance`` is not a finite square matrix.
    """
    cov = np.asarray(covariance, dtype=np.float64)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or not np.isfinite(cov).all():
        raise ScoringInvalid(f"covariance must be a finite square matrix, got {cov.shape}")
    if isinstance(subset, bool) or not isinstance(subset, int) or subset < 2:
        raise ScoringInvalid(f"a subset needs at least two members for a pair, got {subset!r}")
    return max(0.0, 2.0 * subset / (subset - 1) * float(np.trace(cov)))


def whitened_typical(scores: Mapping[str, float], whiten: np.ndarray) -> float:
    """Return ``2 (C-1) median_k s_k / ||W||_F^2``: the final scores' estimate of ``E d_jk``.

    ``s_k = mean_i ||W (p_ki - pbar_H,i)||^2 = tr(P S_k)``, ``P = W^T W`` (rank
    ``C - 1``) and ``S_k`` the upload's mean scatter around ``H``'s mean, so
    ``s_k / tr(P)`` is a ``P``-weighted mean of its variances: at most its
    largest, whatever ``Sigma_H`` (and hence ``P``) an attacker widens.

    Parameters
    ----------
    scores
        The final (whitened) scores of the roster.
    whiten
        The ``(C-1) x C`` whitening the final scores used.

    Raises
    ------
    ScoringInvalid
        If there is no score or ``whiten`` is not a finite non-zero matrix. A score
        that is not a number counts as the largest; if the median is not finite
        the estimate is 0 (the threshold is then the floor).
    """
    values = np.array(list(scores.values()), dtype=np.float64)
    w = np.asarray(whiten, dtype=np.float64)
    if values.size == 0:
        raise ScoringInvalid("the whitened typical distance needs the final scores")
    norm = float(np.sum(w * w)) if w.ndim == 2 and np.isfinite(w).all() else 0.0
    if not norm > 0:
        raise ScoringInvalid(f"the whitening must be a finite non-zero matrix, got {w.shape}")
    # a score that is not a number counts as the largest; a median that is not gives 0
    middle = float(np.median(np.where(np.isnan(values), np.inf, values)))
    if not np.isfinite(middle):
        return 0.0
    return max(0.0, 2.0 * int(w.shape[0]) * middle / norm)


def round_typical(
    *,
    covariance: np.ndarray,
    subset: int,
    scores: Mapping[str, float],
    whiten: np.ndarray,
) -> float:
    """Return the round's typical distance: ``min(subset_typical, whitened_typical)``.

    Every mode's copy threshold is :func:`copies_threshold` of this value (see
    the module docstring for why neither estimate alone is kept).

    Raises
    ------
    ScoringInvalid
        As :func:`subset_typical` and :func:`whitened_typical`.
    """
    return min(
        subset_typical(covariance, subset=subset),
        whitened_typical(scores, whiten),
    )


def copies_threshold(
    typical: float | None, *, theta: float = DUPLICATE_THETA, floor: float = DUPLICATE_FLOOR
) -> float:
    """Return ``tau = max(theta x typical, floor)``; ``typical=None`` (no ranking pass): ``floor``.

    Raises
    ------
    ScoringInvalid
        If ``theta`` is outside ``[0, 1)``, ``floor`` is negative or not finite,
        or ``typical`` is negative or not finite.
    """
    if not 0 <= theta < 1:
        raise ScoringInvalid(f"theta must be in [0, 1), got {theta!r}")
    if not (np.isfinite(floor) and floor >= 0):
        raise ScoringInvalid(f"floor must be finite and >= 0, got {floor!r}")
    if typical is None:
        return float(floor)
    if not (np.isfinite(typical) and typical >= 0):
        raise ScoringInvalid(f"the typical distance must be finite and >= 0, got {typical!r}")
    return max(theta * float(typical), float(floor))


def near_duplicates(
    distances: Mapping[tuple[str, str], float],
    ids: Sequence[str],
    *,
    threshold: float | None = None,
    theta: float = DUPLICATE_THETA,
    floor: float = DUPLICATE_FLOOR,
) -> dict[str, int]:
    """Return, per id, how many others lie within the copy threshold.

    Every mode passes ``threshold``: :func:`copies_threshold` of the round's
    :func:`round_typical` (the same value in plaintext, shares and ckks). With
    ``threshold=None`` (distances alone, no scoring pass: tests and benchmarks)
    the typical distance is estimated from the distances themselves, as the
    median over participants of each one's median distance to the others.

    Raises
    ------
    ScoringInvalid
        If ``threshold`` is negative or not finite, ``theta`` is outside
        ``[0, 1)``, ``floor`` is negative, a distance is negative or not
        finite, or a pair of ``ids`` is missing.
    """
    if threshold is not None and not (np.isfinite(threshold) and threshold >= 0):
        raise ScoringInvalid(f"threshold must be finite and >= 0, got {threshold!r}")
    copies_threshold(None, theta=theta, floor=floor)  # validates theta and floor
    names = sorted(ids)
    pairs = [(j, k) for a, j in enumerate(names) for k in names[a + 1 :]]
    missing = [p for p in pairs if p not in distances]
    if missing:
        raise ScoringInvalid(f"pairwise distances lack {missing[:3]}")
    values = np.array([distances[p] for p in pairs], dtype=np.float64)
    if values.size and not (np.isfinite(values).all() and values.min() >= 0):
        raise ScoringInvalid("pairwise distances must be finite and >= 0")
    cut = threshold
    if cut is None:
        cut = copies_threshold(_typical(distances, names), theta=theta, floor=floor)
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

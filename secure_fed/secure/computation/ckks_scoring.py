"""Encrypted scoring with hidden centres: no mean is ever decrypted (ckks mode).

Every centre is the mean of a participant set that stays encrypted. With
integer scalars only (doublings and additions, no level consumed),
``d_k = m ct_k - sum_{j in set} ct_j`` is ``m`` times the deviation from the
set's mean; the ``1/m`` goes into the public plaintext whitening, which is
multiplied in anyway. Level plan of ``CKKS_SCORING`` (depth 2):

* score: ``d_k`` (level 0) -> ``z_r = sum_c (W_rc / m) d_kc`` (plaintext
  scalars, level 1) -> ``z_r^2`` (level 2) -> sum over classes and slots.
  The ranking pass is the same with ``W = I``;
* moments: ``d_a d_b`` (level 1), summed over the subset and the slots of the
  first ciphertext run; the key authority divides by ``m^2`` after decryption
  (:func:`moment_matrix`).

The slot sums happen before decryption, so the key authority sees one scalar
per score and ``C(C+1)/2`` totals for the moments, never a per-sample value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, Layout, PublicContext
from crypto.ckks.aggregate import score_factor
from crypto.errors import ParameterInvalid
from secure_fed.secure.scoring.mahalanobis import class_pairs, symmetric_from_pairs

__all__ = ["moment_matrix", "moments", "score"]


def _scaled(vector: Any, m: int) -> Any:
    """``m * vector`` by doublings and additions: integer scalars consume no level.

    Only out-of-place additions: the upload's own vectors are never modified, and
    TenSEAL's ``copy()`` costs a serialization (about 0.2 s at N = 8192) where an
    out-of-place addition costs about 0.1 ms.
    """
    acc: Any = None
    base = vector
    while m:
        if m & 1:
            acc = base if acc is None else acc + base
        m >>= 1
        if m:
            base = base + base
    return acc


def _differences(up: EncryptedMatrix, group: Sequence[EncryptedMatrix], chunk: int) -> list[Any]:
    """Per class, ``m ct_k - sum_j ct_j`` on ciphertext run ``chunk``."""
    out = []
    for c in range(up.layout.n_classes):
        pos = up.layout.index(c, chunk)
        diff = _scaled(up.vectors[pos], len(group))
        for other in group:
            diff = diff - other.vectors[pos]
        out.append(diff)
    return out


def _runs(up: EncryptedMatrix, samples: int) -> tuple[Layout, range]:
    layout = up.layout
    if samples == layout.n_samples:
        return layout, range(layout.chunks)
    if samples != min(layout.n_samples, layout.slots):
        raise ParameterInvalid(f"scores use all samples or the first run, not {samples}")
    return Layout(n_samples=samples, n_classes=layout.n_classes, slots=layout.slots), range(1)


def score(
    up: EncryptedMatrix,
    centre: Sequence[EncryptedMatrix],
    whitening: np.ndarray,
    samples: int,
) -> EncryptedMatrix:
    """Encrypted ``mean_{i<samples} ||W (p_ki - p̄_i)||^2``, ``p̄`` the hidden mean of ``centre``.

    Raises
    ------
    ParameterInvalid
        Wrong shapes, a preset without depth 2, or a whitening whose worst-case
        score could wrap modulo the last prime.
    """
    preset, m = up.preset, len(centre)
    classes = up.layout.n_classes
    layout, chunks = _runs(up, samples)
    if preset.depth < 2 or not preset.galois_keys or m < 1:
        raise ParameterInvalid(f"hidden-centre scores need a depth-2 preset, got {preset.name}")
    square = np.zeros((classes, classes))
    w = np.asarray(whitening, dtype=np.float64)
    square[: w.shape[0]] = w
    top = preset.data_primes
    lt = square / m * score_factor(samples) * preset.rescale_factor(top)
    lt = lt * math.sqrt(preset.rescale_factor(top - 1))
    _check_headroom(preset.input_bound, lt, m, samples, preset)
    total: Any = None
    for chunk in chunks:
        diffs = _differences(up, centre, chunk)
        squares: Any = None
        for row in lt:
            z: Any = None
            for coef, diff in zip(row.tolist(), diffs, strict=True):
                if coef != 0.0:
                    term = diff * coef
                    z = term if z is None else z.add_(term)
            if z is not None:
                z.square_()
                squares = z if squares is None else squares.add_(z)
        if squares is None:
            raise ParameterInvalid("whitening must not be all zeros")
        part = squares.sum()
        total = part if total is None else total.add_(part)
    return EncryptedMatrix(
        kind="score", preset=preset, fingerprint=up.fingerprint, layout=layout, vectors=[total]
    )


def _check_headroom(bound: float, lt: np.ndarray, m: int, rows: int, preset: Any) -> None:
    """Refuse a whitening whose worst-case score (``|d| <= 2 m B``) could wrap.

    The scoring's own whitening never trips it: its eigenvalue floor
    (:func:`~secure_fed.secure.scoring.mahalanobis.eigenvalue_floor`) keeps
    ``||W||_2^2`` at half of :func:`~crypto.ckks.aggregate.max_score_gain`. It
    stays the last guard for any other whitening a request claims.
    """
    per_sample = float(np.linalg.norm(lt, 2)) ** 2 * lt.shape[1] * (2.0 * m * bound) ** 2
    room = 2.0 ** (preset.coeff_mod_bit_sizes[0] - preset.scale_bits - 2)
    if per_sample * rows >= room:
        raise ParameterInvalid(
            f"whitening is too large: the worst-case score {per_sample * rows:.3g} would "
            f"exceed the {room:.3g} the last prime can hold"
        )


def moments(public: PublicContext, ups: Sequence[EncryptedMatrix], samples: int) -> EncryptedMatrix:
    """Slot sums of ``d_a d_b`` over ``ups`` (first run), ``d = m ct - sum_j ct_j``.

    Raises
    ------
    ParameterInvalid
        If ``samples`` is not the first ciphertext run.
    """
    first = ups[0]
    if samples != min(first.layout.n_samples, first.layout.slots):
        raise ParameterInvalid(f"second moments use the first ciphertext run, not {samples}")
    sums: list[Any] | None = None
    for up in ups:
        diffs = _differences(up, ups, 0)
        products = [diffs[a] * diffs[b] for a, b in class_pairs(first.layout.n_classes)]
        if sums is None:
            sums = products
        else:
            for acc, prod in zip(sums, products, strict=True):
                acc.add_(prod)
    assert sums is not None
    layout = Layout(n_samples=1, n_classes=len(sums), slots=public.preset.slots)
    return EncryptedMatrix(
        kind="aggregate",
        preset=public.preset,
        fingerprint=public.fingerprint,
        layout=layout,
        vectors=[s.sum() for s in sums],
        contributors=len(ups),
    )


def moment_matrix(flat: np.ndarray, *, preset: Any, count: int, num_classes: int) -> np.ndarray:
    """Return the ``C x C`` second moment from the decrypted totals of :func:`moments`.

    TenSEAL labels the rescaled product with scale Delta although SEAL divided by
    the prime: the decrypted value is Delta/q times the true one; the
    deviations were ``count`` times the true ones.
    """
    values = np.asarray(flat, dtype=np.float64).reshape(-1)
    values = values * preset.rescale_factor(preset.data_primes) / float(count * count)
    return symmetric_from_pairs(values, num_classes)

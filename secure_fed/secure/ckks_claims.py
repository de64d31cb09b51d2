"""What a CKKS decryption request claims, and the one way each claim is evaluated.

Every decryption request the aggregator signs carries a *claim*: which
computation produced the ciphertext (``op``), over which uploads (participant id
-> SM3 of the upload payload as stored), with which public weights, whitening,
sample count and centre. The aggregator computes every ciphertext it sends with
:func:`evaluate` on its claim, and the auditor recomputes it with the same
function from the stored uploads (:mod:`secure_fed.secure.recompute`); TenSEAL
is bit-exact for these operations (serialize, load, same operations, same bytes;
measured in ``docs/crypto-ckks.md``), so the SM3 of the recomputed ciphertext must
equal the signed one. A cheating aggregator that sends anything else under an
honest-looking claim is caught after the fact.

Operations:

* ``weighted_sum``: ``sum_k w_k X_k`` (the published aggregate);
* ``mean``: the equal-weight mean (sum first, then one scalar multiply);
* ``moments``: the ``C(C+1)/2`` centred second-moment totals over the first run;
* ``score``: one participant's encrypted quadratic score;
* ``evidence``: one participant's evidence of correctness, ``sum(M * p_k)`` with
  ``M`` the mask of the labeled slice the claim lists (``rows``, ``labels``;
  :func:`secure_fed.secure.computation.evidence.ckks_evidence`). The key authority
  refuses a slice other than its plan's; the recomputation rebuilds the mask
  from the signed claim, so a ciphertext computed with another mask under an
  honest-looking claim is caught;
* ``distance``: the mean squared distance of two uploads (``uploads`` lists
  the pair, ``samples`` all ``N`` rows;
  :func:`secure_fed.secure.computation.evidence.ckks_pair_distance`), the release
  plan's ``copies`` step: the key authority keeps the value and releases only
  near-duplicate counts.

A plaintext centre (the opened mean of an earlier request) is named by the SM3 of
its float64 bytes (``center_sm3``); the key authority checks it is a mean it
released in the same round, and the recomputation needs the array itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, Layout, PublicContext
from crypto.ckks import weighted_sum as ckks_weighted_sum
from crypto.ckks.aggregate import quadratic_score
from crypto.sm import sm3_digest
from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.computation import ckks_scoring as hidden
from secure_fed.secure.computation.evidence import (
    ckks_evidence,
    ckks_pair_distance,
    slice_from_fields,
)
from secure_fed.secure.protocol.vocabulary import ClaimOp, Purpose
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import class_pairs
from secure_fed.wire import number_from_wire

__all__ = ["OPS", "array_sm3", "check_claim", "claim_plan_fields", "evaluate"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: Operations a claim may name, and the purposes each may serve.
OPS: Mapping[str, tuple[str, ...]] = {
    ClaimOp.WEIGHTED_SUM: (Purpose.AGGREGATE,),
    ClaimOp.MEAN: (Purpose.MEAN,),
    ClaimOp.MOMENTS: (Purpose.MOMENTS,),
    ClaimOp.SCORE: (Purpose.SCORE,),
    ClaimOp.EVIDENCE: (Purpose.SCORE,),
    ClaimOp.DISTANCE: (Purpose.DISTANCE,),
}


def array_sm3(array: np.ndarray) -> str:
    """SM3 (hex) of an array's little-endian float64 bytes (how centres are named)."""
    return sm3_digest(np.ascontiguousarray(array, dtype="<f8").tobytes()).hex()


def check_claim(claim: object, *, purpose: str, ids: Sequence[str]) -> dict[str, Any]:
    """Return ``claim`` if it is well formed for ``purpose`` over ``ids``.

    Raises
    ------
    AuthorityRequestMalformed
        Naming the first defect.
    """
    if not isinstance(claim, dict):
        raise AuthorityRequestMalformed("a decryption request needs a 'claim' object")
    op, uploads = claim.get("op"), claim.get("uploads")
    if not isinstance(op, str) or op not in OPS or purpose not in OPS[op]:
        raise AuthorityRequestMalformed(f"claim op {op!r} cannot serve purpose {purpose!r}")
    if not isinstance(uploads, list) or [u[0] for u in uploads if isinstance(u, list)] != list(ids):
        raise AuthorityRequestMalformed("claim uploads must list [id, sm3] for each id, in order")
    if not all(
        isinstance(u, list) and len(u) == 2 and isinstance(u[1], str) and _HEX64.match(u[1])
        for u in uploads
    ):
        raise AuthorityRequestMalformed("claim upload digests must be 64 hex characters")
    if op == "weighted_sum":
        _check_weights(claim.get("weights"), len(ids))
    if op in ("moments", "score") and "centre" in claim:
        _check_centre(claim["centre"])  # hidden centre: the mean of these uploads
        _int(claim, "samples")
    elif op in ("moments", "score"):
        center = claim.get("center_sm3")
        if not isinstance(center, str) or not _HEX64.match(center):
            raise AuthorityRequestMalformed(f"claim op {op!r} needs a 'center_sm3' digest")
        _int(claim, "samples")
    if op == "score":
        _matrix(claim.get("whitening"))
    if op == "evidence":
        _evidence_slice(claim)
    if op == "distance":
        _distance_rows(claim, len(ids))
    return claim


def _distance_rows(claim: Mapping[str, object], count: int) -> int:
    """Return the rows of a ``distance`` claim (two uploads, no centre, no whitening)."""
    if count != 2 or any(name in claim for name in ("centre", "center_sm3", "whitening")):
        raise AuthorityRequestMalformed(
            "a distance claim lists two uploads and has no centre and no whitening"
        )
    return _int(claim, "samples")


def _evidence_slice(claim: Mapping[str, object]) -> EvidenceSlice:
    """Return the slice an ``evidence`` claim lists (``samples`` rows, no centre or whitening)."""
    if any(name in claim for name in ("centre", "center_sm3", "whitening")):
        raise AuthorityRequestMalformed("an evidence claim has no centre and no whitening")
    piece = slice_from_fields(claim)
    if piece is None or len(piece.rows) != _int(claim, "samples"):
        raise AuthorityRequestMalformed("an evidence claim lists its 'samples' rows and labels")
    return piece


def claim_plan_fields(claim: Mapping[str, object]) -> dict[str, object]:
    """Release-plan fields of an ``evidence`` claim (slice, rows) or a ``distance`` (rows).

    ``{}`` for other ops.

    Raises
    ------
    AuthorityRequestMalformed
        If the evidence claim is malformed.
    """
    if claim.get("op") == "distance":
        uploads = claim.get("uploads")
        return {"samples": _distance_rows(claim, len(uploads) if isinstance(uploads, list) else 0)}
    if claim.get("op") != "evidence":
        return {}
    piece = _evidence_slice(claim)
    return {"evidence": piece, "samples": len(piece.rows)}


def _check_centre(raw: object) -> None:
    """Check a hidden centre: ``[id, sm3]`` of every upload whose mean it is."""
    if not isinstance(raw, list) or not raw:
        raise AuthorityRequestMalformed("claim centre must list [id, sm3] per upload")
    pairs = [u for u in raw if isinstance(u, list) and len(u) == 2 and isinstance(u[1], str)]
    if len(pairs) != len(raw) or not all(_HEX64.match(u[1]) for u in pairs):
        raise AuthorityRequestMalformed("claim centre must list [id, sm3] per upload")


def _int(claim: Mapping[str, object], name: str) -> int:
    value = claim.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise AuthorityRequestMalformed(f"claim field {name!r} must be an integer >= 1")
    return value


def _number(value: object) -> float:
    """Return a claim number: a float before the wire, an exact decimal string after it."""
    number = value if isinstance(value, float) else number_from_wire(value)
    if number is None or not math.isfinite(number):
        raise AuthorityRequestMalformed(f"claim number {value!r} is not an exact decimal")
    return number


def _check_weights(raw: object, count: int) -> list[float]:
    if not isinstance(raw, list) or len(raw) != count:
        raise AuthorityRequestMalformed("claim weights must list one weight per upload")
    return [_number(w) for w in raw]


def _matrix(raw: object) -> np.ndarray:
    if not isinstance(raw, list) or not raw or not all(isinstance(r, list) for r in raw):
        raise AuthorityRequestMalformed("claim whitening must be a list of rows")
    if len({len(r) for r in raw}) != 1:
        raise AuthorityRequestMalformed("claim whitening rows must have one length")
    return np.array([[_number(v) for v in row] for row in raw], dtype=np.float64)


def equal_mean(public: PublicContext, ups: Sequence[EncryptedMatrix]) -> EncryptedMatrix:
    """Encrypted equal-weight mean: add first, then one scalar multiply per ciphertext."""
    preset = public.preset
    if preset.weight_encoding != "scalar" or len(ups) < 2:
        return ckks_weighted_sum(list(ups), [1.0 / len(ups)] * len(ups))
    factor = preset.rescale_factor(preset.data_primes) / len(ups)
    vectors = []
    for pos in range(ups[0].layout.count):
        acc = ups[0].vectors[pos] + ups[1].vectors[pos]
        for up in ups[2:]:
            acc.add_(up.vectors[pos])
        vectors.append(acc * factor)
    return EncryptedMatrix(
        kind="aggregate",
        preset=preset,
        fingerprint=public.fingerprint,
        layout=ups[0].layout,
        vectors=vectors,
        contributors=len(ups),
    )


def _first_run(up: EncryptedMatrix, samples: int) -> EncryptedMatrix:
    layout = Layout(n_samples=samples, n_classes=up.layout.n_classes, slots=up.layout.slots)
    vectors = [up.vectors[up.layout.index(c, 0)] for c in range(up.layout.n_classes)]
    return EncryptedMatrix(
        kind="upload", preset=up.preset, fingerprint=up.fingerprint, layout=layout, vectors=vectors
    )


def moments(
    public: PublicContext, ups: Sequence[EncryptedMatrix], center: np.ndarray, samples: int
) -> EncryptedMatrix:
    """Encrypted slot sums of ``(ct_a - c_a)(ct_b - c_b)`` over the uploads, first run only."""
    classes = ups[0].layout.n_classes

    def products(up: EncryptedMatrix) -> list[Any]:
        diffs = [
            up.vectors[up.layout.index(c, 0)] - center[:samples, c].tolist() for c in range(classes)
        ]
        return [diffs[a] * diffs[b] for a, b in class_pairs(classes)]

    sums = products(ups[0])
    for up in ups[1:]:
        for acc, prod in zip(sums, products(up), strict=True):
            acc.add_(prod)
    layout = Layout(n_samples=1, n_classes=len(sums), slots=public.preset.slots)
    return EncryptedMatrix(
        kind="aggregate",
        preset=public.preset,
        fingerprint=public.fingerprint,
        layout=layout,
        vectors=[s.sum() for s in sums],
        contributors=len(ups),
    )


def score(
    up: EncryptedMatrix, center: np.ndarray, whitening: np.ndarray, samples: int
) -> EncryptedMatrix:
    """One participant's encrypted score over all samples or the first ciphertext run."""
    rows, classes = up.layout.n_samples, up.layout.n_classes
    if samples != rows:
        up, rows = _first_run(up, samples), samples
    square = np.zeros((classes, classes))
    square[: whitening.shape[0]] = whitening
    return quadratic_score(up, center[:rows], square)


Centers = Callable[[str], np.ndarray | None]


def evaluate(
    claim: Mapping[str, Any],
    uploads: Mapping[str, EncryptedMatrix],
    public: PublicContext,
    centers: Centers = lambda _digest: None,
) -> EncryptedMatrix:
    """Compute the ciphertext ``claim`` describes from ``uploads`` (by participant id).

    Raises
    ------
    AuthorityRequestMalformed
        A malformed claim, or a centre ``centers`` cannot provide (``KeyError``).
    """
    ids = [u[0] for u in claim["uploads"]]
    ups = [uploads[p] for p in ids]
    op = claim["op"]
    if op == "weighted_sum":
        return ckks_weighted_sum(ups, _check_weights(claim["weights"], len(ids)))
    if op == "mean":
        return equal_mean(public, ups)
    if op == "evidence":
        layout = ups[0].layout
        mask = _evidence_slice(claim).mask((layout.n_samples, layout.n_classes))
        return ckks_evidence(ups[0], mask)
    if op == "distance":
        return ckks_pair_distance(ups[0], ups[1])
    if "centre" in claim:  # hidden centre (secure_fed.secure.computation.ckks_scoring)
        group = [uploads[u[0]] for u in claim["centre"]]
        if op == "moments":
            return hidden.moments(public, ups, int(claim["samples"]))
        return hidden.score(ups[0], group, _matrix(claim["whitening"]), int(claim["samples"]))
    center = centers(claim["center_sm3"])
    if center is None:
        raise KeyError(claim["center_sm3"])
    if op == "moments":
        return moments(public, ups, center, int(claim["samples"]))
    return score(ups[0], center, _matrix(claim["whitening"]), int(claim["samples"]))

"""Cost of the evidence of correctness and of near-duplicate detection under CKKS, K = 10 and 20.

Prints one JSON document. For each K, K uploads of the digits demo's shape
(``N = 459`` public rows with the labeled slice, ``C = 10``; the last three send
one matrix) go through a real ckks deployment: the aggregator (signed requests,
the round's release plan with a labeled slice and the ``copies`` step) and the
key authority (plan checks, decryption, its release count), timed per step on
the aggregator's side, the key authority's work included:

* ``scoring``: the ranking, moments and final scores every scored round pays;
* ``evidence``: K x (ciphertext x plaintext mask over 100 labeled rows, slot sum,
  one decryption);
* ``copies``: K(K-1)/2 x (hidden-centre score of one upload against another,
  W = I, one decryption kept by the key authority), then one count per
  participant released.

``*_decryptions`` are the scoring epoch's released ciphertexts per step (the
key authority's own count) and ``rounds_per_epoch_*`` how many rounds the
epoch's sized ``t`` serves with and without the copies step.

The shares mode runs the same round through a real shares deployment (the
aggregator, the helper gating every opening, the key authority dealing): the
scoring, the evidence (a local linear map and one opened scalar each) and the
``copies`` step: one batch of ``N C`` Beaver products per pair on ``x_j - x_k``,
then one per-value range check that opens one bit per pair (``d_jk <= tau``),
timed, with the bytes the two servers exchanged (helper requests and replies)
and the bytes the key authority dealt. ``--quick``: K = 10 only; ``--modes``
picks ckks, shares or both.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/crypto.py shadows crypto

from crypto.shares.additive import split
from crypto.shares.codec import RING_PREDICTIONS
from secure_fed.secure.computation.evidence import integer_mask, share_evidence
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.evidence import EvidenceSlice

N, C, ROWS, BOUND = 459, 10, 100, 8.0


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _population(k: int, rng: np.random.Generator) -> tuple[list[str], list[np.ndarray]]:
    ids = [f"p{j:02d}" for j in range(k)]
    mats = [np.clip(rng.normal(0, 3, size=(N, C)), -BOUND, BOUND) for _ in range(k)]
    mats[-2] = mats[-1] = mats[-3]  # three participants send one matrix
    return ids, mats


def _gatekept_round(mode: str, k: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """A ``mode`` deployment of ``k`` participants, their loaded uploads, round 1's plan fixed.

    The plan scores, asks the evidence on a random labeled slice and the copies.
    Returns the deployment, the aggregator, the upload handles, the slice and the matrices.
    """
    ids, mats = _population(k, rng)
    dep = SecureDeployment.create(mode=mode, shape=(N, C), participant_ids=ids, min_participants=3)
    agg = dep.aggregator(bound=BOUND)  # type: ignore[call-arg]
    handles = {
        p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in zip(ids, mats, strict=True)
    }
    rows = sorted(int(r) for r in rng.choice(N, size=ROWS, replace=False))
    piece = EvidenceSlice(rows=tuple(rows), labels=tuple(int(y) for y in rng.integers(0, C, ROWS)))
    agg.begin_round(
        ReleasePlan.for_round(
            round_id=1, min_participants=3, shape=(N, C), scoring=agg.scoring, evidence=piece,
            copies=True,
        )
    )  # fmt: skip
    return dep, agg, handles, piece, mats


def _steps(agg, handles, piece):  # type: ignore[no-untyped-def]
    """The three timed steps of a gatekept round, in plan order: (name, call)."""
    return (
        ("scoring", lambda: agg.score(handles, round_id=1)),
        ("evidence", lambda: agg.evidence(handles, piece.mask((N, C)), round_id=1)),
        ("copies", lambda: agg.copies(handles, round_id=1)),
    )


class _Counted:
    """A byte channel that counts what passes both ways."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner, self.sent, self.received, self.calls = inner, 0, 0, 0

    def __call__(self, request):  # type: ignore[no-untyped-def]
        reply = self.inner(request)
        self.calls += 1
        self.sent += len(request)
        self.received += sum(map(len, reply)) if isinstance(reply, tuple) else len(reply)
        return reply


def measure_shares(k: int, rng: np.random.Generator) -> dict[str, object]:
    """Time the scoring, the evidence and the copies step of one gatekept shares round."""
    from dataclasses import replace

    _, agg, handles, piece, _ = _gatekept_round("shares", k, rng)
    helper = _Counted(agg.keys.helper)  # type: ignore[attr-defined]
    dealer, compare = _Counted(agg.keys.dealer), _Counted(agg.keys.compare_dealer)  # type: ignore[attr-defined]
    agg.keys = replace(agg.keys, helper=helper, dealer=dealer, compare_dealer=compare)  # type: ignore[attr-defined]
    out: dict[str, object] = {"K": k, "pairs": k * (k - 1) // 2}
    steps = _steps(agg, handles, piece)
    for name, step in steps:
        marks = [(c.sent, c.received, c.calls) for c in (helper, dealer, compare)]
        seconds, found = _timed(step)
        out[f"shares_{name}_seconds"] = round(seconds, 2)
        (hs, hr, hc), (ds, dr, _), (cs, cr, _) = marks
        out[f"shares_{name}_helper_round_trips"] = helper.calls - hc
        out[f"shares_{name}_server_mib"] = round(
            (helper.sent - hs + helper.received - hr) / 2**20, 2
        )
        dealt = dealer.received - dr + compare.received - cr
        out[f"shares_{name}_dealt_mib"] = round(dealt / 2**20, 2)
        if name == "copies":
            out["shares_copies_released"] = found
    out["shares_copies_over_scoring_time"] = round(
        float(out["shares_copies_seconds"]) / float(out["shares_scoring_seconds"]),  # type: ignore[arg-type]
        2,
    )
    out["shares_pairwise_beaver_products"] = int(out["pairs"]) * N * C  # type: ignore[call-overload]
    return out


def measure(k: int, rng: np.random.Generator) -> dict[str, object]:
    """Time the scoring, the evidence and the copies step of one gatekept ckks round."""
    dep, agg, handles, piece, mats = _gatekept_round("ckks", k, rng)
    keys = dep.authority.keys  # type: ignore[attr-defined]
    out: dict[str, object] = {"K": k, "pairs": k * (k - 1) // 2}
    steps = _steps(agg, handles, piece)
    for name, step in steps:
        before = keys.releases
        seconds, found = _timed(step)
        out[f"ckks_{name}_seconds"] = round(seconds, 2)
        out[f"ckks_{name}_decryptions"] = keys.releases - before
        if name == "copies":
            out["copies_released"] = found
    base = int(out["ckks_scoring_decryptions"]) + int(out["ckks_evidence_decryptions"])  # type: ignore[call-overload]
    sized = keys.preset.max_decryptions
    out["copies_over_scoring_time"] = round(
        float(out["ckks_copies_seconds"]) / float(out["ckks_scoring_seconds"]),
        2,  # type: ignore[arg-type]
    )
    out["rounds_per_epoch_without_copies"] = sized // base
    out["rounds_per_epoch_with_copies"] = sized // (base + int(out["ckks_copies_decryptions"]))  # type: ignore[call-overload]
    shares = [split(RING_PREDICTIONS.encode(m)) for m in mats]
    imask = integer_mask(rows=np.array(piece.rows), labels=np.array(piece.labels), shape=(N, C))
    local, _ = _timed(lambda: [share_evidence(s0, imask) for s0, _ in shares])
    pairs = k * (k - 1) // 2
    out.update(
        {
            "shares_evidence_local_seconds": round(local, 4),
            "shares_evidence_opened_bytes_per_server": 8 * k,
            "shares_pairwise_beaver_products": pairs * N * C,
            "shares_pairwise_opened_mib_per_server": round(pairs * N * C * 16 / 2**20, 2),
        }
    )
    return out


def main() -> None:
    """Run the benchmark and print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K = 10 only")
    parser.add_argument("--modes", default="ckks,shares", help="ckks, shares or both")
    args = parser.parse_args()
    modes = args.modes.split(",")
    results = []
    for k in (10,) if args.quick else (10, 20):
        row: dict[str, object] = {}
        if "ckks" in modes:
            row.update(measure(k, np.random.default_rng(k)))
        if "shares" in modes:
            row.update(measure_shares(k, np.random.default_rng(k)))
        results.append(row)
    out = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "shape": [N, C],
        "evidence_rows": ROWS,
        "results": results,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

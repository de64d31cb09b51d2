"""Cost of the evidence of correctness and of near-duplicate detection under CKKS, K = 10 and 20.

Prints one JSON document. For each K, K uploads of the digits demo's shape
(``N = 459`` public rows with the labeled slice, ``C = 10``) are encrypted under
``CKKS_SCORING``; then, timed on the aggregator's side with the key authority's
decryption included:

* ``evidence``: K x (ciphertext x plaintext mask over 100 labeled rows, slot sum,
  one decryption) -- what the release plan's evidence step costs;
* ``pairwise``: K(K-1)/2 x (hidden-centre score of one upload against another,
  W = I, one decryption) -- near-duplicate detection by pairwise distances, the
  key authority then releasing one count per participant;
* ``final_scores``: K x the final Mahalanobis score against a hidden centre of
  ``h = K/2`` uploads (what every scored round already pays), for the ratio.

The shares mode's evidence is a local linear map of each share (timed), and a
pairwise distance needs ``N C`` Beaver products per pair: its traffic is
computed (each server opens ``d`` and ``e``, 8 bytes each, per product).
``--quick``: K = 10 only.
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

from crypto.ckks import decrypt_score, generate_keys, pack_class_major
from crypto.shares.additive import split
from crypto.shares.codec import RING_PREDICTIONS
from secure_fed.secure.modes import ckks_scoring
from secure_fed.secure.modes.evidence import (
    ckks_evidence,
    ckks_pair_distance,
    integer_mask,
    share_evidence,
)
from secure_fed.secure.scoring.evidence import evidence_mask

N, C, ROWS = 459, 10, 100


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(k: int, keys, rng: np.random.Generator) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Time the evidence, the pairwise distances and the final scores for ``k`` uploads."""
    mats = [np.clip(rng.normal(0, 3, size=(N, C)), -8, 8) for _ in range(k)]
    ups = [pack_class_major(keys.public_context, m) for m in mats]
    rows = rng.choice(N, size=ROWS, replace=False)
    labels = rng.integers(0, C, size=ROWS)
    mask = evidence_mask(rows=rows, labels=labels, shape=(N, C))
    evidence = _timed(lambda: [decrypt_score(keys, ckks_evidence(u, mask)) for u in ups])
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    pairwise = _timed(
        lambda: [decrypt_score(keys, ckks_pair_distance(ups[a], ups[b])) for a, b in pairs]
    )
    centre = ups[: k // 2]
    final = _timed(
        lambda: [decrypt_score(keys, ckks_scoring.score(u, centre, np.eye(C), N)) for u in ups]
    )
    shares = [split(RING_PREDICTIONS.encode(m)) for m in mats]
    imask = integer_mask(rows=rows, labels=labels, shape=(N, C))
    local = _timed(lambda: [share_evidence(s0, imask) for s0, _ in shares])
    return {
        "K": k,
        "pairs": len(pairs),
        "ckks_evidence_seconds": round(evidence, 2),
        "ckks_pairwise_seconds": round(pairwise, 2),
        "ckks_final_scores_seconds": round(final, 2),
        "pairwise_over_final_scores": round(pairwise / final, 2),
        "shares_evidence_local_seconds": round(local, 4),
        "shares_evidence_opened_bytes_per_server": 8 * k,
        "shares_pairwise_beaver_products": len(pairs) * N * C,
        "shares_pairwise_opened_mib_per_server": round(len(pairs) * N * C * 16 / 2**20, 2),
    }


def main() -> None:
    """Run the benchmark and print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K = 10 only")
    args = parser.parse_args()
    keys = generate_keys("CKKS_SCORING")
    rng = np.random.default_rng(0)
    out = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "shape": [N, C],
        "evidence_rows": ROWS,
        "results": [measure(k, keys, rng) for k in ((10,) if args.quick else (10, 20))],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

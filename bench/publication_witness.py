"""What the publication's witness costs: the server side of one ckks publication, with and without.

K participants upload a ``[N, C]`` matrix under both key epochs (``CKKS_SCORING`` and
``CKKS_PUBLICATION``). Timed in one run, alternating, ``--repeats`` times each:

* ``without``: the publication's weighted sum (publication epoch) and its flooded
  decryption, what a publication cost before the witness;
* ``with``: the same plus the witness (the same weighted sum under the scoring epoch) and
  :func:`crypto.ckks.decrypt_checked_publication`, which decrypts and compares both.

Prints one JSON document: medians per step, the ratio with/without, the witness's bytes
and the largest honest difference against the tolerance. Command:
``python bench/publication_witness.py`` (K = 10, 10,000 x 10; ``--quick``: 2,048 rows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, before bench/

from crypto.ckks import (  # noqa: E402
    decrypt_aggregate,
    decrypt_checked_publication,
    generate_keys,
    pack_class_major,
    publication_tolerance,
    weighted_sum,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=10)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = 2048 if args.quick else args.rows
    k, c = args.participants, args.classes
    scoring, publication = generate_keys("CKKS_SCORING"), generate_keys("CKKS_PUBLICATION")
    rng = np.random.default_rng(0)
    mats = [np.clip(rng.normal(0, 2, size=(rows, c)), -8, 8) for _ in range(k)]
    s_up = [pack_class_major(scoring.public_context, m) for m in mats]
    p_up = [pack_class_major(publication.public_context, m) for m in mats]
    w = rng.dirichlet(np.ones(k)).tolist()
    times: dict[str, list[float]] = {
        "publication_sum": [],
        "witness_sum": [],
        "decrypt": [],
        "decrypt_checked": [],
    }
    diff = 0.0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        pub = weighted_sum(p_up, w)
        t1 = time.perf_counter()
        decrypt_aggregate(publication, pub, min_contributors=2)
        t2 = time.perf_counter()
        wit = weighted_sum(s_up, w)
        t3 = time.perf_counter()
        released = decrypt_checked_publication(
            publication, pub, witness_keys=scoring, witness=wit, min_contributors=2
        )
        t4 = time.perf_counter()
        times["publication_sum"].append(t1 - t0)
        times["decrypt"].append(t2 - t1)
        times["witness_sum"].append(t3 - t2)
        times["decrypt_checked"].append(t4 - t3)
        diff = max(
            diff, float(np.abs(released - sum(wk * m for wk, m in zip(w, mats, strict=True))).max())
        )
    med = {name: statistics.median(v) for name, v in times.items()}
    without = med["publication_sum"] + med["decrypt"]
    with_ = med["publication_sum"] + med["witness_sum"] + med["decrypt_checked"]
    print(
        json.dumps(
            {
                "participants": k,
                "shape": [rows, c],
                "repeats": args.repeats,
                "median_s": med,
                "publish_without_witness_s": without,
                "publish_with_witness_s": with_,
                "ratio_with_over_without": with_ / without,
                "witness_bytes": len(wit.to_bytes()),
                "publication_bytes": len(pub.to_bytes()),
                "released_max_abs_error": diff,
                "tolerance": publication_tolerance(
                    publication.preset, scoring.preset, contributors=k
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

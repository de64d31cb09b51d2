"""Crypto benchmark: CKKS presets vs the NVIDIA FLARE configuration, shares, SM2/SM3.

Run ``python bench/crypto.py`` (10 participants x 10,000 samples x 10 classes) or
``python bench/crypto.py --quick``; prints one JSON document. Every figure is
measured in this run; the crypto layer's targets (sizes, errors, speed against
FLARE; listed in ``targets`` and docs/benchmarks.md) are checked at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tenseal as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crypto.ckks import (
    PRESETS,
    decrypt_aggregate,
    decrypt_score,
    generate_keys,
    load_encrypted,
    pack_class_major,
    quadratic_score,
    weighted_sum,
)
from crypto.ckks.flooding import statistical_security_bits


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence TenSEAL's C++ warnings (printed on fd 1) so stdout stays pure JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def machine() -> dict[str, Any]:
    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in run(["lscpu"]).splitlines()
            if line.startswith("Model name")
        ),
        platform.processor(),
    )
    mem = next(
        (line.split()[1] for line in run(["free", "-g"]).splitlines() if line.startswith("Mem:")),
        "?",
    )
    return {
        "cpu": model,
        "nproc": os.cpu_count(),
        "mem_gib": mem,
        "python": platform.python_version(),
        "tenseal": ts.__version__,
    }


def ckks_preset(name: str, xs: list[np.ndarray], w: np.ndarray) -> dict[str, Any]:
    n, c = xs[0].shape
    keys, keygen_s = timed(lambda: generate_keys(name))
    pub = keys.public_context
    blobs, enc_s = timed(lambda: [pack_class_major(pub, x).to_bytes() for x in xs])
    ups, load_s = timed(
        lambda: [load_encrypted(pub, b, kind="upload", n_samples=n, n_classes=c) for b in blobs]
    )
    agg, agg_s = timed(lambda: weighted_sum(ups, w.tolist()))
    wire = agg.to_bytes()
    agg2 = load_encrypted(pub, wire, kind="aggregate", n_samples=n, n_classes=c)
    out, dec_s = timed(lambda: decrypt_aggregate(keys, agg2))
    expected, plain_s = timed(lambda: np.tensordot(w, np.stack(xs), axes=1))
    preset = PRESETS[name]
    result = {
        "N": preset.poly_modulus_degree,
        "coeff_mod_bit_sizes": list(preset.coeff_mod_bit_sizes),
        "scale_bits": preset.scale_bits,
        "keygen_s": keygen_s,
        "public_context_bytes": len(pub.data),
        "bytes_per_value": sum(map(len, blobs)) / (len(xs) * n * c),
        "encrypt_s_total": enc_s,
        "encrypt_s_per_participant": enc_s / len(xs),
        "server_load_validate_s": load_s,
        "aggregate_s": agg_s,
        "server_total_s": load_s + agg_s,
        "decrypt_s": dec_s,
        "plain_numpy_weighted_sum_s": plain_s,
        "aggregate_over_plain_ratio": agg_s / plain_s,
        "max_abs_error_weighted_sum": float(np.abs(out - expected).max()),
        "flood_sigma": preset.flood_sigma,
        "flood_statistical_security_bits_t1": statistical_security_bits(preset),
        "max_decryptions": preset.max_decryptions,
        "flood_bits_at_max_decryptions": preset.guaranteed_bits,
        "ciphertexts_per_aggregate": len(agg.vectors),
        "aggregates_per_epoch": preset.max_decryptions // len(agg.vectors),
    }
    if preset.depth >= 2:
        result.update(scoring(keys, xs, expected))
    return result


def scoring(keys: Any, xs: list[np.ndarray], mean: np.ndarray) -> dict[str, Any]:
    n, c = xs[0].shape
    pub = keys.public_context
    centered = np.stack(xs) - mean
    sigma = np.einsum("kic,kid->cd", centered, centered) / (len(xs) * n) + 1e-3 * np.eye(c)
    whitening = np.linalg.cholesky(np.linalg.inv(sigma)).T
    rel, times = [], []
    for x in xs[: max(2, len(xs) // 5)]:
        up = pack_class_major(pub, x)
        enc, s = timed(lambda up=up: quadratic_score(up, mean, whitening))
        times.append(s)
        got = decrypt_score(keys, enc)
        want = float(np.mean(np.sum(((x - mean) @ whitening.T) ** 2, axis=1)))
        rel.append(abs(got - want) / want)
    return {
        "score_s_per_participant": float(np.mean(times)),
        "score_max_relative_error": float(max(rel)),
        "scores_checked": len(rel),
    }


def flare(xs: list[np.ndarray], w: np.ndarray) -> dict[str, Any]:
    """NVIDIA FLARE's HE setup: N=8192, [60,40,40], 2^40, context attached per vector."""
    n, c = xs[0].shape
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, 8192, coeff_mod_bit_sizes=[60, 40, 40])
    ctx.global_scale = 2.0**40
    attached = ctx.serialize(save_secret_key=False, save_galois_keys=False, save_relin_keys=False)

    def encrypt() -> list[tuple[bytes, bytes]]:
        return [(attached, ts.ckks_vector(ctx, x.ravel().tolist()).serialize()) for x in xs]

    with quiet_stdout():
        uploads, enc_s = timed(encrypt)

    def load() -> list[Any]:
        out = []
        for context_bytes, vec in uploads:
            server_ctx = ts.context_from(context_bytes)
            out.append(ts.lazy_ckks_vector_from(vec))
            out[-1].link_context(server_ctx)
        return out

    vecs, load_s = timed(load)

    def aggregate() -> Any:
        acc = vecs[0] * float(w[0])
        for v, wk in zip(vecs[1:], w[1:], strict=True):
            acc.add_(v * float(wk))
        return acc

    acc, agg_s = timed(aggregate)
    acc.link_context(ctx)
    out, dec_s = timed(lambda: np.asarray(acc.decrypt()).reshape(n, c))
    expected = np.tensordot(w, np.stack(xs), axes=1)
    size = sum(len(a) + len(v) for a, v in uploads)
    return {
        "N": 8192,
        "coeff_mod_bit_sizes": [60, 40, 40],
        "scale_bits": 40,
        "bytes_per_value": size / (len(xs) * n * c),
        "context_bytes_attached": len(attached),
        "encrypt_s_total": enc_s,
        "server_load_s": load_s,
        "aggregate_s": agg_s,
        "server_total_s": load_s + agg_s,
        "decrypt_s": dec_s,
        "max_abs_error_weighted_sum": float(np.abs(out - expected).max()),
    }


def shares(count: int) -> dict[str, Any]:
    from crypto.shares import wire_bytes_per_value

    sizes = wire_bytes_per_value(count, seeded=True)
    return {
        "bytes_per_value_total": sizes.per_value,
        "to_aggregator": sizes.to_party0,
        "to_helper": sizes.to_party1,
    }


def sm(quick: bool) -> dict[str, Any]:
    from gmssl import func
    from gmssl import sm3 as gm_sm3

    from crypto.sm import SM2PrivateKey

    big = os.urandom((8 if quick else 64) << 20)
    _, s = timed(lambda: hashlib.new("sm3", big).digest())
    small = os.urandom((32 if quick else 256) << 10)
    _, g = timed(lambda: gm_sm3.sm3_hash(func.bytes_to_list(small)))
    key = SM2PrivateKey.generate()
    pub = key.public_key
    rounds = 5 if quick else 30
    msg = b"signed tree head"
    sigs, sign_s = timed(lambda: [key.sign(msg) for _ in range(rounds)])
    _, verify_s = timed(lambda: [pub.verify(msg, sig) for sig in sigs])
    return {
        "sm3_hashlib_MB_s": len(big) / s / 1e6,
        "sm3_gmssl_MB_s": len(small) / g / 1e6,
        "sm3_hashlib_over_gmssl": (len(big) / s) / (len(small) / g),
        "sm2_signs_per_s": rounds / sign_s,
        "sm2_verifies_per_s": rounds / verify_s,
    }


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    agg, sc, fl = res["CKKS_AGGREGATION"], res["CKKS_SCORING"], res["nvidia_flare_baseline"]
    pub = res["CKKS_PUBLICATION"]
    rows = [
        ("aggregation bytes/value <= 42", agg["bytes_per_value"], agg["bytes_per_value"] <= 42),
        (
            "aggregation weighted-sum error <= 5e-4 (flooded)",
            agg["max_abs_error_weighted_sum"],
            agg["max_abs_error_weighted_sum"] <= 5e-4,
        ),
        ("scoring bytes/value <= 85", sc["bytes_per_value"], sc["bytes_per_value"] <= 85),
        (
            "scoring distance relative error <= 1e-3 (flooded)",
            sc["score_max_relative_error"],
            sc["score_max_relative_error"] <= 1e-3,
        ),
        (
            "shares bytes/value per participant <= 9",
            res["shares"]["bytes_per_value_total"],
            res["shares"]["bytes_per_value_total"] <= 9,
        ),
        (
            "aggregate 10 uploads at least as fast as FLARE (sum only, s)",
            [agg["aggregate_s"], fl["aggregate_s"]],
            agg["aggregate_s"] <= fl["aggregate_s"],
        ),
        (
            "aggregate 10 uploads at least as fast as FLARE (load+validate+sum, s)",
            [agg["server_total_s"], fl["server_total_s"]],
            agg["server_total_s"] <= fl["server_total_s"],
        ),
        (
            "publication flooding >= 40 bits at its sized count, error <= 5e-4",
            [pub["flood_bits_at_max_decryptions"], pub["max_abs_error_weighted_sum"]],
            pub["flood_bits_at_max_decryptions"] >= 40
            and pub["max_abs_error_weighted_sum"] <= 5e-4,
        ),
    ]
    return [{"target": t, "measured": m, "met": bool(ok)} for t, m, ok in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="4,096 samples (no slot padding), smaller SM buffers"
    )
    args = parser.parse_args()
    participants, n, c = 10, (4096 if args.quick else 10_000), 10
    rng = np.random.default_rng(2026)
    xs = [rng.uniform(-8, 8, size=(n, c)) for _ in range(participants)]
    w = rng.dirichlet(np.ones(participants))
    res: dict[str, Any] = {
        "machine": machine(),
        "workload": {
            "participants": participants,
            "samples": n,
            "classes": c,
            "inputs": "uniform[-8, 8]",
            "weights": "Dirichlet(1), public, sum 1",
        },
    }
    for name in PRESETS:
        res[name] = ckks_preset(name, xs, w)
    res["nvidia_flare_baseline"] = flare(xs, w)
    res["shares"] = shares(n * c)
    res["sm"] = sm(args.quick)
    res["targets"] = targets(res)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()

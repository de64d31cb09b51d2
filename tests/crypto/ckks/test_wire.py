from __future__ import annotations

import struct

import numpy as np
import pytest
import tenseal as ts

from crypto.ckks import (
    KeyAuthorityKeys,
    generate_keys,
    load_encrypted,
    pack_class_major,
    weighted_sum,
)
from crypto.ckks.keys import _public_ts
from crypto.ckks.wire import MAGIC
from crypto.errors import CiphertextRejected, ContextMismatch

SHAPE = {"n_samples": 2100, "n_classes": 2}


@pytest.fixture(scope="module")
def upload_bytes(agg_keys: KeyAuthorityKeys) -> bytes:
    rng = np.random.default_rng(1)
    return pack_class_major(agg_keys.public_context, rng.uniform(-8, 8, (2100, 2))).to_bytes()


def _reject(
    keys: KeyAuthorityKeys,
    data: bytes,
    fragment: str,
    kind: str = "upload",
    error: type[Exception] = CiphertextRejected,
) -> None:
    with pytest.raises(error, match=fragment) as info:
        load_encrypted(keys.public_context, data, kind=kind, **SHAPE)  # type: ignore[arg-type]
    assert str(info.value).startswith("[CRYPTO_")


def _frame(header_fields: dict[str, object], blobs: list[bytes], base: bytes) -> bytes:
    fields = list(struct.unpack_from(">6sBBBBH32sIII", base))
    names = [
        "magic",
        "version",
        "kind",
        "preset",
        "bits",
        "contributors",
        "fp",
        "rows",
        "cols",
        "count",
    ]
    for key, value in header_fields.items():
        fields[names.index(key)] = value
    out = struct.pack(">6sBBBBH32sIII", *fields)
    return out + b"".join(struct.pack(">I", len(b)) + b for b in blobs)


def _blobs(data: bytes) -> list[bytes]:
    offset, out = struct.calcsize(">6sBBBBH32sIII"), []
    while offset < len(data):
        (size,) = struct.unpack_from(">I", data, offset)
        out.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return out


def test_roundtrip_preserves_values(agg_keys: KeyAuthorityKeys, upload_bytes: bytes) -> None:
    loaded = load_encrypted(agg_keys.public_context, upload_bytes, kind="upload", **SHAPE)
    assert loaded.layout.count == 4 and loaded.fingerprint == agg_keys.fingerprint
    assert upload_bytes.startswith(MAGIC)
    # ciphertexts never carry the context: 4 ciphertexts, ~32 bytes per slot
    assert len(upload_bytes) < 4 * 2048 * 34


def test_header_checks(agg_keys: KeyAuthorityKeys, upload_bytes: bytes) -> None:
    blobs = _blobs(upload_bytes)
    _reject(agg_keys, b"SFCKCT" + b"\0" * 10, "outside")
    _reject(agg_keys, upload_bytes + b"\0" * 10**6, "outside")
    _reject(agg_keys, _frame({"magic": b"XXXXXX"}, blobs, upload_bytes), "bad magic")
    _reject(agg_keys, _frame({"version": 9}, blobs, upload_bytes), "bad magic or version")
    _reject(agg_keys, upload_bytes, "not the expected kind 'aggregate'", kind="aggregate")
    _reject(
        agg_keys, _frame({"preset": 2}, blobs, upload_bytes), "preset id 2", error=ContextMismatch
    )
    _reject(
        agg_keys,
        _frame({"fp": b"\1" * 32}, blobs, upload_bytes),
        "another context fingerprint",
        error=ContextMismatch,
    )
    _reject(agg_keys, _frame({"rows": 2000}, blobs, upload_bytes), "shape 2000x2")
    _reject(agg_keys, _frame({"count": 3}, blobs[:3], upload_bytes), "3 ciphertexts; expected 4")


def test_framing_checks(agg_keys: KeyAuthorityKeys, upload_bytes: bytes) -> None:
    _reject(agg_keys, upload_bytes[:-10], "cut short")
    _reject(agg_keys, upload_bytes + b"\0", "trailing bytes")
    blobs = _blobs(upload_bytes)
    head = _frame({}, [], upload_bytes)
    _reject(agg_keys, head + struct.pack(">I", 10**7) + blobs[0], "claims 10000000 bytes")
    _reject(agg_keys, head + struct.pack(">I", 0), "claims 0 bytes")
    swapped = _frame({}, [blobs[1], blobs[0], blobs[2], blobs[3]], upload_bytes)
    _reject(agg_keys, swapped, "packs 52 values; expected 2048")
    _reject(
        agg_keys, _frame({}, [b"garbage"] + blobs[1:], upload_bytes), "ciphertext 0 does not parse"
    )


def test_foreign_epoch_vectors_under_our_fingerprint_still_parse(
    agg_keys: KeyAuthorityKeys, upload_bytes: bytes
) -> None:
    """A known limit, not a refusal: the seal checks parameters, the envelope signature binds."""
    other = generate_keys("CKKS_AGGREGATION")
    theirs = pack_class_major(other.public_context, np.zeros((2100, 2))).to_bytes()
    forged = _frame({}, _blobs(theirs), upload_bytes)  # our fingerprint, their vectors
    loaded = load_encrypted(agg_keys.public_context, forged, kind="upload", **SHAPE)
    assert loaded.layout.count == 4  # same parameters parse: integrity needs the signature


def test_scale_level_and_size_checks(score_keys: KeyAuthorityKeys) -> None:
    pub = score_keys.public_context
    shape = {"n_samples": 10, "n_classes": 1}
    fresh = pack_class_major(pub, np.ones((10, 1)))
    base = fresh.to_bytes()
    ctx = _public_ts(pub)

    def check(vector: object, fragment: str) -> None:
        data = _frame({}, [bytes(vector.serialize())], base)  # type: ignore[attr-defined]
        with pytest.raises(CiphertextRejected, match=fragment):
            load_encrypted(pub, data, kind="upload", **shape)

    check(ts.ckks_vector(ctx, [1.0] * 10, scale=2.0**30), r"scale 1073741824.0; expected 2\^32")
    check(fresh.vectors[0] * 0.5, "level 2 primes")
    # same parameters (hence same parms_id), no relinearization: a 3-polynomial ciphertext
    raw = ts.context(ts.SCHEME_TYPE.CKKS, 8192, coeff_mod_bit_sizes=[60, 32, 32, 60])
    raw.global_scale = 2.0**32
    raw.auto_relin = raw.auto_rescale = False
    vector = ts.ckks_vector(raw, [1.0] * 10)
    check(vector * vector, "outside")  # at full level the byte limit catches it first
    raw.auto_rescale = True
    check(vector * vector, "size 3; expected 2 polynomials")
    check(ts.ckks_vector(ctx, [1.0] * 9000), "outside")
    check(ts.ckks_vector(ctx, [1.0] * 4097) * 0.5 * 0.5, "holds 2 SEAL ciphertexts")
    agg = weighted_sum([fresh, fresh], [0.5, 0.5]).to_bytes()
    loaded = load_encrypted(pub, agg, kind="aggregate", **shape)
    assert loaded.contributors == 2


def test_metadata_fields_checked(agg_keys: KeyAuthorityKeys, upload_bytes: bytes) -> None:
    blobs = _blobs(upload_bytes)
    _reject(agg_keys, _frame({"bits": 20}, blobs, upload_bytes), "weight bits 20; expected 0")
    _reject(
        agg_keys,
        _frame({"contributors": 3}, blobs, upload_bytes),
        "3 contributors is impossible for a upload",
    )

"""The CKKS ciphertext loader and header peek on untrusted bytes: what surviving mutants showed.

``scripts/mutation ckks-wire`` changed these and the wire tests stayed green
(docs/benchmarks.md, "Mutation testing", sixth run). The bytes come from whoever
sends a ciphertext (a participant's upload, the aggregator's decryption request):
a frame that ends right after a ciphertext, where the next length prefix should
be, must be refused as truncated, not crash in ``struct``; and :func:`claimed_kind`,
which the key authority reads to refuse an ``upload`` before parsing anything,
must report the header's kind and contributors and nothing for bytes that are not
this format's.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from crypto.ckks import (
    KeyAuthorityKeys,
    load_encrypted,
    pack_class_major,
    quadratic_score,
    weighted_sum,
)
from crypto.ckks.packing import Layout
from crypto.ckks.presets import CKKS_SCORING
from crypto.ckks.wire import claimed_kind, max_wire_bytes
from crypto.errors import CiphertextRejected, ContextMismatch, ParameterInvalid

SHAPE = {"n_samples": 2100, "n_classes": 2}  # four ciphertexts under CKKS_AGGREGATION
HEADER = struct.calcsize(">6sBBBBH32sIII")


@pytest.fixture(scope="module")
def upload(agg_keys: KeyAuthorityKeys) -> bytes:
    rng = np.random.default_rng(5)
    return pack_class_major(agg_keys.public_context, rng.uniform(-1, 1, (2100, 2))).to_bytes()


def _first_ciphertext_end(data: bytes) -> int:
    (size,) = struct.unpack_from(">I", data, HEADER)
    return HEADER + 4 + int(size)


def _refused(keys: KeyAuthorityKeys, data: bytes, text: str) -> None:
    with pytest.raises(
        CiphertextRejected, match=rf"^\[CRYPTO_CIPHERTEXT_REJECTED\] {re.escape(text)}$"
    ):
        load_encrypted(keys.public_context, data, kind="upload", **SHAPE)


def test_a_frame_that_stops_where_a_length_prefix_belongs_is_truncated(
    agg_keys: KeyAuthorityKeys, upload: bytes
) -> None:
    end = _first_ciphertext_end(upload)
    for cut in (end, end + 2):  # no prefix of ciphertext 1, or half of one
        _refused(agg_keys, upload[:cut], "truncated: length prefix of ciphertext 1 missing")


def test_a_ciphertext_may_use_its_whole_size_limit_and_trailing_bytes_are_counted(
    agg_keys: KeyAuthorityKeys, upload: bytes
) -> None:
    limit = agg_keys.public_context.preset.max_ciphertext_bytes
    at_limit = upload[:HEADER] + struct.pack(">I", limit) + bytes(limit)
    # ciphertext 0 of exactly the limit passes the size check; ciphertext 1 is missing
    _refused(agg_keys, at_limit, "truncated: length prefix of ciphertext 1 missing")
    over = upload[:HEADER] + struct.pack(">I", limit + 1) + bytes(limit + 1)
    _refused(agg_keys, over, f"ciphertext 0 claims {limit + 1} bytes; limit is {limit}")
    for extra in (1, 3):
        _refused(
            agg_keys, upload + bytes(extra), f"{extra} trailing bytes after the last ciphertext"
        )


def test_a_score_is_limited_to_one_ciphertext() -> None:
    preset = CKKS_SCORING
    layout = Layout(n_samples=2100, n_classes=2, slots=preset.slots)
    one = HEADER + 4 + preset.max_ciphertext_bytes
    assert max_wire_bytes(preset, layout, "score") == one
    assert max_wire_bytes(preset, layout, "upload") == HEADER + layout.count * (one - HEADER)
    assert layout.count > 1


def test_claimed_kind_reads_the_header_and_nothing_else(
    agg_keys: KeyAuthorityKeys, upload: bytes
) -> None:
    assert claimed_kind(upload) == ("upload", 1)
    assert claimed_kind(upload[:HEADER]) == ("upload", 1)  # the header alone
    matrix = load_encrypted(agg_keys.public_context, upload, kind="upload", **SHAPE)
    assert claimed_kind(weighted_sum([matrix] * 3, [1 / 3] * 3).to_bytes()) == ("aggregate", 3)
    forged = bytearray(upload)
    forged[7] = 2  # the kind byte: a score, as the sender claims
    forged[10:12] = (7).to_bytes(2, "big")  # the contributors
    assert claimed_kind(bytes(forged)) == ("score", 7)


@pytest.mark.parametrize(
    ("offset", "value"),
    [(0, ord("X")), (5, ord("X")), (6, 2), (6, 0), (7, 3), (7, 255)],
    ids=["magic-first", "magic-last", "version-2", "version-0", "kind-3", "kind-255"],
)
def test_claimed_kind_names_nothing_for_another_format(
    upload: bytes, offset: int, value: int
) -> None:
    forged = bytearray(upload)
    forged[offset] = value
    assert claimed_kind(bytes(forged)) is None


def test_claimed_kind_names_nothing_for_short_or_untyped_data(upload: bytes) -> None:
    assert claimed_kind(upload[: HEADER - 1]) is None
    assert claimed_kind(b"") is None
    assert claimed_kind(upload.hex()) is None  # type: ignore[arg-type]
    assert claimed_kind(memoryview(upload)) is None  # type: ignore[arg-type]


def test_header_refusals_are_named_and_kind_byte_3_is_no_kind(
    agg_keys: KeyAuthorityKeys, upload: bytes
) -> None:
    forged = bytearray(upload)
    forged[7] = 3  # one past the last kind: refused, not an IndexError
    _refused(agg_keys, bytes(forged), "kind byte 3 is not the expected kind 'upload'")
    forged = bytearray(upload)
    forged[6] = 2
    _refused(agg_keys, bytes(forged), "bad magic or version: not a secure-fed CKKS ciphertext")
    forged = bytearray(upload)
    forged[12] ^= 1  # the first byte of the context fingerprint
    with pytest.raises(
        ContextMismatch,
        match=r"^\[CRYPTO_CONTEXT_MISMATCH\] ciphertexts cite another context fingerprint "
        r"\(key epoch\)$",
    ):
        load_encrypted(agg_keys.public_context, bytes(forged), kind="upload", **SHAPE)


def test_an_integer_weighted_aggregate_loads_with_its_weight_bits(
    agg_keys: KeyAuthorityKeys, upload: bytes
) -> None:
    preset = agg_keys.public_context.preset
    assert preset.weight_encoding == "integer"
    matrix = load_encrypted(agg_keys.public_context, upload, kind="upload", **SHAPE)
    total = weighted_sum([matrix] * 3, [0.5, 0.25, 0.25]).to_bytes()
    loaded = load_encrypted(agg_keys.public_context, total, kind="aggregate", **SHAPE)
    assert (loaded.weight_bits, loaded.contributors) == (preset.weight_bits, 3)
    assert loaded.weight_bits > 0


def test_a_score_of_a_several_ciphertext_upload_loads_as_one(score_keys: KeyAuthorityKeys) -> None:
    public = score_keys.public_context
    shape = {"n_samples": 10, "n_classes": 3}  # three ciphertexts per upload
    matrix = pack_class_major(public, np.full((10, 3), 0.25))
    assert len(matrix.vectors) == 3
    score = quadratic_score(matrix, np.zeros((10, 3)), np.eye(3)).to_bytes()
    loaded = load_encrypted(public, score, kind="score", **shape)
    assert (loaded.kind, len(loaded.vectors)) == ("score", 1)


def test_the_size_window_is_exclusive_of_the_header_and_inclusive_of_the_limit(
    agg_keys: KeyAuthorityKeys, upload: bytes
) -> None:
    preset = agg_keys.public_context.preset
    limit = max_wire_bytes(preset, Layout(**SHAPE, slots=preset.slots), "upload")
    outside = f"{HEADER} bytes is outside (header, {limit}] for this shape"
    _refused(agg_keys, upload[:HEADER], outside)
    one = preset.max_ciphertext_bytes
    at_limit = upload[:HEADER] + (struct.pack(">I", one) + bytes(one)) * 4
    assert len(at_limit) == limit
    with pytest.raises(
        CiphertextRejected, match=r"^\[CRYPTO_CIPHERTEXT_REJECTED\] ciphertext 0 does not parse: "
    ):
        load_encrypted(agg_keys.public_context, at_limit, kind="upload", **SHAPE)


def test_a_score_frame_is_sized_for_one_ciphertext(score_keys: KeyAuthorityKeys) -> None:
    public = score_keys.public_context
    matrix = pack_class_major(public, np.full((10, 3), 0.25))
    score = quadratic_score(matrix, np.zeros((10, 3)), np.eye(3)).to_bytes()
    one = HEADER + 4 + public.preset.max_ciphertext_bytes
    padded = score + bytes(one + 1 - len(score))
    with pytest.raises(
        CiphertextRejected,
        match=rf"^\[CRYPTO_CIPHERTEXT_REJECTED\] {one + 1} bytes is outside "
        rf"\(header, {one}\] for this shape$",
    ):
        load_encrypted(public, padded, kind="score", n_samples=10, n_classes=3)


def test_caller_and_vector_refusals_are_named(agg_keys: KeyAuthorityKeys, upload: bytes) -> None:
    public = agg_keys.public_context
    with pytest.raises(
        ParameterInvalid,
        match=r"^\[CRYPTO_PARAMETER_INVALID\] kind must be one of upload, aggregate, score$",
    ):
        load_encrypted(public, upload, kind="weights", **SHAPE)  # type: ignore[arg-type]
    _refused(agg_keys, upload.hex(), "ciphertext data must be bytes, not str")  # type: ignore[arg-type]
    blobs, offset = [], HEADER
    while offset < len(upload):
        (size,) = struct.unpack_from(">I", upload, offset)
        blobs.append(upload[offset : offset + 4 + size])
        offset += 4 + size
    swapped = upload[:HEADER] + blobs[1] + blobs[0] + b"".join(blobs[2:])
    _refused(agg_keys, swapped, "ciphertext 0 packs 52 values; expected 2048")

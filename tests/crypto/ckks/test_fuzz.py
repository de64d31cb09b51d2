"""Fuzzing the validated loader: mutated and truncated ciphertexts never crash or hang.

Outcomes are either a typed :class:`crypto.errors.CryptoError` or a successful
parse: a mutation inside a coefficient that stays below its prime is still a
well-formed ciphertext (docs/background.md); integrity is the signature's job.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from crypto.ckks import KeyAuthorityKeys, load_encrypted, pack_class_major
from crypto.errors import CryptoError

SHAPE = {"n_samples": 300, "n_classes": 1}


def _mutants(seed: bytes, rng: np.random.Generator, count: int) -> Iterator[bytes]:
    # A generator: 200,000 mutants (up to 66 KB each) held in a list took 9.4 GB.
    n = len(seed)
    for _ in range(count):
        kind = rng.integers(0, 6)
        data = bytearray(seed)
        if kind == 0:  # truncation anywhere
            data = data[: int(rng.integers(0, n))]
        elif kind == 1:  # a few random bit flips anywhere
            for pos in rng.integers(0, n, size=int(rng.integers(1, 9))):
                data[pos] ^= 1 << int(rng.integers(0, 8))
        elif kind == 2:  # flips concentrated in headers (ours, protobuf, SEAL)
            for pos in rng.integers(0, min(n, 160), size=int(rng.integers(1, 4))):
                data[pos] = int(rng.integers(0, 256))
        elif kind == 3:  # overwrite a random run with random bytes
            start = int(rng.integers(0, n))
            run = rng.integers(0, 256, size=min(int(rng.integers(1, 64)), n - start))
            data[start : start + len(run)] = bytes(run.astype(np.uint8))
        elif kind == 4:  # truncate the vector and fix our length prefix to match
            cut = int(rng.integers(61, n))  # 56-byte header, 4-byte length prefix
            data = data[:cut]
            data[56:60] = (cut - 60).to_bytes(4, "big")
        else:  # random garbage of plausible length with a valid-looking header
            data = data[:60] + bytearray(rng.integers(0, 256, size=n - 60).astype(np.uint8))
        yield bytes(data)


def _fuzz(keys: KeyAuthorityKeys, iterations: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    pub = keys.public_context
    original = pack_class_major(pub, rng.uniform(-8, 8, (300, 1))).to_bytes()
    assert load_encrypted(pub, original, kind="upload", **SHAPE).layout.count == 1
    outcomes: dict[str, int] = {}
    for data in _mutants(original, rng, iterations):
        try:
            load_encrypted(pub, data, kind="upload", **SHAPE)
            name = "parsed"
        except CryptoError as exc:
            name = exc.code
        outcomes[name] = outcomes.get(name, 0) + 1
    return outcomes


ALLOWED = {"parsed", "CRYPTO_CIPHERTEXT_REJECTED", "CRYPTO_CONTEXT_MISMATCH"}


@pytest.mark.timeout(120)
def test_thousands_of_mutants_give_typed_errors_only(agg_keys: KeyAuthorityKeys) -> None:
    outcomes = _fuzz(agg_keys, 20000, seed=7)
    assert sum(outcomes.values()) == 20000
    assert set(outcomes) <= ALLOWED
    assert outcomes["CRYPTO_CIPHERTEXT_REJECTED"] > 10000
    assert outcomes.get("parsed", 0) < 4000  # only in-range coefficient changes survive


@pytest.mark.timeout(120)
def test_scoring_mutants_give_typed_errors_only(score_keys: KeyAuthorityKeys) -> None:
    outcomes = _fuzz(score_keys, 1500, seed=5)
    assert set(outcomes) <= ALLOWED and outcomes["CRYPTO_CIPHERTEXT_REJECTED"] > 700


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_many_more_mutants(agg_keys: KeyAuthorityKeys) -> None:
    outcomes = _fuzz(agg_keys, 200000, seed=11)
    assert set(outcomes) <= ALLOWED


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def test_zstd_decompression_bomb_is_rejected_without_inflating(agg_keys: KeyAuthorityKeys) -> None:
    """A 60 KB vector whose zstd frame would inflate to 1.9 GB (15,000 RLE blocks)."""
    import resource

    pub = agg_keys.public_context
    genuine = pack_class_major(pub, np.zeros((300, 1))).to_bytes()
    vector = genuine[60:]  # 56-byte header, 4-byte length prefix
    start = vector.index(b"\x5e\xa1")
    seal_header = vector[start : start + 8]  # magic, header size, version, compression
    frame = b"\x28\xb5\x2f\xfd\x00\x38"  # zstd magic, no content size, 128 KB window
    for i in range(15000):
        frame += ((131072 << 3) | 2 | (i == 14999)).to_bytes(3, "little") + b"\x07"
    seal = seal_header + (16 + len(frame)).to_bytes(8, "little") + frame
    bomb = vector[: start - 4] + b"\x12" + _varint(len(seal)) + seal + vector[-9:]
    data = genuine[:56] + len(bomb).to_bytes(4, "big") + bomb
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CryptoError, match="ciphertext 0 does not parse"):
        load_encrypted(pub, data, kind="upload", **SHAPE)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 256

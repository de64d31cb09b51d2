import hmac

import numpy as np
import pytest
from Crypto.Cipher import ChaCha20

from crypto.errors import ParameterInvalid
from crypto.shares import ShareLabel, expand_seed
from crypto.shares.prg import SEED_BYTES, new_seed

LABEL = ShareLabel(round_id=7, participant_id="hospital-a", tensor="predictions")


def test_expand_is_deterministic_and_label_bound() -> None:
    seed = bytes(range(32))
    first = expand_seed(seed, LABEL, 1000)
    assert first.dtype == np.uint64 and first.shape == (1000,)
    assert np.array_equal(first, expand_seed(seed, LABEL, 1000))
    # A prefix property: asking for fewer elements gives the same prefix.
    assert np.array_equal(first[:10], expand_seed(seed, LABEL, 10))
    for other in (
        ShareLabel(round_id=8, participant_id="hospital-a", tensor="predictions"),
        ShareLabel(round_id=7, participant_id="hospital-b", tensor="predictions"),
        ShareLabel(round_id=7, participant_id="hospital-a", tensor="moments"),
    ):
        assert not np.array_equal(first, expand_seed(seed, other, 1000))
    assert not np.array_equal(first, expand_seed(bytes(31) + b"\x01", LABEL, 1000))


def test_known_answer_pins_the_construction() -> None:
    # ChaCha20(key = HMAC-SM3(seed, domain || "share" || 0 || label), nonce = 0^12): pinned
    # so that a change of PRG, domain string or label encoding is noticed.
    label = ShareLabel(round_id=0, participant_id="p", tensor="t")
    got = expand_seed(bytes(32), label, 2)
    assert got.tolist() == [16948526155236340328, 4325771220332982206]
    # Recomputed independently from the documented construction.
    key = hmac.new(
        bytes(32), b"secure-fed/shares/prg/v1\x00share\x00" + label.to_bytes(), "sm3"
    ).digest()
    stream = ChaCha20.new(key=key, nonce=bytes(12)).encrypt(bytes(16))
    assert np.frombuffer(stream, dtype="<u8").tolist() == got.tolist()


def test_new_seed_is_fresh() -> None:
    seeds = {new_seed() for _ in range(64)}
    assert len(seeds) == 64 and all(len(s) == SEED_BYTES for s in seeds)


@pytest.mark.parametrize("seed", [b"", bytes(31), bytes(33)])
def test_wrong_seed_length(seed: bytes) -> None:
    with pytest.raises(ParameterInvalid, match="32 bytes"):
        expand_seed(seed, LABEL, 4)


def test_negative_count() -> None:
    with pytest.raises(ParameterInvalid, match="count"):
        expand_seed(bytes(32), LABEL, -1)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"round_id": -1}, "round_id"),
        ({"round_id": 2**63}, "round_id"),
        ({"participant_id": ""}, "participant_id"),
        ({"tensor": "x" * 129}, "tensor"),
    ],
)
def test_label_validation(kwargs: dict[str, object], fragment: str) -> None:
    base: dict[str, object] = {"round_id": 1, "participant_id": "p", "tensor": "t"}
    base.update(kwargs)
    with pytest.raises(ParameterInvalid, match=fragment):
        ShareLabel(**base)  # type: ignore[arg-type]


def test_label_bytes_roundtrip_and_injective() -> None:
    assert ShareLabel.from_bytes(LABEL.to_bytes()) == LABEL
    # Field boundaries are length-prefixed: ("ab", "c") and ("a", "bc") differ.
    one = ShareLabel(round_id=1, participant_id="ab", tensor="c").to_bytes()
    two = ShareLabel(round_id=1, participant_id="a", tensor="bc").to_bytes()
    assert one != two
    raw = LABEL.to_bytes()
    for bad in (b"", b"XXXX" + raw[4:], raw[:-1], raw + b"!"):
        with pytest.raises(ParameterInvalid, match="canonical"):
            ShareLabel.from_bytes(bad)

"""SM3 known answers (GB/T 32905-2016 Annex A), streaming, and the gmssl fallback."""

from __future__ import annotations

import hashlib

import pytest
from gmssl import sm3 as gmssl_sm3
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.sm import SM3Hasher, sm3_backend, sm3_digest, sm3_file
from crypto.sm import sm3 as sm3_module
from crypto.sm.sm3 import _GmsslSM3

ABC = "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"
ABCD16 = "debe9ff92275b8a138604889c18e5a4d6fdb70e5387e5765293dcba39c0c5732"
EMPTY = "1ab21d8355cfa17f8e61194831e81a8f22bec8c728fefb747ed035eb5082aa2b"
VECTORS = [(b"abc", ABC), (b"abcd" * 16, ABCD16), (b"", EMPTY)]


@pytest.mark.parametrize(("message", "expected"), VECTORS)
def test_sm3_known_answers(message: bytes, expected: str) -> None:
    assert sm3_digest(message).hex() == expected


@pytest.mark.parametrize(("message", "expected"), VECTORS)
def test_gmssl_fallback_known_answers(message: bytes, expected: str) -> None:
    state = _GmsslSM3()
    state.update(message)
    assert state.digest().hex() == expected


def test_backend_is_openssl_here() -> None:
    # hashlib (OpenSSL) has SM3 on this machine; the slow gmssl fallback must not be active.
    assert sm3_backend() == "hashlib"


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=4))
def test_streaming_matches_one_shot_for_both_backends(data: bytes, cuts: list[int]) -> None:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    hasher, fallback = SM3Hasher(), _GmsslSM3()
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        hasher.update(data[lo:hi])
        fallback.update(data[lo:hi])
    expected = hashlib.new("sm3", data).digest()
    assert hasher.digest() == expected
    assert fallback.digest() == expected
    # gmssl's own one-shot function (on a copy: it mutates its argument)
    assert gmssl_sm3.sm3_hash(list(data)) == expected.hex()


def test_hasher_copy_is_independent_and_digest_keeps_state() -> None:
    hasher = SM3Hasher()
    hasher.update(b"ab")
    twin = hasher.copy()
    hasher.update(b"c")
    assert hasher.hexdigest() == ABC
    assert hasher.hexdigest() == ABC  # digest() does not finalize the state
    twin.update(b"d")
    assert twin.digest() == sm3_digest(b"abd")
    fallback = _GmsslSM3()
    fallback.update(b"ab")
    fallback_twin = fallback.copy()
    fallback.update(b"c")
    assert fallback.digest().hex() == ABC
    assert fallback_twin.digest() == sm3_digest(b"ab")


def test_hasher_rejects_text() -> None:
    with pytest.raises(TypeError, match="data must be bytes, not str"):
        SM3Hasher().update("abc")  # type: ignore[arg-type]


def test_sm3_file_streams_large_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    payload = bytes(range(256)) * 12289  # ~3 MiB: spans several 1 MiB chunks
    path = tmp_path / "payload.bin"
    path.write_bytes(payload)
    assert sm3_file(path) == hashlib.new("sm3", payload).digest()
    assert sm3_file(str(path)) == sm3_digest(payload)


def test_sm3_file_missing_raises_oserror(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FileNotFoundError):
        sm3_file(tmp_path / "absent")


def test_fallback_selected_when_openssl_lacks_sm3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sm3_module, "_openssl_state", lambda: None)
    assert sm3_module._select_backend() == "gmssl"
    monkeypatch.setattr(sm3_module, "_BACKEND", "gmssl")
    hasher = SM3Hasher()
    assert isinstance(hasher._state, _GmsslSM3)
    hasher.update(b"abc")
    assert hasher.hexdigest() == ABC
    assert sm3_digest(b"abcd" * 16).hex() == ABCD16


def test_wrong_openssl_output_is_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def update(self, data: bytes) -> None:
            pass

        def digest(self) -> bytes:
            return b"\x00" * 32

    monkeypatch.setattr(sm3_module, "_openssl_state", Broken)
    assert sm3_module._select_backend() == "gmssl"


def test_no_working_backend_refuses_to_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sm3_module, "_openssl_state", lambda: None)
    monkeypatch.setattr(sm3_module, "_compress", lambda v, block: v)
    with pytest.raises(RuntimeError, match="SM3 self-check failed for both"):
        sm3_module._select_backend()

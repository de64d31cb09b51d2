"""Properties of the signed upload envelope over any corruption (Hypothesis).

Whatever single bit is flipped, whatever tail is cut, whatever bytes are
appended: the aggregator's envelope gate refuses with a typed error, audits an
``upload.rejected`` event with that error's code, and files nothing. The
untouched envelope is then still accepted (a refusal loses nothing).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_fed.errors import SecureFedError
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from tests.secure_fed.secure.helpers import Harness, population

N, C = 12, 3
IDS = ["a", "b", "c"]
PROPERTY = settings(max_examples=30, deadline=None)


def _check(corrupt: Callable[[bytes], bytes]) -> Path:
    """Run one corruption in a scratch round store; return its (removed) folder."""
    with tempfile.TemporaryDirectory(prefix="envelope-") as scratch:
        _check_in(Path(scratch), corrupt)
    return Path(scratch)


def _check_in(folder: Path, corrupt: Callable[[bytes], bytes]) -> None:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="plaintext", shape=(N, C), participant_ids=IDS, min_participants=2, audit=sink
    )
    h = Harness(dep, folder, ids=IDS, min_participants=2, audit=sink)
    h.engine.open(h.config(1))
    h.engine.start_collecting(1)
    envelope = h.envelope("a", population(1, N, C)["p00"], 1)
    bad = corrupt(envelope)
    assert bad != envelope
    with pytest.raises(SecureFedError) as info:
        h.verifier.accept(bad, round_id=1)
    assert h.engine.state(1).uploads == {}
    assert [e["code"] for e in sink.named("upload.rejected")] == [info.value.code]
    assert h.verifier.accept(envelope, round_id=1) == "a"  # the refusal lost nothing


@PROPERTY
@given(position=st.floats(min_value=0, max_value=1, exclude_max=True), bit=st.integers(0, 7))
def test_any_flipped_bit_is_refused(position: float, bit: int) -> None:
    def flip(env: bytes) -> bytes:
        out = bytearray(env)
        out[int(position * len(out))] ^= 1 << bit
        return bytes(out)

    _check(flip)


@PROPERTY
@given(keep=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_any_truncation_is_refused(keep: float) -> None:
    _check(lambda env: env[: int(keep * len(env))])


@PROPERTY
@given(extra=st.binary(min_size=1, max_size=64))
def test_any_appended_bytes_are_refused(extra: bytes) -> None:
    _check(lambda env: env + extra)


def test_each_example_removes_its_scratch_folder() -> None:
    """Hypothesis runs _check ~90 times per session: none may leave a folder in /tmp."""
    used = _check(lambda env: env + b"x")
    assert used.name.startswith("envelope-")
    assert not used.exists()

"""The aggregator's slice key: created owner-only once, the same after a restart, never loose."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.deploy.config_errors import ServerConfigInvalid
from secure_fed.deploy.slice_key import SLICE_KEY_FILE, slice_key
from secure_fed.federation.evidence import EvidencePool
from secure_fed.learning.data import load_task


def test_the_key_is_made_once_owner_only_and_read_back_after_a_restart(tmp_path: Path) -> None:
    first = slice_key(tmp_path)
    assert len(first) == 32
    assert (tmp_path / SLICE_KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert slice_key(tmp_path) == first  # a restarted aggregator draws the same slices
    task = load_task("digits", seed=0)
    before = EvidencePool.from_task(task, rows=64, key=first)
    after = EvidencePool.from_task(task, rows=64, key=slice_key(tmp_path))
    assert before is not None and after is not None
    assert before.for_round(4) == after.for_round(4)
    other = tmp_path / "other"
    other.mkdir()
    assert slice_key(other) != first


def test_a_key_others_can_read_is_refused(tmp_path: Path) -> None:
    slice_key(tmp_path)
    (tmp_path / SLICE_KEY_FILE).chmod(0o644)
    with pytest.raises(ServerConfigInvalid, match="readable by others"):
        slice_key(tmp_path)


def test_a_key_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / SLICE_KEY_FILE
    path.write_bytes(b"short")
    path.chmod(0o600)
    with pytest.raises(ServerConfigInvalid, match="holds 5 bytes"):
        slice_key(tmp_path)


def test_a_directory_that_cannot_hold_the_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServerConfigInvalid, match="cannot create"):
        slice_key(tmp_path / "missing")

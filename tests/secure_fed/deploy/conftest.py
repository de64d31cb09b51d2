"""Key directories made once per module (CKKS key generation takes seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.deploy.keys import create_keys

IDS = ("h1", "h2", "b1")
SHAPE = (64, 4)


@pytest.fixture(scope="module")
def ckks_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ckks-keys") / "keys"
    create_keys(root, mode="ckks", participant_ids=IDS, shape=SHAPE, min_participants=2)
    return root


@pytest.fixture(scope="module")
def shares_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shares-keys") / "keys"
    create_keys(root, mode="shares", participant_ids=IDS, shape=SHAPE, min_participants=2)
    return root

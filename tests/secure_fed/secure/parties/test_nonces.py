"""The persisted nonce store keeps the request verifier's freshness rules across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.errors import ModeSetupInvalid, ServerRequestReplayed
from secure_fed.secure.parties.nonces import NonceStore


def _claim(store: NonceStore, round_id: int, nonce: str, **kw: object) -> None:
    options: dict[str, object] = {"any_round": False, "max_nonces": 3, **kw}
    store.claim("decrypt", round_id, nonce, **options)  # type: ignore[arg-type]


def test_a_nonce_and_an_older_round_are_refused_after_reopening(tmp_path: Path) -> None:
    _claim(NonceStore(tmp_path / "n.db"), 2, "a")
    store = NonceStore(tmp_path / "n.db")
    with pytest.raises(ServerRequestReplayed, match="^.*nonce already used in round 2$"):
        _claim(store, 2, "a")
    with pytest.raises(ServerRequestReplayed, match="request for round 1 after round 2"):
        _claim(store, 1, "b")
    _claim(store, 2, "b")
    _claim(store, 3, "a")  # a newer round opens a fresh window


def test_channels_keep_separate_windows(tmp_path: Path) -> None:
    store = NonceStore(tmp_path / "n.db")
    store.claim("plan", 5, "a", any_round=False, max_nonces=3)
    store.claim("decrypt", 1, "a", any_round=False, max_nonces=3)  # plan's round 5 is not its


def test_a_round_beyond_its_nonce_bound_is_refused(tmp_path: Path) -> None:
    store = NonceStore(tmp_path / "n.db")
    for nonce in "abc":
        _claim(store, 0, nonce)
    with pytest.raises(ServerRequestReplayed, match="round 0 exceeded 3 requests"):
        _claim(store, 0, "d")


def test_any_round_channels_forget_the_oldest_nonce_only(tmp_path: Path) -> None:
    store = NonceStore(tmp_path / "n.db")
    for round_id, nonce in ((4, "a"), (1, "b"), (9, "c"), (0, "d")):  # no round order
        _claim(store, round_id, nonce, any_round=True)
    with pytest.raises(ServerRequestReplayed, match="^.*nonce already used$"):
        _claim(NonceStore(tmp_path / "n.db"), 7, "d", any_round=True)
    _claim(store, 0, "a", any_round=True)  # the oldest was forgotten at the bound


def test_an_unusable_file_is_a_setup_error(tmp_path: Path) -> None:
    (tmp_path / "bad.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(ModeSetupInvalid, match="cannot be opened"):
        NonceStore(tmp_path / "bad.db")

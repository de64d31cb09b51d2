"""The leak checker over full engine rounds: no opened linear span isolates a small set."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from secure_fed.secure.release_policy import DecryptionRecord
from tests.secure_fed.secure.adversarial.leak_checker import LeakChecker, openings
from tests.secure_fed.secure.adversarial.rounds import gatekeeper_log, run_round


def _row(purpose: str, ids: tuple[str, ...], weights=None) -> DecryptionRecord:  # type: ignore[no-untyped-def]
    return DecryptionRecord(
        1, purpose, "aggregate", (), len(ids), ids, True, time.time(), False, weights
    )


def test_the_checker_flags_the_old_mean_differencing() -> None:
    # the pre-plan flow: mean over all K = 3, then over the subset {p00, p01}
    log = [_row("mean", ("p00", "p01", "p02")), _row("mean", ("p00", "p01"))]
    checker = LeakChecker(min_participants=2)
    assert checker.small_supports(openings(log), ["p00", "p01", "p02"]) == [("p02",)]
    with pytest.raises(AssertionError, match="isolates"):
        checker.check(openings(log), ["p00", "p01", "p02"])


def test_the_checker_flags_publication_differencing_and_two_covariances() -> None:
    ids = ("p00", "p01", "p02")
    log = [_row("aggregate", ids, (0.5, 0.25, 0.25)), _row("aggregate", ids, (0.2, 0.4, 0.4))]
    with pytest.raises(AssertionError, match="isolates"):
        LeakChecker(min_participants=3).check(openings(log), ids)
    moments = [_row("moments", ids), _row("moments", ids[:2])]
    with pytest.raises(AssertionError, match="second-order"):
        LeakChecker(min_participants=2).check(openings(moments), ids)


def _check_round(mode: str, k: int, attackers: int, tmp_path: Path) -> None:
    quorum = 2 if k == 3 and attackers else None
    dep, harness, _, state = run_round(
        mode, k, tmp_path, attackers=attackers, min_participants=quorum
    )
    assert state.stage.value == "published"  # type: ignore[attr-defined]
    if attackers:
        assert state.excluded == [f"p{j:02d}" for j in range(k - attackers, k)]  # type: ignore[attr-defined]
    found = openings(gatekeeper_log(dep))
    purposes = [o.purpose for o in found]
    assert "mean" not in purposes and purposes.count("aggregate") == 1
    assert purposes.count("moments") == 1 and purposes.count("score") == 2 * k
    LeakChecker(min_participants=harness.min_participants).check(found, harness.ids)


@pytest.mark.parametrize("attackers", [0, 1])
@pytest.mark.parametrize("k", [3, 4, 5])
def test_shares_rounds_open_no_small_linear_combination(
    k: int, attackers: int, tmp_path: Path
) -> None:
    _check_round("shares", k, attackers, tmp_path)


@pytest.mark.parametrize("attackers", [0, 1])
def test_ckks_round_of_three_opens_no_small_linear_combination(
    attackers: int, tmp_path: Path
) -> None:
    _check_round("ckks", 3, attackers, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "k", "attackers"),
    [
        ("ckks", 4, 0),
        ("ckks", 4, 1),
        ("ckks", 5, 0),
        ("ckks", 5, 2),
        ("ckks", 10, 0),
        ("ckks", 10, 3),
        ("shares", 10, 0),
        ("shares", 10, 3),
    ],
)
def test_large_rounds_open_no_small_linear_combination(
    mode: str, k: int, attackers: int, tmp_path: Path
) -> None:
    _check_round(mode, k, attackers, tmp_path)

"""Near-duplicate detection in shares mode: counts opened, no distance, the helper gates it.

The ckks test's rounds (``test_copies_gatekeeping.Round``: K = 6, three participants
upload one matrix, real engine rounds with signed envelopes) run here in shares mode.
Both servers compute each pair's distance as shares, compare it with the threshold and
count the near-duplicates on shares; only the counts are opened, and the engine applies
``u_k = 1 / (1 + copies_k)`` as in plaintext. The attacker is the aggregator,
with our own classes: it asks the helper for a copies step outside the plan, twice, with
a participant twice or one it holds no share of, for the distance itself, and over an
upload that failed the range check. Each refusal is a typed error and an audit event.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from secure_fed.errors import OpeningRefused, UploadOutOfRange
from tests.secure_fed.secure.adversarial.attacker import helper_linear, helper_uids
from tests.secure_fed.secure.adversarial.test_copies_gatekeeping import GROUP, IDS, PREDS, K, Round
from tests.secure_fed.secure.modes.test_share_range import crafted
from tests.secure_fed.secure.signed_requests import signed


def copies_request(run: Round, uids: list[str], **extra: object) -> bytes:
    """A tagged copies request as the aggregator would start one (no material)."""
    tag = secrets.token_hex(4)
    head = {
        "op": "copies",
        "uids": uids,
        "tensor": f"copies-{tag}",
        "check": f"copies-{tag}-cmp",
        "round_id": 1,
        "parts": [0, 0, 0],
        **extra,
    }
    return signed(run.dep, head)


def uids_of(run: Round) -> list[str]:
    held = helper_uids(run.dep)
    return [held[p] for p in IDS]


def refused(run: Round, request: bytes, match: str) -> None:
    """The helper refuses ``request`` with ``OpeningRefused`` and an ``access.denied`` event."""
    before = len(run.sink.named("access.denied"))
    with pytest.raises(OpeningRefused, match=match):
        run.dep.helper.handle(request)
    denied = run.sink.named("access.denied")
    assert len(denied) == before + 1 and denied[-1]["party"] == "helper"


def test_three_uploads_of_one_matrix_share_one_weight_as_in_plaintext(tmp_path: Path) -> None:
    run = Round(tmp_path / "shares", mode="shares")
    weights, copies = run.publish()
    assert copies == {**dict.fromkeys(IDS[:3], 0), **dict.fromkeys(GROUP, 2)}
    honest = [weights[p] for p in IDS[:3]]
    assert [weights[p] for p in GROUP] == pytest.approx([honest[0] / 3] * 3)
    plain_weights, plain_copies = Round(tmp_path / "plain", mode="plaintext").publish()
    assert plain_copies == copies and plain_weights == pytest.approx(weights)
    # each pair is one release of the helper; only the counts were opened (no bit, no distance)
    pairs = [r for r in run.dep.helper.log if r.purpose == "distance" and r.released]
    assert len(pairs) == K * (K - 1) // 2
    (step,) = [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]
    assert step["copies"] == copies and step["party"] == "helper"
    assert step["shape"] == [K] and "near_pairs" not in step


def test_the_helper_refuses_copies_outside_the_plan_or_twice(tmp_path: Path) -> None:
    off = Round(tmp_path / "off", mode="shares", detects_copies=False)
    assert off.dep.helper.plans.tracker(1).plan.copies is False
    refused(off, copies_request(off, uids_of(off)), "allows 'publication' now, not 'copies'")
    weights, copies = off.publish()
    assert set(copies.values()) == {0}  # no step: every u_k is 1
    run = Round(tmp_path / "on", mode="shares")
    assert run.dep.helper.plans.tracker(1).phase == "copies"
    # a started step is spent, even when it fails: no second count from a retry
    with pytest.raises(Exception, match="copies step refused|triples"):
        run.dep.helper.handle(copies_request(run, uids_of(run)))
    refused(run, copies_request(run, uids_of(run)), "copies step of round 1 already ran")
    done = Round(tmp_path / "done", mode="shares")
    done.publish()
    refused(done, copies_request(done, uids_of(done)), "allows 'done' now, not 'copies'")


def test_the_helper_refuses_a_participant_twice_or_outside_the_copy_set(tmp_path: Path) -> None:
    run = Round(tmp_path, mode="shares")
    uids = uids_of(run)
    refused(run, copies_request(run, [uids[0], *uids]), "appears twice")
    refused(run, copies_request(run, [*uids[1:], "mallory-upload"]), "no share of uploads")
    # a copy set leaving half the roster out: not the publication's accepted set
    refused(run, copies_request(run, uids[3:]), "3 excluded of 6: at most a minority")
    assert run.dep.helper.plans.tracker(1).phase == "copies"  # nothing released
    assert not [r for r in run.dep.helper.log if r.purpose == "distance" and r.released]


def test_the_distance_itself_is_never_opened(tmp_path: Path) -> None:
    run = Round(tmp_path, mode="shares")
    uids = uids_of(run)
    pair = uids[:2]
    beaver = {"op": "open", "uids": pair, "centre": pair, "op_id": "x", "tensor": "t1"}
    for kind in ("distance", "copies"):
        refused(run, signed(run.dep, {**beaver, "kind": kind, "round_id": 1}), "never opened")
    with pytest.raises(OpeningRefused, match="never opened"):
        helper_linear(run.dep, pair, [0.5, 0.5], purpose="distance")
    for field in ("open", "threshold", "upper", "pairs"):
        refused(run, copies_request(run, uids, **{field: 1}), "opens no distance")
    assert run.dep.helper.plans.tracker(1).phase == "copies"


def test_no_distance_over_an_upload_that_failed_the_range_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Round(tmp_path, mode="shares")
    uids = uids_of(run)
    bad = crafted(run.dep, "p00", PREDS["p00"], monkeypatch)  # one cell at 1000
    with pytest.raises(UploadOutOfRange):
        run.agg.load(bad)
    failed = [u for u, ok in run.dep.helper.range_checks.verdicts.items() if not ok]
    assert len(failed) == 1
    refused(run, copies_request(run, [failed[0], *uids[1:]]), "not passed the range check")


def test_no_distance_over_another_upload_than_the_one_scored(tmp_path: Path) -> None:
    """A second, valid upload of p00 cannot stand in for the one the round scored."""
    run = Round(tmp_path, mode="shares")
    uids = uids_of(run)
    other = run.agg.load(run.dep.encoder("p00", bound=8.0).encode(PREDS["p01"]))  # type: ignore[attr-defined]
    assert other.uid != uids[0]  # type: ignore[attr-defined]
    refused(run, copies_request(run, [other.uid, *uids[1:]]), "not the ones this round scored")  # type: ignore[attr-defined]
    assert run.dep.helper.plans.tracker(1).phase == "copies"

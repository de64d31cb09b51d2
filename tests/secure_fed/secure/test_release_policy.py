"""Every refusal branch of the one release policy both gatekeepers use."""

from __future__ import annotations

from dataclasses import replace

import pytest

from secure_fed.errors import DecryptionRefused, ModeSetupInvalid, OpeningRefused
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.release_policy import ReleasePolicy, ReleaseRequest

AGG = ReleaseRequest(
    round_id=2, purpose="mean", contributors=("a", "b", "c"), value_kind="aggregate", shape=(4, 3)
)
SCORE = ReleaseRequest(
    round_id=2, purpose="score", contributors=("a",), value_kind="score", shape=(1,)
)


def _policy(**kwargs: object) -> ReleasePolicy:
    return ReleasePolicy(
        party="key_authority", min_participants=3, refusal=DecryptionRefused, **kwargs
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "request_",
    [
        AGG,
        SCORE,
        replace(AGG, purpose="moments", counted=3),
        replace(AGG, purpose="aggregate"),
        replace(AGG, weights=(1.0, 0.5, 1e-9)),
        replace(AGG, contributors=("a", "b", "c", "d")),
    ],
)
def test_allowed_releases(request_: ReleaseRequest) -> None:
    assert _policy().reason(request_) is None


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (replace(AGG, purpose="vector"), "not one of"),
        (replace(AGG, contributors=("a", "a", "b", "c")), "repeat"),
        (replace(AGG, contributors=("a", "b", "a")), "repeat"),
        (replace(SCORE, contributors=("a", "b"), shape=(1,)), "exactly one participant"),
        (replace(SCORE, contributors=()), "exactly one participant"),
        (replace(SCORE, shape=(3,)), "one scalar"),
        (replace(AGG, contributors=("a", "b")), "2 distinct participants; at least 3"),
        (replace(AGG, value_kind="upload"), "single participant's upload"),
        (replace(SCORE, value_kind="upload"), "single participant's upload"),
        (replace(SCORE, value_kind="aggregate"), "needs a 'score' value"),
        (replace(AGG, value_kind="score"), "needs a 'aggregate' value"),
        (replace(AGG, counted=4), "contributor count 4"),
        (replace(AGG, counted=2), "contributor count 2"),
        (replace(AGG, weights=(0.5, 0.5)), "one weight"),
        (replace(AGG, weights=(0.5, 0.5, 0.0)), "one weight"),
        (replace(AGG, weights=(0.5, 0.5, 1.5)), "one weight"),
    ],
)
def test_each_refusal(request_: ReleaseRequest, fragment: str) -> None:
    assert fragment in str(_policy().reason(request_))


def test_refusal_is_logged_audited_and_typed() -> None:
    sink = MemoryAuditSink()
    policy = ReleasePolicy(party="helper", min_participants=3, refusal=OpeningRefused, audit=sink)
    with pytest.raises(OpeningRefused, match="round 2, mean: mean over 2"):
        policy.check(replace(AGG, contributors=("a", "b")))
    row = policy.log[-1]
    assert (row.released, row.kind, row.participant_ids, row.contributors) == (
        False,
        "refused",
        ("a", "b"),
        2,
    )
    assert sink.named("access.denied") == [
        {
            "party": "helper",
            "round_id": 2,
            "purpose": "mean",
            "contributors": 2,
            "reason": "mean over 2 distinct participants; at least 3 needed",
        }
    ]
    assert not sink.named("decryption.released")


def test_release_is_logged_and_audited() -> None:
    sink = MemoryAuditSink()
    policy = _policy(audit=sink)
    policy.check(AGG)
    policy.released(AGG, central_dp=True)
    row = policy.log[-1]
    assert (row.released, row.kind, row.shape, row.central_dp) == (True, "aggregate", (4, 3), True)
    event = sink.named("decryption.released")[-1]
    assert event["participant_ids"] == ["a", "b", "c"] and event["central_dp"] is True
    assert event["party"] == "key_authority" and not sink.named("access.denied")


def test_extra_rules_run_after_the_built_in_ones() -> None:
    seen: list[ReleaseRequest] = []

    def plan(request: ReleaseRequest) -> str | None:  # a release plan fixing the set {a, b, c}
        seen.append(request)
        return None if set(request.contributors) == {"a", "b", "c"} else "not in the round's plan"

    policy = _policy(rules=(plan,))
    assert policy.reason(AGG) is None
    assert policy.reason(replace(AGG, contributors=("a", "b", "d"))) == "not in the round's plan"
    assert "at least 3" in str(policy.reason(replace(AGG, contributors=("a", "b"))))
    assert len(seen) == 2  # a built-in refusal is final


@pytest.mark.parametrize("value", [1, 0, True, 2.5, "3"])
def test_min_participants_is_validated(value: object) -> None:
    with pytest.raises(ModeSetupInvalid, match="min_participants"):
        ReleasePolicy(
            party="helper",
            min_participants=value,  # type: ignore[arg-type]
            refusal=OpeningRefused,
        )

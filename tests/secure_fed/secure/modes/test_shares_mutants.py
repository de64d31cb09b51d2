"""The shares aggregator's refusals of what participants and the helper send, by name.

Each case pins a check of :class:`~secure_fed.secure.modes.shares.SharesAggregator`
that the mode's round tests pass through without reaching: the upload frame's size
limit (exactly ``16 N C + 2^16`` bytes), its parts, a share of another size under a
valid tag, an out-of-range upload named by its participant, a plan below the
aggregator's minimum, a helper that returns no plan or other counts, and the dtype
of the published aggregate.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from secure_fed.errors import (
    AggregationInvalid,
    ModeSetupInvalid,
    OpeningRefused,
    UploadMalformed,
    UploadOutOfRange,
)
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.shares import SharesDeployment
from secure_fed.secure.mode import AggregateHandle, UploadHandle
from secure_fed.secure.modes.shares import SharesAggregator, SharesEncoder
from secure_fed.secure.release_plan import MIN_MOMENT_ROWS, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import PlainBackend, ScoringConfig, pooled_mahalanobis
from secure_fed.wire import HELPER_REPLY, SHARES_UPLOAD, decode_frame, encode_frame
from tests.refusals import exactly
from tests.secure_fed.secure.modes.shares_round import BOUND, IDS, C, N, deployment
from tests.secure_fed.secure.modes.test_share_range import crafted
from tests.secure_fed.secure.test_equivalence import SCORE_RTOL

LIMIT = 16 * N * C + (1 << 16)


def matrix(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, (N, C))


def upload(dep: SharesDeployment, pid: str, seed: int = 0) -> bytes:
    return dep.encoder(pid, bound=BOUND).encode(matrix(seed))


def reframed(payload: bytes, **head: object) -> bytes:
    """The upload with header fields replaced (same body)."""
    old, body = decode_frame(payload, SHARES_UPLOAD)
    return encode_frame(SHARES_UPLOAD, {**old, **head}, body)


def plan(**fields: Any) -> ReleasePlan:
    return ReleasePlan.for_round(
        round_id=1, min_participants=3, shape=(N, C), scoring=ScoringConfig(), **fields
    )


def test_an_upload_frame_may_use_its_whole_limit_and_not_one_byte_more() -> None:
    agg = deployment().aggregator(bound=BOUND)
    head = {"participant_id": "p0", "upload_id": "u", "parts": [0, 0]}
    overhead = len(encode_frame(SHARES_UPLOAD, head, b""))
    at_limit = encode_frame(SHARES_UPLOAD, head, bytes(LIMIT - overhead))
    assert len(at_limit) == LIMIT
    with exactly(UploadMalformed, "shares upload parts do not match the payload"):
        agg.load(at_limit)
    over = encode_frame(SHARES_UPLOAD, head, bytes(LIMIT + 1 - overhead))
    refused = re.escape("[UPLOAD_MALFORMED] shares upload frame refused: ")
    size = f" is {LIMIT + 1} bytes, over the limit of {LIMIT}$"
    with pytest.raises(UploadMalformed, match=f"^{refused}.*{size}"):
        agg.load(over)


def test_an_upload_with_other_than_two_parts_is_refused_by_name() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    payload = upload(dep, "p0")
    with exactly(UploadMalformed, "shares upload needs two parts"):
        agg.load(reframed(payload, parts=[1, 1, 1]))


def test_upload_parts_that_are_negative_or_fractional_are_refused_even_if_they_add_up() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    payload = upload(dep, "p0")
    size = len(decode_frame(payload, SHARES_UPLOAD)[1])
    for parts in ([size + 1, -1], [size / 2, size / 2]):
        with exactly(UploadMalformed, "shares upload parts do not match the payload"):
            agg.load(reframed(payload, parts=parts))


def test_an_empty_aggregator_part_is_read_and_refused_as_a_share() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    payload = upload(dep, "p0")
    size = len(decode_frame(payload, SHARES_UPLOAD)[1])
    with pytest.raises(
        UploadMalformed, match=r"^\[UPLOAD_MALFORMED\] aggregator share of 'p0' refused"
    ):
        agg.load(reframed(payload, parts=[0, size]))


def test_a_validly_tagged_share_of_another_size_is_refused() -> None:
    """The participant's own keys, one class more: the tag verifies, the count does not."""
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    wide = SharesEncoder(shape=(N, C + 1), bound=BOUND, enrolment=dep.enrolment("p0"))
    payload = wide.encode(np.zeros((N, C + 1)))
    with exactly(
        UploadMalformed,
        f"aggregator share of 'p0' refused: [CRYPTO_SHARE_TAMPERED] share blob count "
        f"{N * (C + 1)} is not the expected count {N * C}",
    ):
        agg.load(payload)


def test_an_out_of_range_upload_is_refused_naming_its_participant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    with pytest.raises(UploadOutOfRange, match=r"^\[\w+\] upload \w+ of 'p1' has a value outside"):
        agg.load(crafted(dep, "p1", matrix(1), monkeypatch))


def test_a_plan_below_the_aggregators_minimum_is_raised_to_it() -> None:
    agg = deployment().aggregator(bound=BOUND)
    agg.begin_round(replace(plan(), min_participants=2))
    assert agg._plans[1].plan.min_participants == 3


def test_a_round_without_a_request_key_or_a_plan_from_the_helper_is_refused() -> None:
    dep = deployment()
    keys = dep.server_keys()
    bare = SharesAggregator(shape=(N, C), bound=BOUND, keys=replace(keys, request_key=None))
    with exactly(ModeSetupInvalid, "request_key is needed to fix a release plan with the helper"):
        bare.begin_round(plan())
    array = {"dtype": "u8", "shape": [1]}
    silent = replace(
        keys, helper=lambda request: encode_frame(HELPER_REPLY, {"array": array}, bytes(8))
    )
    agg = SharesAggregator(shape=(N, C), bound=BOUND, keys=silent)
    with exactly(OpeningRefused, "the helper did not return the plan it fixed"):
        agg.begin_round(plan())


def test_the_aggregators_plan_refuses_a_participant_it_never_enrolled() -> None:
    agg = deployment().aggregator(bound=BOUND)
    agg.begin_round(plan(scored=False))
    ask = ReleaseRequest(
        round_id=1,
        purpose="aggregate",
        contributors=("p0", "p1", "zz"),
        value_kind="aggregate",
        shape=(),
        weights=(1 / 3, 1 / 3, 1 / 3),
    )
    with pytest.raises(OpeningRefused, match=r"\['zz'\] are not enrolled"):
        agg._plans[1].require(ask, OpeningRefused)


class _Other(AggregateHandle):
    pass


def test_the_publication_is_float32_and_only_of_a_shares_aggregate() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    handles: dict[str, UploadHandle] = {p: agg.load(upload(dep, p, j)) for j, p in enumerate(IDS)}
    out = agg.reveal(agg.weighted_sum(handles, dict.fromkeys(IDS, 1.0)), round_id=1)
    assert out.dtype == np.float32 and out.shape == (N, C)
    with exactly(AggregationInvalid, "aggregate is not a shares aggregate"):
        agg.reveal(_Other(), round_id=1)


def scored(dep: SharesDeployment, agg: SharesAggregator) -> dict[str, UploadHandle]:
    agg.begin_round(plan(copies=True))
    handles = {p: agg.load(upload(dep, p, j)) for j, p in enumerate(IDS)}
    agg.score(handles, round_id=1)
    return handles


def test_copies_asked_before_the_scores_are_refused_by_this_sides_plan() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(plan(copies=True))
    handles = {p: agg.load(upload(dep, p, j)) for j, p in enumerate(IDS)}
    with exactly(OpeningRefused, "round 1, distance: the plan allows 'ranking' now, not 'copies'"):
        agg.copies(handles, round_id=1)


def test_helper_counts_that_differ_from_the_opened_ones_are_refused() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    handles = scored(dep, agg)
    honest = agg.keys.helper

    def helper(request: bytes) -> bytes:
        head, payload = decode_frame(honest(request), HELPER_REPLY)
        if "copies" in head:
            head = {**head, "copies": [1] * len(IDS)}
        return encode_frame(HELPER_REPLY, head, payload)

    agg.keys = replace(agg.keys, helper=helper)
    with exactly(OpeningRefused, "the helper's near-duplicate counts differ from this side's"):
        agg.copies(handles, round_id=1)


def test_the_opened_counts_are_kept_in_this_sides_plan() -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    handles = scored(dep, agg)
    counts = agg.copies(handles, round_id=1)
    assert counts == dict.fromkeys(IDS, 0) and agg._plans[1].copies == counts


def rewriting_open_replies(agg: SharesAggregator, **fields: object) -> None:
    """The helper's replies to the scoring's Beaver openings, with ``fields`` replaced."""
    honest = agg.keys.helper

    def helper(request: bytes) -> bytes:
        head, payload = decode_frame(honest(request), HELPER_REPLY)
        if "op_id" in head:
            head = {**head, **fields}
        return encode_frame(HELPER_REPLY, head, payload)

    agg.keys = replace(agg.keys, helper=helper)


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"step": "final"}, r"helper reply does not match ranking operation r1-\w+-op1"),
        ({"op_id": "r1-0-op9"}, r"helper reply does not match ranking operation r1-\w+-op1"),
        ({"round_id": 2}, r"helper reply names another round than 1"),
    ],
)
def test_a_helper_reply_to_another_step_operation_or_round_is_refused(
    fields: dict[str, object], text: str
) -> None:
    dep = deployment()
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(plan())
    handles = {p: agg.load(upload(dep, p, j)) for j, p in enumerate(IDS)}
    rewriting_open_replies(agg, **fields)
    with pytest.raises(OpeningRefused, match=rf"^\[SHARES_OPENING_REFUSED\] {text}$"):
        agg.score(handles, round_id=1)


def evidence_round(
    dep: SharesDeployment | None = None,
) -> tuple[SharesAggregator, dict[str, UploadHandle], EvidenceSlice]:
    dep = dep or deployment()
    agg = dep.aggregator(bound=BOUND)
    piece = EvidenceSlice(rows=tuple(range(N)), labels=(0,) * N)
    agg.begin_round(plan(evidence=piece))
    handles = {p: agg.load(upload(dep, p, j)) for j, p in enumerate(IDS)}
    return agg, handles, piece


def test_evidence_asked_before_the_scores_is_refused_by_this_sides_plan() -> None:
    agg, handles, piece = evidence_round()
    with exactly(OpeningRefused, "round 1, score: the plan allows 'ranking' now, not 'evidence'"):
        agg.evidence(handles, piece.mask((N, C)), round_id=1)


def rewriting_evidence_replies(agg: SharesAggregator, **fields: object) -> None:
    """The helper's evidence replies, with ``fields`` replaced."""
    honest = agg.keys.helper

    def helper(request: bytes) -> bytes:
        head, payload = decode_frame(honest(request), HELPER_REPLY)
        if head.get("step") == "evidence":
            head = {**head, **fields}
        return encode_frame(HELPER_REPLY, head, payload)

    agg.keys = replace(agg.keys, helper=helper)


@pytest.mark.parametrize("fields", [{"round_id": 2}, {"step": "final"}])
def test_a_helper_evidence_reply_of_another_round_or_step_is_refused(
    fields: dict[str, object],
) -> None:
    agg, handles, piece = evidence_round()
    agg.score(handles, round_id=1)
    rewriting_evidence_replies(agg, **fields)
    with exactly(OpeningRefused, "helper reply does not answer the evidence of round 1"):
        agg.evidence(handles, piece.mask((N, C)), round_id=1)


def test_both_servers_open_the_same_evidence_values() -> None:
    """This side's sums travel as ring elements (``u8``): the helper opens the same values."""
    dep = deployment()
    agg, handles, piece = evidence_round(dep)
    agg.score(handles, round_id=1)
    values = agg.evidence(handles, piece.mask((N, C)), round_id=1)
    helper = dep.helper.plans.tracker(1)
    assert helper is not None and helper.evidence == values == agg._plans[1].evidence


def test_scores_over_fewer_moment_samples_than_rows_match_the_plaintext_reference() -> None:
    # the ranking pass and the moments read only the first ``moment_samples`` rows; a
    # mutant that centred all rows there (``_diff(..., None)``) stayed green while every
    # test scored with moment_samples >= N (the plan's floor is MIN_MOMENT_ROWS)
    rows, samples = MIN_MOMENT_ROWS + 128, MIN_MOMENT_ROWS
    config = ScoringConfig(moment_samples=samples)
    dep = SecureDeployment.create(
        mode="shares", shape=(rows, C), participant_ids=IDS, min_participants=3, scoring=config
    )
    preds = {p: np.random.default_rng(j).normal(0, 2, (rows, C)) for j, p in enumerate(IDS)}
    preds["p3"][samples:] += 5.0  # rows past the samples differ: the ranking must ignore them
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    scores = agg.score(handles, round_id=1).scores
    clipped = {p: np.clip(m, -BOUND, BOUND) for p, m in preds.items()}
    ref = pooled_mahalanobis(
        PlainBackend(clipped),
        IDS,
        num_samples=rows,
        config=replace(config, min_subset=max(config.min_subset, 3)),
    ).scores
    for p in IDS:
        assert scores[p] == pytest.approx(ref[p], rel=SCORE_RTOL)

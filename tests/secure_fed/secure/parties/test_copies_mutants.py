"""Guards of the gatekeepers' copies step that surviving mutants showed unchecked (requests).

``scripts/mutation gatekeepers`` changed each of these in the key authority's
comparison dealer (``handle_deal_compare``) and the helper's copies handler, and
the selected tests stayed green (docs/benchmarks.md, "Mutation testing"). The
attacker is the aggregator, with our own classes: it signs comparison requests with
a bound outside the dealer's range or with another key, and sends the helper copies
requests that name no comparison, malformed or foreign uploads, a participant twice,
an unchecked upload, fields the helper derives itself, or a second start of the step.
Each refusal is typed, with its exact text, and refused openings are audited.
``adversarial/test_copies_mutants_adversarial.py`` tampers with the step's messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from crypto.shares import ShareMacKey
from crypto.shares.prg import ShareLabel
from crypto.shares.range_material import RangeMaterial
from crypto.shares.wire import open_sealed
from secure_fed.errors import (
    AuthorityRequestMalformed,
    OpeningRefused,
    ServerRequestUnauthenticated,
    UploadOutOfRange,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.computation.share_range import COMPARE_PARTICIPANT, compare_spec
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import KeyAuthority, compare_request
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.release_policy import DecryptionRecord
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import (
    HELPER_REQUEST,
    decode_frame,
)
from tests.refusals import exactly
from tests.secure_fed.secure.modes.test_share_range import crafted
from tests.secure_fed.secure.signed_requests import signed

N, C, BOUND = 24, 3, 8.0
IDS = ("a", "b", "c", "d")


# -- the key authority deals comparison material -------------------------------------


def _dealer() -> tuple[KeyAuthority, ServerSigningKey, MemoryAuditSink]:
    signer, sink = ServerSigningKey.generate("aggregator"), MemoryAuditSink()
    return KeyAuthority(min_participants=2, aggregator=signer.identity, audit=sink), signer, sink


def _keys() -> dict[str, ShareMacKey]:
    return {
        "key_aggregator": ShareMacKey.generate(recipient="aggregator"),
        "key_helper": ShareMacKey.generate(recipient="helper"),
    }


@pytest.mark.parametrize("upper", [0, (1 << 62) - 1])
def test_a_comparison_at_either_end_of_the_range_is_dealt_and_logged_as_no_release(
    upper: int,
) -> None:
    ka, signer, _ = _dealer()
    keys = _keys()
    request = compare_request(round_id=7, tensor="cmp", count=3, upper=upper, signer=signer)
    blob_a, blob_h = ka.handle_deal_compare(request, **keys)
    label = ShareLabel(round_id=7, participant_id=COMPARE_PARTICIPANT, tensor="cmp")
    blob_h = open_sealed(keys["key_helper"], blob_h)  # the helper's half travels sealed
    for party, blob, key in ((0, blob_a, keys["key_aggregator"]), (1, blob_h, keys["key_helper"])):
        RangeMaterial.parse(
            blob, key=key, label=label, party=party, count=3, spec=compare_spec(upper)
        )
    (record,) = ka.log
    assert isinstance(record.at, float)
    assert record == DecryptionRecord(7, "compare:cmp", "compare", (3,), 0, (), False, record.at)
    assert record.contributors == 0 and record.released is False  # no value left the authority


@pytest.mark.parametrize("upper", [-1, 1 << 62, 1 << 63, True, 5.0, "7"])
def test_a_comparison_bound_outside_0_to_2_62_or_not_an_integer_is_refused(upper: object) -> None:
    ka, signer, _ = _dealer()
    request = compare_request(round_id=7, tensor="cmp", count=3, upper=upper, signer=signer)  # type: ignore[arg-type]
    with exactly(AuthorityRequestMalformed, "a comparison names an integer 'upper' in [0, 2^62)"):
        ka.handle_deal_compare(request, **_keys())
    assert ka.log == []


def test_a_comparison_request_signed_with_another_key_is_denied_as_a_compare() -> None:
    ka, _, sink = _dealer()
    mallory = ServerSigningKey.generate("aggregator")
    request = compare_request(round_id=7, tensor="cmp", count=3, upper=9, signer=mallory)
    with pytest.raises(ServerRequestUnauthenticated, match="signature is wrong"):
        ka.handle_deal_compare(request, **_keys())
    (denied,) = sink.named("access.denied")
    assert (denied["party"], denied["op"]) == ("key_authority", "compare")
    assert ka.log == []


# -- the helper's copies handler -----------------------------------------------------


class Stop(Exception):
    """Raised by a channel to leave the aggregator's copies step half-way."""


@dataclass
class CopiesRound:
    """A scored shares round (plan with the copies step); its last upload copies its first."""

    dep: Any
    agg: Any
    handles: dict[str, Any]
    sink: MemoryAuditSink

    @classmethod
    def scored(cls, ids: tuple[str, ...] = IDS, quorum: int = 3) -> CopiesRound:
        sink = MemoryAuditSink()
        dep: Any = SecureDeployment.create(
            mode="shares",
            shape=(N, C),
            participant_ids=list(ids),
            min_participants=quorum,
            audit=sink,
        )
        agg = dep.aggregator(bound=BOUND)
        agg.begin_round(
            ReleasePlan.for_round(
                round_id=1, min_participants=quorum, shape=(N, C), scoring=agg.scoring, copies=True
            )
        )
        rng = np.random.default_rng(5)
        mats = {p: np.clip(rng.normal(0, 2, (N, C)), -BOUND, BOUND) for p in ids}
        mats[ids[-1]] = mats[ids[0]].copy()
        handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in mats.items()}
        agg.score(handles, round_id=1)
        return cls(dep, agg, handles, sink)

    @property
    def helper(self) -> Any:
        return self.dep.helper

    def uids(self) -> list[str]:
        return [self.handles[p].uid for p in sorted(self.handles)]

    def ask(self, head: Mapping[str, object], payload: bytes = b"") -> bytes:
        """Send the helper a copies request of round 1 as the aggregator would tag it."""
        full = {"op": "copies", "round_id": 1, "parts": [len(payload)], **head}
        return self.helper.handle(signed(self.dep, full, payload))  # type: ignore[no-any-return]

    def through(
        self, change: Callable[[int, dict[str, Any], bytes], tuple[dict[str, Any], bytes]]
    ) -> None:
        """Pass the aggregator's ``n``-th copies request (from 0) through ``change``."""
        inner, seen = self.agg.keys.helper, [0]

        def channel(request: bytes) -> bytes:
            header, payload = decode_frame(request, HELPER_REQUEST)
            if header.get("op") != "copies":
                return inner(request)  # type: ignore[no-any-return]
            header, payload = change(seen[0], header, payload)
            seen[0] += 1
            return inner(signed(self.dep, header, payload))  # type: ignore[no-any-return]

        self.agg.keys = replace(self.agg.keys, helper=channel)

    def started(self) -> str:
        """Start the copies step and stop the aggregator after it; return the comparison."""

        def stop_after_start(n: int, header: dict[str, Any], payload: bytes) -> Any:
            if n == 1:
                raise Stop
            return header, payload

        self.through(stop_after_start)
        with pytest.raises(Stop):
            self.agg.copies(self.handles, round_id=1)
        (check,) = self.helper._copies_runs
        return check  # type: ignore[no-any-return]

    def denied(self) -> dict[str, object]:
        return self.sink.named("access.denied")[-1]


def test_a_copies_request_that_names_no_comparison_is_malformed() -> None:
    run = CopiesRound.scored()
    for head in ({"uids": run.uids()}, {"uids": run.uids(), "check": 7}):
        with exactly(AuthorityRequestMalformed, "a copies request names its comparison ('check')"):
            run.ask(head)
    assert run.helper._copies_runs == {}


def test_a_step_of_no_running_comparison_or_at_another_stage_is_malformed() -> None:
    run = CopiesRound.scored()
    with exactly(AuthorityRequestMalformed, "no running copies comparison 'nope'"):
        run.ask({"check": "nope"})
    check = run.started()
    for stage in ("convert", "count"):
        text = f"copies {check!r} is at 'compare', not {stage!r}"
        with exactly(AuthorityRequestMalformed, text):
            run.ask({"check": check, "stage": stage})
    assert run.helper._copies_runs[check].stage == "compare"
    # the aggregator's step of another round is no step of this comparison
    with exactly(AuthorityRequestMalformed, f"no running copies comparison {check!r}"):
        run.helper.handle(
            signed(run.dep, {"op": "copies", "round_id": 2, "check": check, "parts": [0]})
        )


def test_a_comparison_message_that_does_not_parse_ends_the_comparison() -> None:
    run = CopiesRound.scored()
    check = run.started()
    with pytest.raises(
        AuthorityRequestMalformed,
        match="^\\[AUTHORITY_REQUEST_MALFORMED\\] copies comparison refused: ",
    ):
        run.ask({"check": check}, b"junk")
    assert check not in run.helper._copies_runs
    with exactly(AuthorityRequestMalformed, f"no running copies comparison {check!r}"):
        run.ask({"check": check})


@pytest.mark.parametrize("uids", ["u1", [], [1, 2, 3], ["u1", None]])
def test_a_copies_request_whose_uploads_are_not_a_list_of_ids_is_malformed(uids: object) -> None:
    run = CopiesRound.scored()
    with exactly(
        AuthorityRequestMalformed, "a copies request needs a non-empty list of upload ids"
    ):
        run.ask({"uids": uids, "check": "cmp", "tensor": "t"})
    assert run.helper._copies_runs == {}


def test_an_upload_the_helper_holds_no_share_of_is_refused_naming_every_participant() -> None:
    run = CopiesRound.scored()
    reason = "helper holds no share of uploads ['mallory']"
    with exactly(OpeningRefused, f"round 1, distance: {reason}"):
        run.ask({"uids": [*run.uids()[:3], "mallory"], "check": "cmp", "tensor": "t"})
    assert run.denied() == {
        "party": "helper",
        "round_id": 1,
        "purpose": "distance",
        "contributors": 4,
        "reason": reason,
    }
    row = run.helper.log[-1]
    assert (row.participant_ids, row.kind, row.released) == (
        ("a", "b", "c", "upload mallory"),
        "refused",
        False,
    )


def test_one_upload_twice_is_refused_as_a_participant_twice() -> None:
    run = CopiesRound.scored()
    uids = run.uids()
    reason = "a participant appears twice: a pair is two distinct members"
    with exactly(OpeningRefused, f"round 1, distance: {reason}"):
        run.ask({"uids": [uids[0], *uids], "check": "cmp", "tensor": "t"})
    assert run.denied()["reason"] == reason and run.denied()["contributors"] == 5
    assert run.helper.log[-1].participant_ids == ("a", "a", "b", "c", "d")


def test_an_upload_that_failed_its_range_check_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    run = CopiesRound.scored()
    bad = crafted(run.dep, "a", np.zeros((N, C)), monkeypatch)  # one cell at 1000
    with pytest.raises(UploadOutOfRange):
        run.agg.load(bad)
    (failed,) = [u for u, ok in run.helper.range_checks.verdicts.items() if not ok]
    reason = f"uploads {[failed]} have not passed the range check"
    with exactly(OpeningRefused, f"round 1, distance: {reason}"):
        run.ask({"uids": [failed, *run.uids()[1:]], "check": "cmp", "tensor": "t"})
    assert run.denied()["reason"] == reason


def test_a_copies_request_that_sets_what_the_helper_derives_is_refused_naming_the_fields() -> None:
    run = CopiesRound.scored()
    reason = (
        "the helper derives ['center', 'upper'] itself and opens no distance; the request set them"
    )
    with exactly(OpeningRefused, f"round 1, distance: {reason}"):
        run.ask({"uids": run.uids(), "check": "cmp", "tensor": "t", "upper": 1, "center": 0})
    assert run.denied()["reason"] == reason


def test_a_copies_request_over_one_upload_is_refused() -> None:
    run = CopiesRound.scored()
    with exactly(OpeningRefused, "round 1, distance: the copies step needs at least two uploads"):
        run.ask({"uids": run.uids()[:1], "check": "cmp", "tensor": "t"})
    assert run.denied()["contributors"] == 1


def test_an_upload_whose_range_check_never_ran_is_refused() -> None:
    run = CopiesRound.scored()
    inner = run.agg.keys.helper

    def no_range_check(request: bytes) -> bytes:
        header, _ = decode_frame(request, HELPER_REQUEST)
        if header.get("op") == "range":
            raise Stop
        return inner(request)  # type: ignore[no-any-return]

    run.agg.keys = replace(run.agg.keys, helper=no_range_check)
    with pytest.raises(Stop):  # the helper holds the seed; the aggregator never checked it
        run.agg.load(run.dep.encoder("a", bound=BOUND).encode(np.zeros((N, C))))
    (unchecked,) = set(run.helper._seeds) - set(run.helper.range_checks.verdicts)
    reason = f"uploads {[unchecked]} have not passed the range check"
    with exactly(OpeningRefused, f"round 1, distance: {reason}"):
        run.ask({"uids": [unchecked, *run.uids()[1:]], "check": "cmp", "tensor": "t"})


def _start(run: CopiesRound, **head: object) -> dict[str, object]:
    return {"uids": run.uids(), "check": "cmp-2", "tensor": "t-2", "parts": [0, 0, 0], **head}


def test_a_second_start_of_the_round_is_refused_whatever_its_labels() -> None:
    run = CopiesRound.scored()
    check = run.started()
    for head, reason in (
        ({"check": check}, f"labels 't-2', {check!r} are not fresh"),
        ({"tensor": "copies-step"}, "labels 'copies-step', 'cmp-2' are not fresh"),
        ({}, "the copies step of round 1 already ran"),
    ):
        with exactly(OpeningRefused, f"round 1, distance: {reason}"):
            run.ask(_start(run, **head))
        assert run.helper.log[-1].participant_ids == ("a", "b")  # the first pair names the step
    assert list(run.helper._copies_runs) == [check]


def test_a_start_under_a_used_triple_label_is_refused() -> None:
    run = CopiesRound.scored()
    assert run.helper.registry.claim_triple(1, "t-used")  # an earlier opening's triples
    with exactly(
        OpeningRefused, "round 1, distance: Beaver triple label 't-used' was already used"
    ):
        run.ask(_start(run, tensor="t-used"))
    assert run.helper.log[-1].participant_ids == ("a", "b")


def test_a_start_over_another_upload_than_the_one_scored_is_refused() -> None:
    run = CopiesRound.scored()
    other = run.agg.load(run.dep.encoder("a", bound=BOUND).encode(np.zeros((N, C)))).uid
    reason = f"uploads {[other]} are not the ones this round scored"
    with exactly(OpeningRefused, f"round 1, distance: {reason}"):
        run.ask(_start(run, uids=[other, *run.uids()[1:]]))
    assert run.helper.log[-1].participant_ids == ("a", "b")


def test_a_start_without_its_three_parts_is_malformed() -> None:
    run = CopiesRound.scored()
    with exactly(AuthorityRequestMalformed, "a copies start carries triples, material, opening"):
        run.ask(_start(run, parts=[0, 0]))

"""The copies step's messages tampered with: surviving mutants of the gatekeepers, killed.

``scripts/mutation gatekeepers`` changed each of these in the helper's copies
handler (its comparison, bit conversion, counts and release) and in the key
authority's copies reply, and the selected tests stayed green (docs/benchmarks.md,
"Mutation testing"). The attacker is the aggregator, with our own classes: between
its real messages it reorders the uploads, sends more triples than values, reuses a
triple label, drops or cuts a part, or shifts a count share; each is refused with
its exact text and nothing is released. The honest step is checked to the letter:
every reply's parts, each pair released once, the audited counts of both gatekeepers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused
from secure_fed.secure.protocol.codecs import split_parts
from secure_fed.wire import (
    HELPER_REPLY,
    KEY_AUTHORITY_REPLY,
    KEY_AUTHORITY_REQUEST,
    decode_array,
    decode_frame,
)
from tests.secure_fed.secure.adversarial.test_copies_gatekeeping import IDS as GATEKEEPING_IDS
from tests.secure_fed.secure.adversarial.test_copies_gatekeeping import K, Round
from tests.secure_fed.secure.parties.test_copies_mutants import IDS, C, CopiesRound, N, exactly


def test_uploads_named_out_of_order_are_paired_in_participant_order() -> None:
    run = CopiesRound.scored()

    def reverse_uploads(n: int, header: dict[str, Any], payload: bytes) -> Any:
        if n == 0:
            header["uids"] = header["uids"][::-1]
        return header, payload

    run.through(reverse_uploads)
    assert run.agg.copies(run.handles, round_id=1) == {"a": 1, "b": 0, "c": 0, "d": 1}
    (event,) = [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]
    assert event["participant_ids"] == list(IDS) and event["copies"] == {
        "a": 1,
        "b": 0,
        "c": 0,
        "d": 1,
    }


def test_a_start_with_more_triples_than_pair_values_is_refused() -> None:
    run = CopiesRound.scored()
    values = 6 * N * C  # one triple per value of the 6 pair differences

    def more_triples(n: int, header: dict[str, Any], payload: bytes) -> Any:
        if n == 0:
            parts = split_parts(header, payload)
            _, parts[0] = run.agg.keys.deal(round_id=1, tensor=header["tensor"], count=values + 1)
            header["parts"] = [len(p) for p in parts]
            payload = b"".join(parts)
        return header, payload

    run.through(more_triples)
    tampered = (
        f"[CRYPTO_SHARE_TAMPERED] share blob count {values + 1} is not the expected count {values}"
    )
    with exactly(AuthorityRequestMalformed, f"copies step refused: {tampered}"):
        run.agg.copies(run.handles, round_id=1)
    assert run.helper._copies_runs == {}


def _at(stage: str, change: Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]) -> Any:
    """A ``through`` change applied to the aggregator's request of ``stage`` only."""

    def at_stage(n: int, header: dict[str, Any], payload: bytes) -> Any:
        return change(header, payload) if header.get("stage") == stage else (header, payload)

    return at_stage


@pytest.mark.parametrize("tensor", ["copies-step", "start"])
def test_a_bit_conversion_under_a_used_triple_label_is_refused(tensor: str) -> None:
    run = CopiesRound.scored()
    used: list[str] = []

    def relabel(n: int, header: dict[str, Any], payload: bytes) -> Any:
        if n == 0:
            used.append(header["tensor"])
        if header.get("stage") == "convert":
            header["tensor"] = used[0] if tensor == "start" else tensor
        return header, payload

    run.through(relabel)
    with pytest.raises(OpeningRefused) as caught:
        run.agg.copies(run.handles, round_id=1)
    label = used[0] if tensor == "start" else tensor
    assert (
        caught.value.message == f"round 1, distance: Beaver triple label {label!r} was already used"
    )
    assert run.helper.log[-1].participant_ids == ("a", "b")


def test_a_bit_conversion_without_its_two_parts_is_malformed() -> None:
    run = CopiesRound.scored()
    run.through(_at("convert", lambda h, p: ({**h, "parts": [len(p)]}, p)))
    with exactly(AuthorityRequestMalformed, "a bit conversion carries triples and an opening"):
        run.agg.copies(run.handles, round_id=1)


def test_a_bit_conversion_with_more_triples_than_pair_bits_is_refused() -> None:
    run = CopiesRound.scored()

    def more_triples(header: dict[str, Any], payload: bytes) -> Any:
        parts = split_parts(header, payload)
        _, parts[0] = run.agg.keys.deal(round_id=1, tensor=header["tensor"], count=6 + 1)
        return {**header, "parts": [len(p) for p in parts]}, b"".join(parts)

    run.through(_at("convert", more_triples))
    # refused as a tampered blob when parsed, before the Beaver step would find 7 for 6
    tampered = "[CRYPTO_SHARE_TAMPERED] share blob count 7 is not the expected count 6"
    with exactly(AuthorityRequestMalformed, f"copies bit conversion refused: {tampered}"):
        run.agg.copies(run.handles, round_id=1)


def test_a_bit_conversion_whose_opening_does_not_parse_is_refused() -> None:
    run = CopiesRound.scored()

    def cut(header: dict[str, Any], payload: bytes) -> Any:
        triples, opening = split_parts(header, payload)
        return {**header, "parts": [len(triples), 3]}, triples + opening[:3]

    run.through(_at("convert", cut))
    with pytest.raises(
        AuthorityRequestMalformed,
        match=r"^\[AUTHORITY_REQUEST_MALFORMED\] copies bit conversion refused: ",
    ):
        run.agg.copies(run.handles, round_id=1)


def test_count_shares_that_do_not_open_to_counts_are_refused_and_nothing_is_released() -> None:
    run = CopiesRound.scored()

    def shifted(header: dict[str, Any], payload: bytes) -> Any:
        shares = np.frombuffer(payload, dtype="<u8").copy()
        shares[0] += np.uint64(5)  # a's count would open as 6 of 3 possible
        return header, shares.tobytes()

    run.through(_at("count", shifted))
    with pytest.raises(
        AuthorityRequestMalformed, match=r"^\[AUTHORITY_REQUEST_MALFORMED\] copies counts refused: "
    ):
        run.agg.copies(run.handles, round_id=1)
    assert run.helper._copies_runs == {}
    assert run.helper.plans.tracker(1).phase == "copies"
    assert not [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]


def test_the_helper_releases_each_pair_once_and_audits_the_counts_it_opened() -> None:
    run = CopiesRound.scored()
    replies: list[tuple[dict[str, Any], int]] = []
    inner = run.agg.keys.helper

    def record(request: bytes) -> bytes:
        reply = inner(request)
        header, payload = decode_frame(reply, HELPER_REPLY)
        if header.get("step") == "copies":
            replies.append((header, len(payload)))
        return reply  # type: ignore[no-any-return]

    run.agg.keys = replace(run.agg.keys, helper=record)
    counts = {"a": 1, "b": 0, "c": 0, "d": 1}
    assert run.agg.copies(run.handles, round_id=1) == counts
    # every reply names its parts (the last comparison step's: none), the last the counts
    assert all(sum(header["parts"]) == size for header, size in replies)
    assert [header["parts"] for header, _ in replies].count([]) == 1
    last = {"step": "copies", "round_id": 1, "parts": [8 * 4], "copies": [1, 0, 0, 1]}
    assert replies[-1] == (last, 8 * 4)
    pairs = [r for r in run.helper.log if r.purpose == "distance" and r.released]
    assert [r.participant_ids for r in pairs] == [
        ("a", "b"),
        ("a", "c"),
        ("a", "d"),
        ("b", "c"),
        ("b", "d"),
        ("c", "d"),
    ]
    tracker = run.helper.plans.tracker(1)
    assert tracker.copies == counts and tracker.phase == "publication"
    (event,) = [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]
    assert event == {
        "party": "helper",
        "round_id": 1,
        "purpose": "distance",
        "step": "copies",
        "contributors": 4,
        "participant_ids": list(IDS),
        "shape": [4],
        "central_dp": False,
        "copies": counts,
        "pairs": 6,
    }
    assert run.helper._copies_runs == {}


def test_two_participants_have_one_pair_and_both_count_it() -> None:
    run = CopiesRound.scored(("a", "b"), quorum=2)  # b uploads a's matrix
    assert run.agg.copies(run.handles, round_id=1) == {"a": 1, "b": 1}
    assert run.helper.plans.tracker(1).copies == {"a": 1, "b": 1}


# -- the key authority's copies step (ckks) -------------------------------------------


def test_the_key_authority_audits_the_counts_it_sends_as_its_own_copies_release(
    tmp_path: Path,
) -> None:
    run = Round(tmp_path)  # K = 6, three uploads of one matrix
    _, copies = run.publish()
    sent = run.channel.sent
    last = [
        r for q, r in sent if decode_frame(q, KEY_AUTHORITY_REQUEST)[0]["purpose"] == "distance"
    ][-1]
    meta, raw = decode_frame(last, KEY_AUTHORITY_REPLY)  # the last pair's: the counts, float64
    counts = decode_array(meta["array"], raw)
    assert counts.dtype == np.float64 and counts.tolist() == [copies[p] for p in GATEKEEPING_IDS]
    (event,) = [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]
    assert event == {
        "party": "key_authority",
        "round_id": 1,
        "purpose": "distance",
        "step": "copies",
        "contributors": K,
        "participant_ids": GATEKEEPING_IDS,
        "shape": [K],
        "central_dp": False,
        "copies": copies,
        "pairs": K * (K - 1) // 2,
    }

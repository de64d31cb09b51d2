"""Guards of the key authority that surviving mutants showed unchecked.

``scripts/mutation gatekeepers`` changed each of these and the selected tests
stayed green: the configuration checks (``or`` -> ``and``, the boundaries and
the messages), the request parser's field checks, the dealing request's purpose
and count, and the plan fields a claim states (step, roster, centre, samples,
whitening, weights) with their refusals. Each test drives the authority's own
code paths with a request an attacker or a broken aggregator could send.
"""

from __future__ import annotations

import pytest

from crypto.ckks import generate_keys
from crypto.ckks.keys import _reserve_releases
from crypto.shares import ShareMacKey
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyAuthorityConfigInvalid,
    KeyEpochExhausted,
    ModeSetupInvalid,
)
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.parties.key_authority import (
    CentralDP,
    KeyAuthority,
    deal_request,
    plan_fields,
    plan_request,
)
from secure_fed.secure.protocol.authority_requests import DecryptionRequest
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.server_auth import ServerSigningKey
from tests.secure_fed.secure.helpers import plan


def _parse_request(header: dict[str, object]) -> tuple[object, ...]:
    """The decryption request's model, as the tuple the parser returned before it."""
    asked = DecryptionRequest.from_wire(header)
    return asked.round_id, asked.purpose, list(asked.participant_ids), asked.shape


GOOD = {"round_id": 3, "purpose": "aggregate", "participant_ids": ["a", "b"], "shape": [4, 3]}


@pytest.mark.parametrize("bad", [1, 0, -2, 2.5, "3", None])
def test_min_participants_is_an_integer_of_at_least_two(bad: object) -> None:
    with pytest.raises(
        KeyAuthorityConfigInvalid, match=rf"min_participants must be an integer >= 2, got {bad!r}"
    ):
        KeyAuthority(min_participants=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5])
def test_max_releases_is_an_integer_of_at_least_one_or_none(bad: object) -> None:
    with pytest.raises(
        KeyAuthorityConfigInvalid,
        match=rf"max_releases must be an integer >= 1 or None, got {bad!r}",
    ):
        KeyAuthority(min_participants=2, max_releases=bad)  # type: ignore[arg-type]


def test_accepted_configurations_build_their_policy() -> None:
    one = KeyAuthority(min_participants=2, max_releases=1)
    assert one.max_releases == 1 and one.policy.min_participants == 2
    assert one.plans.min_participants == 2
    assert KeyAuthority(min_participants=3).max_releases is None
    gate = InMemoryBudgetGate(epsilon=10.0, delta=1e-5)
    dp = KeyAuthority(min_participants=2, central_dp=CentralDP(noise_multiplier=1.0), budget=gate)
    assert dp.central_dp is not None and dp.budget is gate
    with pytest.raises(
        KeyAuthorityConfigInvalid, match="central_dp needs a budget gate to charge$"
    ):
        KeyAuthority(min_participants=2, central_dp=CentralDP(noise_multiplier=1.0))


def test_a_well_formed_request_header_is_parsed() -> None:
    assert _parse_request(dict(GOOD)) == (3, "aggregate", ["a", "b"], (4, 3))
    assert _parse_request({**GOOD, "round_id": 0})[0] == 0
    assert _parse_request({**GOOD, "shape": [1, 1]})[3] == (1, 1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("round_id", -1, "request needs an integer round_id >= 0"),
        ("round_id", True, "request needs an integer round_id >= 0"),
        ("round_id", "3", "request needs an integer round_id >= 0"),
        ("purpose", "secret", r"purpose 'secret' is unknown; allowed: \(.*'aggregate'.*\)"),
        ("participant_ids", [], "request needs a non-empty participant_ids list"),
        ("participant_ids", "ab", "request needs a non-empty participant_ids list"),
        ("participant_ids", ["a", 2], "request needs a non-empty participant_ids list"),
        ("shape", [4], r"request shape must be \[rows, cols\], got \[4\]"),
        ("shape", [4, 3, 1], r"request shape must be \[rows, cols\], got \[4, 3, 1\]"),
        ("shape", [4, 0], r"request shape must be \[rows, cols\], got \[4, 0\]"),
        ("shape", [4, "3"], r"request shape must be \[rows, cols\], got \[4, '3'\]"),
        ("shape", "4x3", r"request shape must be \[rows, cols\], got '4x3'"),
    ],
)
def test_a_malformed_request_header_is_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(AuthorityRequestMalformed, match=message + "$"):
        _parse_request({**GOOD, field: value})


def _dealer() -> tuple[KeyAuthority, ServerSigningKey]:
    signer = ServerSigningKey.generate("aggregator")
    return KeyAuthority(min_participants=2, aggregator=signer.identity), signer


def test_a_dealing_request_gets_the_count_it_signed() -> None:
    ka, signer = _dealer()
    keys = {"key_aggregator": ShareMacKey.generate(recipient="a")}
    keys["key_helper"] = ShareMacKey.generate(recipient="h")
    ka.handle_deal(deal_request(round_id=1, tensor="w", count=1, signer=signer), **keys)
    record = ka.log[-1]
    assert (record.round_id, record.purpose, record.kind, record.shape) == (
        1,
        "triples:w",
        "triples",
        (1,),
    )


@pytest.mark.parametrize(
    ("tensor", "count", "purpose", "message"),
    [
        ("w", 0, "triples", "a dealing request needs a count >= 1"),
        ("w", True, "triples", "a dealing request needs a count >= 1"),
        ("w", "2", "triples", "a dealing request needs a count >= 1"),
        (7, 2, "triples", "a dealing request names purpose 'triples' and a tensor"),
        ("w", 2, "range", "a dealing request names purpose 'triples' and a tensor"),
    ],
)
def test_a_malformed_dealing_request_is_refused(
    tensor: object, count: object, purpose: str, message: str
) -> None:
    ka, signer = _dealer()
    request = deal_request(
        round_id=1,
        tensor=tensor,  # type: ignore[arg-type]
        count=count,  # type: ignore[arg-type]
        signer=signer,
        purpose=purpose,
    )
    keys = {"key_aggregator": ShareMacKey.generate(recipient="a")}
    with pytest.raises(AuthorityRequestMalformed, match=message + "$"):
        ka.handle_deal(request, key_helper=ShareMacKey.generate(recipient="h"), **keys)
    assert ka.log == []


def test_plan_fields_state_what_the_claim_states() -> None:
    score = {
        "step": "score",
        "roster": [["alice", 1], "bob"],
        "centre": ["a", ["b", 2]],
        "samples": 5,
        "op": "score",
        "whitening": [[1, "0.5"], [0.25, "2"]],
    }
    assert plan_fields(score) == {
        "step": "score",
        "roster": ("alice", "bob"),
        "centre": ("a", "b"),
        "samples": 5,
        "whitening": ((1.0, 0.5), (0.25, 2.0)),
    }
    summed = {"op": "weighted_sum", "weights": ["0.25", 0.75, 1], "samples": 9, "step": 4}
    assert plan_fields(summed) == {"weights": (0.25, 0.75, 1.0)}  # no centre: no samples
    assert plan_fields({"centre": ["a"], "samples": "5"}) == {"centre": ("a",)}


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        ({"op": "weighted_sum"}, "claim plan fields refused: 'weights'"),
        ({"op": "weighted_sum", "weights": 3}, "claim plan fields refused: "),
        ({"centre": [], "op": "score"}, "claim plan fields refused: 'whitening'"),
        ({"op": "weighted_sum", "weights": ["1e400"]}, "claim number '1e400' is not an exact"),
        ({"op": "weighted_sum", "weights": [True]}, "claim number True is not an exact decimal"),
        ({"op": "weighted_sum", "weights": [None]}, "claim number None is not an exact decimal"),
    ],
)
def test_malformed_plan_fields_are_refused(claim: dict[str, object], message: str) -> None:
    with pytest.raises(AuthorityRequestMalformed, match=message):
        plan_fields(claim)


def _gatekeeper() -> tuple[KeyAuthority, ServerSigningKey, MemoryAuditSink]:
    signer, sink = ServerSigningKey.generate("aggregator"), MemoryAuditSink()
    ka = KeyAuthority(
        min_participants=2,
        aggregator=signer.identity,
        audit=sink,
        enrolled=frozenset({"a", "b", "c"}),
        upload_shape=(4, 3),
    )
    return ka, signer, sink


def _ask(round_id: int, contributors: tuple[str, ...]) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=round_id,
        purpose="aggregate",
        contributors=contributors,
        value_kind="aggregate",
        shape=(4, 3),
    )


def test_without_a_plan_nothing_is_released_and_the_refusal_names_the_authority() -> None:
    ka, _, sink = _gatekeeper()
    with pytest.raises(DecryptionRefused, match="no release plan was fixed for round 2"):
        ka.policy.check(_ask(2, ("a", "b", "c")))
    refused = ka.log[-1]  # the authority's own journal holds the refusal
    assert (refused.round_id, refused.purpose, refused.released) == (2, "aggregate", False)
    assert sink.events[-1] == (
        "access.denied",
        {
            "party": "key_authority",
            "round_id": 2,
            "purpose": "aggregate",
            "contributors": 3,
            "reason": "no release plan was fixed for round 2",
        },
    )


def test_a_plan_must_match_the_upload_shape_and_the_enrolled_roster() -> None:
    ka, signer, sink = _gatekeeper()
    with pytest.raises(ModeSetupInvalid, match=r"upload shape \(5, 3\) is not \(4, 3\)"):
        ka.install_plan(plan_request(plan(2, (5, 3), scored=False), signer=signer))
    ka.install_plan(plan_request(plan(3, (4, 3), scored=False), signer=signer))
    with pytest.raises(DecryptionRefused, match=r"participants \['z'\] are not enrolled"):
        ka.policy.check(_ask(3, ("a", "b", "z")))
    assert sink.events[-1][1]["reason"] == "participants ['z'] are not enrolled"


def test_max_releases_may_not_exceed_what_the_preset_floods_for() -> None:
    keys = generate_keys("CKKS_SCORING")
    sized = keys.preset.max_decryptions
    with pytest.raises(
        KeyAuthorityConfigInvalid,
        match=rf"max_releases {sized + 1} exceeds the {sized} decryptions CKKS_SCORING floods for$",
    ):
        KeyAuthority(min_participants=2, keys=keys, max_releases=sized + 1)
    assert KeyAuthority(min_participants=2, keys=keys, max_releases=sized).release_limit == sized
    assert KeyAuthority(min_participants=2, keys=keys).release_limit == sized
    assert KeyAuthority(min_participants=2, keys=keys, max_releases=5).release_limit == 5


def test_a_request_names_one_of_the_authoritys_key_epochs() -> None:
    keys, pub = generate_keys("CKKS_SCORING"), generate_keys("CKKS_SCORING")
    ka = KeyAuthority(min_participants=2, keys=keys, publication_keys=pub)
    assert ka._epoch_named(None) is keys
    assert ka._epoch_named(keys.fingerprint.hex()) is keys
    assert ka._epoch_named(pub.fingerprint.hex()) is pub
    with pytest.raises(
        AuthorityRequestMalformed, match="request names no key epoch of this authority: 'ab'$"
    ):
        ka._epoch_named("ab")
    alone = KeyAuthority(min_participants=2, keys=keys)
    with pytest.raises(AuthorityRequestMalformed, match="no key epoch"):
        alone._epoch_named(pub.fingerprint.hex())


def test_an_epoch_that_released_its_limit_is_refused_and_audited() -> None:
    keys, sink = generate_keys("CKKS_SCORING"), MemoryAuditSink()
    ka = KeyAuthority(min_participants=2, keys=keys, max_releases=1, audit=sink)
    ka._check_epoch(_ask(4, ("a", "b")), keys)  # nothing released yet
    _reserve_releases(keys, 1)  # the counter crypto.ckks advances on each decryption
    reason = f"key epoch {keys.fingerprint.hex()[:16]} released 1 of 1 decryptions; rotate the keys"
    with pytest.raises(KeyEpochExhausted, match=f"^.*round 4, aggregate: {reason}$"):
        ka._check_epoch(_ask(4, ("a", "b")), keys)
    assert sink.events[-1] == (
        "access.denied",
        {
            "party": "key_authority",
            "round_id": 4,
            "purpose": "aggregate",
            "code": "KEY_AUTHORITY_EPOCH_EXHAUSTED",
            "reason": reason,
        },
    )


def test_each_step_is_decrypted_only_under_its_own_epoch() -> None:
    keys, pub, sink = (
        generate_keys("CKKS_SCORING"),
        generate_keys("CKKS_SCORING"),
        MemoryAuditSink(),
    )
    ka = KeyAuthority(min_participants=2, keys=keys, publication_keys=pub, audit=sink)
    ask = _ask(5, ("a", "b"))
    ka._check_step_epoch(ask, "publication", pub)
    ka._check_step_epoch(ask, "score", keys)
    refusals = [
        (
            "publication",
            keys,
            "the plan's publication is decrypted only under the publication epoch, not the scoring",
        ),
        (
            "score",
            pub,
            "the plan's score is decrypted only under the scoring epoch, not the publication",
        ),
    ]
    for step, used, reason in refusals:
        with pytest.raises(DecryptionRefused, match=f"round 5, aggregate: {reason}$"):
            ka._check_step_epoch(ask, step, used)
        assert sink.events[-1][1]["reason"] == reason
        assert sink.events[-1][1]["code"] == "KEY_AUTHORITY_DECRYPTION_REFUSED"
    single = KeyAuthority(min_participants=2, keys=keys)  # one epoch: nothing to mix up
    single._check_step_epoch(ask, "publication", keys)


def test_plans_and_range_checks_keep_their_own_freshness_windows() -> None:
    ka, signer, _ = _gatekeeper()
    keys = {
        "key_aggregator": ShareMacKey.generate(recipient="a"),
        "key_helper": ShareMacKey.generate(recipient="h"),
    }
    ka.handle_deal(deal_request(round_id=7, tensor="w", count=1, signer=signer), **keys)
    # decryptions and triples have reached round 7; a plan for round 3 is still fresh
    ka.install_plan(plan_request(plan(3, (4, 3), scored=False), signer=signer))
    assert 3 in ka.plans.trackers
    # a range check belongs to no round: one signed at round 2 is served after round 7
    for rnd in (5, 2):  # served in any order of rounds
        late = deal_request(round_id=rnd, tensor="u1", count=2, signer=signer, purpose="range")
        ka.handle_deal_range(late, **keys)
    assert (ka.log[-1].kind, ka.log[-1].purpose, ka.log[-1].round_id) == ("range", "range:u1", 0)

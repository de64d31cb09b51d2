"""More guards of the key authority that surviving mutants showed unchecked.

``scripts/mutation gatekeepers`` changed each of these and the selected tests
stayed green (docs/benchmarks.md, "Mutation testing", fourth run): the refusal of
a request that is no step of the round's plan (behind the plan rule, a second
line the policy normally answers first), the moments' shape check, the ``op`` an
unauthenticated dealing request is audited under, and the central noise's bound
(the configured one, not the request's) and ledger round.
"""

from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import pack_class_major, weighted_sum
from crypto.shares import ShareMacKey
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyEpochExhausted,
    ServerRequestUnauthenticated,
)
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.parties.central_dp import central_sensitivity
from secure_fed.secure.parties.key_authority import (
    CentralDP,
    KeyAuthority,
    deal_request,
    decryption_request,
    plan_request,
)
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import KEY_AUTHORITY_REPLY, decode_array, decode_frame
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import plan, population


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


def _ask(purpose: str, shape: tuple[int, ...], round_id: int = 2) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=round_id,
        purpose=purpose,
        contributors=("a", "b", "c"),
        value_kind="aggregate",
        shape=shape,
    )


def test_a_request_that_is_no_step_of_the_plan_is_refused_and_audited() -> None:
    ka, signer, sink = _gatekeeper()
    message = (
        r"^\[KEY_AUTHORITY_DECRYPTION_REFUSED\] round 2, aggregate: "
        r"the request is no step of the round's plan$"
    )
    with pytest.raises(DecryptionRefused, match=message):
        ka._release_step(_ask("aggregate", (4, 3)))  # no plan for round 2
    assert sink.events[-1] == (
        "access.denied",
        {
            "party": "key_authority",
            "round_id": 2,
            "purpose": "aggregate",
            "code": "KEY_AUTHORITY_DECRYPTION_REFUSED",
            "reason": "the request is no step of the round's plan",
        },
    )
    ka.install_plan(plan_request(plan(2, (4, 3)), signer=signer))
    with pytest.raises(DecryptionRefused, match=r"round 2, mean: the request is no step of"):
        ka._release_step(_ask("mean", (4, 3)))  # a plan, but no step opens a mean
    assert ka._release_step(_ask("aggregate", (4, 3))) == "publication"


def test_moments_are_the_c_c_plus_1_over_2_slot_sums_only() -> None:
    ka, signer, sink = _gatekeeper()
    ka.install_plan(plan_request(plan(2, (4, 3)), signer=signer))
    assert ka._release_step(_ask("moments", (1, 6))) == "moments"
    for shape in ((4, 3), (1, 5), (6, 1), (1, 7)):
        with pytest.raises(
            DecryptionRefused,
            match=r"^\[KEY_AUTHORITY_DECRYPTION_REFUSED\] round 2, moments: "
            rf"moments are 6 sums, not "
            rf"\({shape[0]}, {shape[1]}\)$",
        ):
            ka._release_step(_ask("moments", shape))
    assert sink.events[-1][1]["code"] == "KEY_AUTHORITY_DECRYPTION_REFUSED"


@pytest.mark.parametrize(("purpose", "op"), [("triples", "triples"), ("range", "range")])
def test_an_unauthenticated_dealing_request_is_audited_under_its_operation(
    purpose: str, op: str
) -> None:
    ka, _, sink = _gatekeeper()
    intruder = ServerSigningKey.generate("aggregator")  # the right name, another key
    request = deal_request(round_id=1, tensor="w", count=2, signer=intruder, purpose=purpose)
    keys = {"key_aggregator": ShareMacKey.generate(recipient="a")}
    keys["key_helper"] = ShareMacKey.generate(recipient="h")
    deal = ka.handle_deal if purpose == "triples" else ka.handle_deal_range
    with pytest.raises(ServerRequestUnauthenticated, match="the request's SM2 signature is wrong$"):
        deal(request, **keys)
    name, event = sink.events[-1]
    assert (name, event["party"], event["op"], event["code"]) == (
        "access.denied",
        "key_authority",
        op,
        "SERVER_REQUEST_UNAUTHENTICATED",
    )
    assert ka.log == []


def test_central_noise_follows_the_configured_bound_and_is_charged_to_the_round(ckks) -> None:  # type: ignore[no-untyped-def]
    """An aggregator that claims a tiny bound gets no less noise than the configured one."""
    dep, _ = ckks
    signer = dep.server_keys().signer
    preds = population(3, N, C, seed=31)
    ids = sorted(preds)
    ups = {p: pack_class_major(dep.public_context, m) for p, m in preds.items()}
    gate = InMemoryBudgetGate(epsilon=100.0, delta=1e-5)
    for p in ids:
        gate.set_budget(p, "private-train", epsilon=100.0)
    ka = KeyAuthority(
        min_participants=3,
        central_dp=CentralDP(noise_multiplier=5.0, bound=8.0),
        budget=gate,
        audit=MemoryAuditSink(),
        aggregator=signer.identity,
    )
    ka.keys = dep.authority.keys  # the deployment's key epoch, a second authority object
    ka.install_plan(plan_request(plan(41, (N, C), scored=False), signer=signer))
    claim: dict[str, object] = {
        "op": "weighted_sum",
        "uploads": [[p, "0" * 64] for p in ids],
        "weights": [1 / 3] * 3,
    }
    request = decryption_request(
        round_id=41,
        purpose="aggregate",
        participant_ids=ids,
        shape=(N, C),
        ciphertext=weighted_sum([ups[p] for p in ids], [1 / 3] * 3).to_bytes(),
        signer=signer,
        claim=claim,
        bound=0.5,  # the aggregator's claim, 16 times below the configured bound
        max_weight=1 / 3,
    )
    head, raw = decode_frame(ka.handle(request), KEY_AUTHORITY_REPLY, max_bytes=1 << 30)
    noise = decode_array(head["array"], raw) - np.mean([preds[p] for p in ids], axis=0)
    max_weight = ka.plans.tracker(41).plan.max_weight  # type: ignore[union-attr]
    sensitivity = central_sensitivity(size=N * C, bound=8.0, max_weight=max_weight)
    assert np.std(noise) == pytest.approx(5.0 * sensitivity, rel=0.1)  # 3000 draws
    for p in ids:
        (charge,) = gate.events(p, "private-train")
        assert charge.round_id == "r41-central"


def test_a_ciphertext_that_does_not_parse_is_refused_with_the_reason(ckks) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    signer = dep.server_keys().signer
    preds = population(3, N, C, seed=32)
    ids = sorted(preds)
    ups = [pack_class_major(dep.public_context, m) for m in preds.values()]
    ka = KeyAuthority(min_participants=3, aggregator=signer.identity, audit=MemoryAuditSink())
    ka.keys = dep.authority.keys
    ka.install_plan(plan_request(plan(42, (N, C), scored=False), signer=signer))
    whole = weighted_sum(ups, [1 / 3] * 3).to_bytes()
    claim: dict[str, object] = {
        "op": "weighted_sum",
        "uploads": [[p, "0" * 64] for p in ids],
        "weights": [1 / 3] * 3,
    }
    request = decryption_request(
        round_id=42,
        purpose="aggregate",
        participant_ids=ids,
        shape=(N, C),
        ciphertext=whole[:-16],  # the header reads, the last ciphertext does not
        signer=signer,
        claim=claim,
    )
    with pytest.raises(
        AuthorityRequestMalformed,
        match=r"^\[AUTHORITY_REQUEST_MALFORMED\] ciphertext refused: \[CRYPTO_[A-Z_]+\] .+",
    ):
        ka.handle(request)
    assert not any(r.released for r in ka.log)


def test_a_publication_that_would_cross_the_epochs_limit_is_refused_by_name(ckks) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    signer = dep.server_keys().signer
    preds = population(3, N, C, seed=33)
    ids = sorted(preds)
    whole = weighted_sum(
        [pack_class_major(dep.public_context, m) for m in preds.values()], [1 / 3] * 3
    )
    used = dep.authority.keys.releases  # earlier tests of this module decrypted too
    limit = used + len(whole.vectors) - 1  # one ciphertext short of the publication
    ka = KeyAuthority(
        min_participants=3, aggregator=signer.identity, audit=MemoryAuditSink(), max_releases=limit
    )
    ka.keys = dep.authority.keys
    ka.install_plan(plan_request(plan(43, (N, C), scored=False), signer=signer))
    claim: dict[str, object] = {
        "op": "weighted_sum",
        "uploads": [[p, "0" * 64] for p in ids],
        "weights": [1 / 3] * 3,
    }
    request = decryption_request(
        round_id=43,
        purpose="aggregate",
        participant_ids=ids,
        shape=(N, C),
        ciphertext=whole.to_bytes(),
        signer=signer,
        claim=claim,
    )
    epoch = ka.keys.fingerprint.hex()[:16]
    with pytest.raises(
        KeyEpochExhausted,
        match=r"^\[KEY_AUTHORITY_EPOCH_EXHAUSTED\] round 43, aggregate: "
        rf"\[CRYPTO_RELEASE_LIMIT_REACHED\] key epoch {epoch} released {used} of "
        rf"{limit} decryptions; {len(whole.vectors)} more are asked: rotate the keys$",
    ):
        ka.handle(request)

"""The aggregator writes each round's plan; the gatekeepers enforce the consortium's policy.

The attacker runs the aggregator, with its real signing key and channel keys, and
writes the plan it would like the gatekeepers to enforce: a weight cap of 1 (one
publication weighted ``(1 - 5e, e, ...)`` opens one participant's whole matrix), no
scoring (the roster and exclusions are then its own choice), an exclusion threshold
below every score (it decides whom to leave out), or a quorum below the consortium's.
Before the policy each of these was installed. Now both gatekeepers, in both modes,
refuse each plan with ``PLAN_OUTSIDE_POLICY`` and audit the refusal; and an aggregator
that skips its own plan check and asks for a ``(1 - 5e, e, ...)`` publication under the
default plan is refused by the gatekeeper. The policy itself is signed by every
participant: a document one participant did not sign, or signed differently, is not
pinned; a newer one takes every participant's signature; a restarted gatekeeper does
not go back to an older policy.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.sm import SM2PrivateKey
from secure_fed.errors import (
    DecryptionRefused,
    ModeSetupInvalid,
    OpeningRefused,
    PlanOutsidePolicy,
    PolicyInvalid,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy, PolicyPin, SignedPolicy
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties import helper as helper_party
from secure_fed.secure.parties import key_authority
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.release_plan import ReleasePlan
from tests.secure_fed.secure.helpers import population

N, C, BOUND = 300, 10, 8.0
IDS = ["a", "b", "c", "d", "e", "f"]
QUORUM = 3


def _deploy(mode: str, sink: MemoryAuditSink) -> SecureDeployment:
    """The default consortium policy of the roster (requires scoring, cap 1/3)."""
    return SecureDeployment.create(
        mode=mode, shape=(N, C), participant_ids=IDS, min_participants=QUORUM, audit=sink
    )


@pytest.fixture(scope="module")
def ckks() -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    return _deploy("ckks", sink), sink


@pytest.fixture
def deployment(request, ckks):  # type: ignore[no-untyped-def]
    if request.param == "ckks":
        return ckks
    sink = MemoryAuditSink()
    return _deploy("shares", sink), sink


def _plan(round_id: int, **changes: Any) -> ReleasePlan:
    agg_plan = ReleasePlan.for_round(
        round_id=round_id,
        min_participants=QUORUM,
        shape=(N, C),
        scoring=_scoring(),
    )
    return replace(agg_plan, **changes)


def _install(dep: SecureDeployment, the_plan: ReleasePlan) -> None:
    """Send ``the_plan`` to the mode's gatekeeper as the enrolled aggregator does."""
    keys = dep.server_keys()  # type: ignore[attr-defined]
    if dep.mode == "ckks":
        dep.authority.install_plan(key_authority.plan_request(the_plan, signer=keys.signer))  # type: ignore[attr-defined]
    else:
        dep.helper.handle(helper_party.plan_request(the_plan, key=keys.request_key))  # type: ignore[attr-defined]


def _scoring():  # type: ignore[no-untyped-def]
    from secure_fed.secure.scoring.mahalanobis import ScoringConfig

    return ScoringConfig()


BAD_PLANS = {
    "weight cap 1.0": ({"max_weight": 1.0}, "weight cap 1.0 exceeds the policy's"),
    "no scoring": ({"scored": False, "ranking": False}, "requires the scoring steps"),
    "no ranking": ({"ranking": False}, "requires the ranking step"),
    "threshold below every score": (
        {"exclude_above": -1e300},
        "is below the policy's floor 27.877",
    ),
    "quorum below the policy's": (
        {"min_participants": 2, "max_weight": 0.5},
        "quorum 2 is below the policy's 3",
    ),
    "scores over a few rows": ({"moment_samples": 8}, "8 moment rows"),
}


@pytest.mark.parametrize("deployment", ["ckks", "shares"], indirect=True)
@pytest.mark.parametrize("name", sorted(BAD_PLANS))
def test_a_plan_outside_the_policy_is_refused_and_audited(deployment, name: str) -> None:  # type: ignore[no-untyped-def]
    dep, sink = deployment
    changes, reason = BAD_PLANS[name]
    round_id = 100 + sorted(BAD_PLANS).index(name)
    with pytest.raises(PlanOutsidePolicy, match=reason):
        _install(dep, _plan(round_id, **changes))  # the aggregator's signed request
    party = "key_authority" if dep.mode == "ckks" else "helper"
    denied = [e for e in sink.named("access.denied") if e.get("op") == "plan"]
    assert denied[-1]["party"] == party and denied[-1]["code"] == "PLAN_OUTSIDE_POLICY"
    assert reason in str(denied[-1]["reason"])
    assert not [e for e in sink.named("plan.installed") if e["round_id"] == round_id]
    # the same round then takes a plan within the policy: nothing was installed before
    _install(dep, _plan(round_id))
    assert [e for e in sink.named("plan.installed") if e["round_id"] == round_id]


@pytest.mark.parametrize("deployment", ["ckks", "shares"], indirect=True)
def test_a_publication_that_singles_one_participant_out_is_refused(deployment) -> None:  # type: ignore[no-untyped-def]
    """The aggregator skips its own plan check; the gatekeeper still applies the policy's cap."""
    dep, sink = deployment
    round_id = 200
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(_plan(round_id))
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=7).values(), strict=True))
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    agg.score(handles, round_id=round_id)
    tracker = agg._plans[round_id]
    tracker.require = lambda *args, **kwargs: None  # the attacker's aggregator checks nothing
    eps = 1e-3
    weights = {p: eps for p in IDS} | {"a": 1 - eps * (len(IDS) - 1)}
    refusal = DecryptionRefused if dep.mode == "ckks" else OpeningRefused
    with pytest.raises(refusal, match="exceed the public cap"):
        agg.reveal(agg.weighted_sum(handles, weights), round_id=round_id)
    party = "key_authority" if dep.mode == "ckks" else "helper"
    assert not [
        e
        for e in sink.named("decryption.released")
        if e.get("round_id") == round_id and e.get("purpose") == "aggregate"
    ]
    assert any(
        e.get("party") == party and "exceed the public cap" in str(e.get("reason"))
        for e in sink.named("access.denied")
    )
    # the honest publication of the same round (equal weights) is then released
    tracker.require = type(tracker).require.__get__(tracker)  # type: ignore[attr-defined]
    out = agg.reveal(agg.weighted_sum(handles, dict.fromkeys(IDS, 1 / 6)), round_id=round_id)
    clipped = np.mean([np.clip(m, -BOUND, BOUND) for m in preds.values()], axis=0)
    assert np.abs(out - clipped).max() < 1e-2


# -- the document and its signatures -------------------------------------------------


def _keys() -> dict[str, SM2PrivateKey]:
    return {p: SM2PrivateKey.generate() for p in IDS}


@pytest.fixture(scope="module")
def keys() -> dict[str, SM2PrivateKey]:
    return _keys()


def _policy(**changes: Any) -> ConsortiumPolicy:
    fields: dict[str, Any] = {"participant_ids": tuple(IDS), "shape": (N, C), "quorum": QUORUM}
    return ConsortiumPolicy(**(fields | changes))


def test_every_participant_must_sign_with_its_enrolled_key(keys) -> None:  # type: ignore[no-untyped-def]
    public = {p: k.public_key for p, k in keys.items()}
    signed = SignedPolicy.sign(_policy(), keys)
    assert signed.verify(public) == _policy()
    one_short = dict(signed.signatures)
    del one_short["c"]
    with pytest.raises(PolicyInvalid, match=r"missing \['c'\]"):
        SignedPolicy(signed.document, one_short).verify(public)
    impostor = dict(signed.signatures) | {"c": SM2PrivateKey.generate().sign(signed.document)}
    with pytest.raises(PolicyInvalid, match="signature of 'c' does not verify"):
        SignedPolicy(signed.document, impostor).verify(public)
    # the aggregator rewrites the document (a higher cap) and keeps the signatures
    raised = _policy(quorum=2, max_weight=0.5).to_bytes()
    with pytest.raises(PolicyInvalid, match="does not verify"):
        SignedPolicy(raised, signed.signatures).verify(public)
    with pytest.raises(PolicyInvalid, match="not the enrolled ones"):
        signed.verify({p: k for p, k in public.items() if p != "f"})
    with pytest.raises(PolicyInvalid, match="have no key"):
        SignedPolicy.sign(_policy(), {p: k for p, k in keys.items() if p != "f"})
    # a deployment refuses to pin a policy one participant did not sign
    with pytest.raises(PolicyInvalid, match=r"missing \['c'\]"):
        SecureDeployment.create(
            mode="shares",
            shape=(N, C),
            participant_ids=IDS,
            min_participants=QUORUM,
            policy=SignedPolicy(signed.document, one_short),
            participant_keys=public,
        )


def test_the_document_is_canonical_and_bounded() -> None:
    policy = _policy()
    assert ConsortiumPolicy.from_bytes(policy.to_bytes()) == policy
    data = json.loads(policy.to_bytes())
    assert data["max_weight"] == repr(1 / 3) and data["format"] == "secure-fed-policy/1"
    spaced = json.dumps(data, indent=1).encode()
    with pytest.raises(PolicyInvalid, match="canonical"):
        ConsortiumPolicy.from_bytes(spaced)
    with pytest.raises(PolicyInvalid, match="64 KiB"):
        ConsortiumPolicy.from_bytes(b" " * (64 * 1024 + 1))
    for bad in (b"not json", b"[]", b'{"format":"other"}'):
        with pytest.raises(PolicyInvalid):
            ConsortiumPolicy.from_bytes(bad)
    with pytest.raises(PolicyInvalid):
        SignedPolicy.from_json(b'{"document": 3}')


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_weight": 0.5}, "max_weight"),  # above 1 / quorum
        ({"max_weight": 0.0}, "max_weight"),
        ({"quorum": 1}, "quorum"),
        ({"quorum": 7}, "quorum"),
        ({"weight_floor": 1e-9}, "weight_floor"),
        ({"exclude_quantile": 0.4}, "exclude_quantile"),
        ({"scored": False}, "ranking"),  # ranking without scoring
        ({"copies": True, "scored": False, "ranking": False}, "copies"),
        ({"version": 0}, "version"),
    ],
)
def test_a_policy_that_opens_more_is_not_a_policy(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyInvalid, match=field):
        _policy(**changes)


def test_a_newer_policy_takes_every_signature_and_is_audited(keys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    public = {p: k.public_key for p, k in keys.items()}
    sink = MemoryAuditSink()
    journal = PlanJournal(tmp_path / "plans.db")
    pin = PolicyPin(
        SignedPolicy.sign(_policy(), keys), public, party="helper", audit=sink, journal=journal
    )
    assert sink.named("policy.pinned")[0]["signers"] == sorted(IDS)
    stricter = _policy(version=2, copies=True)
    unsigned = SignedPolicy.sign(stricter, keys)
    partial = SignedPolicy(
        unsigned.document, {p: s for p, s in unsigned.signatures.items() if p != "a"}
    )
    with pytest.raises(PolicyInvalid, match=r"missing \['a'\]"):
        pin.amend(partial)
    with pytest.raises(PolicyInvalid, match="not newer"):
        pin.amend(SignedPolicy.sign(_policy(), keys))
    denied = [e for e in sink.named("access.denied") if e.get("op") == "policy"]
    assert [e["code"] for e in denied] == ["POLICY_INVALID", "POLICY_INVALID"]
    assert pin.policy.version == 1
    assert pin.amend(unsigned) == stricter
    changed = sink.named("policy.changed")[-1]
    assert (changed["version"], changed["previous_version"]) == (2, 1)
    assert changed["policy_sm3"] == stricter.sm3
    # a plan the new policy forbids (no copy detection) is refused from now on
    with pytest.raises(PlanOutsidePolicy, match="near-copy detection"):
        pin.policy.require_plan(_plan(1))


def test_a_restarted_gatekeeper_keeps_its_newest_policy(keys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    public = {p: k.public_key for p, k in keys.items()}
    first = SignedPolicy.sign(_policy(), keys)
    newer = SignedPolicy.sign(_policy(version=2), keys)
    PolicyPin(newer, public, journal=PlanJournal(tmp_path / "plans.db"))
    # restarted with the older (laxer) file: refused to start
    with pytest.raises(PolicyInvalid, match="pinned policy version 2"):
        PolicyPin(first, public, journal=PlanJournal(tmp_path / "plans.db"))
    # another document under the same version: refused too
    other = SignedPolicy.sign(_policy(version=2, consortium="other"), keys)
    with pytest.raises(PolicyInvalid, match="pinned policy version 2"):
        PolicyPin(other, public, journal=PlanJournal(tmp_path / "plans.db"))
    # the same policy again: resumed
    assert PolicyPin(newer, public, journal=PlanJournal(tmp_path / "plans.db")).policy.version == 2


def test_a_gatekeeper_configured_against_its_policy_does_not_start(keys) -> None:  # type: ignore[no-untyped-def]
    from secure_fed.secure.parties.key_authority import KeyAuthority

    pin = PolicyPin(SignedPolicy.sign(_policy(), keys), {p: k.public_key for p, k in keys.items()})
    with pytest.raises(ModeSetupInvalid, match="not the policy's quorum"):
        KeyAuthority(min_participants=2, consortium=pin)
    with pytest.raises(ModeSetupInvalid, match="enrolled participants are not the policy's"):
        KeyAuthority(min_participants=QUORUM, consortium=pin, enrolled=frozenset(IDS[:4]))
    with pytest.raises(ModeSetupInvalid, match="upload shape"):
        KeyAuthority(min_participants=QUORUM, consortium=pin, upload_shape=(N, 4))


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_a_federation_pins_the_policy_its_participants_signed(mode: str, tmp_path: Path) -> None:
    """The demo's path: the policy is signed by every participant's envelope key, pinned by
    the mode's gatekeeper, and the engine's plans lie within it (cap 1 / quorum)."""
    from secure_fed.federation.config import FederationConfig
    from secure_fed.federation.federation import Federation
    from secure_fed.federation.store import JsonFileRoundStore
    from secure_fed.learning.budget_gate import InMemoryBudgetGate
    from secure_fed.learning.data import load_task

    config = FederationConfig(
        participants=4, rounds=1, mode=mode, architectures=("logreg",), baseline=False
    )
    fed = Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=InMemoryBudgetGate(epsilon=20.0, delta=config.delta),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
    )
    ids = sorted(m.participant.participant_id for m in fed.members)
    pinned = fed.audit.named("policy.pinned")  # type: ignore[attr-defined]
    assert [e["party"] for e in pinned] == ["key_authority" if mode == "ckks" else "helper"]
    assert pinned[0]["signers"] == ids
    document = ConsortiumPolicy.from_bytes(fed.consortium.document)
    assert pinned[0]["policy_sm3"] == document.sm3
    assert (document.quorum, document.cap) == (config.quorum(), 1 / config.quorum())
    assert document.scored and document.ranking
    plan = fed.engine._release_plan(fed.round_config(1))
    assert document.plan_reason(plan) is None

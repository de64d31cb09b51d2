"""The gatekeepers never release outside the round's plan, whatever the order of requests.

Hypothesis state machines send the key authority (CKKS) and the shares helper
sequences of requests in any order: plans fixed or not, rounds repeated,
contributors repeated or too few, a participant's own upload, purposes outside
a publication-only plan, zero and oversized weights, uploads reused across
rounds. After every step the gatekeeper's own log must hold only releases the
plan allowed: a fixed plan for the round, one publication per round over at
least ``MIN`` distinct enrolled participants with weights in ``(0, 1]``, and
(helper) an upload opened in one round only. A well-formed publication on a
fresh planned round must be granted, so a gatekeeper that refuses everything
fails too. Settings stay modest (CI runs them).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from crypto.ckks import pack_class_major, weighted_sum
from crypto.errors import CryptoError
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    ReleaseRefused,
    ServerRequestReplayed,
    UploadMalformed,
)
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.inprocess.shares import SharesDeployment
from secure_fed.secure.parties.helper import reply_array
from secure_fed.secure.parties.key_authority import (
    KeyAuthority,
    decryption_request,
    plan_request,
)
from secure_fed.wire import SHARES_UPLOAD, decode_frame
from tests.secure_fed.secure.helpers import (
    BOUND,
    install_helper_plan,
    plan,
    population,
    publication_only,
)
from tests.secure_fed.secure.signed_requests import signed

N, C, MIN = 16, 3, 3
IDS = [f"p{j:02d}" for j in range(5)]
ROUNDS = st.integers(min_value=1, max_value=2)
#: A plan's public weight cap: a round planned twice with another cap is refused, and a
#: cap above the policy's (1 / MIN) is refused whatever the round.
CAPS = st.sampled_from([1.0, 0.5, 1 / 3, 0.25])
MEMBERS = st.lists(st.sampled_from(IDS), min_size=1, max_size=6) | st.lists(
    st.sampled_from(IDS), min_size=MIN, max_size=5
)
#: Enough distinct participants for a publication.
DISTINCT = st.lists(st.sampled_from(IDS), min_size=MIN, max_size=5, unique=True)
#: A weight vector's shape: uniform, or uniform with one weight replaced by a bad value.
ODD_WEIGHT = st.sampled_from([None, 0.0, 1.5, -0.25])
EXPECTED = (
    ReleaseRefused,
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    UploadMalformed,
    ServerRequestReplayed,
)
SETTINGS = settings(
    max_examples=12,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _within_cap(count: int, cap: float | None) -> bool:
    """Equal weights over ``count`` fit the plan's cap (a cap of 1/4 refuses three members)."""
    return cap is not None and 1.0 / count <= cap * (1.0 + 1e-12)


def _weights(count: int, odd: float | None) -> list[float]:
    weights = [1.0 / count] * count
    if odd is not None:
        weights[-1] = odd
    return weights


def _check_log(log: list[Any], planned: dict[int, float], enrolled: set[str]) -> None:
    """What a gatekeeper released: planned rounds, one publication each, enough distinct."""
    released = [r for r in log if r.released and r.purpose in ("aggregate", "mean", "moments")]
    rounds = [r.round_id for r in released]
    assert len(rounds) == len(set(rounds)), f"two publications in one round: {rounds}"
    for row in released:
        ids = row.participant_ids
        assert row.purpose == "aggregate", row  # the plans are publication-only
        assert row.round_id in planned, f"round {row.round_id} released without a plan"
        assert len(set(ids)) == len(ids) >= MIN and set(ids) <= enrolled, ids
        cap = planned[row.round_id]
        assert row.weights is not None and all(0 < w <= cap for w in row.weights), row.weights
    assert not [r for r in log if r.released and r.purpose == "score"]


# -- the key authority ---------------------------------------------------------------


@functools.cache
def _ckks() -> tuple[SecureDeployment, dict[str, Any], dict[str, np.ndarray]]:
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=MIN,
        policy=publication_only(IDS, (N, C), quorum=MIN),
    )
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=11).values(), strict=True))
    ups = {p: pack_class_major(dep.authority.keys.public_context, m) for p, m in preds.items()}  # type: ignore[union-attr]
    return dep, ups, preds


class KeyAuthorityMachine(RuleBasedStateMachine):
    """Requests to one key authority (a fresh one per run, the deployment's key epoch)."""

    def __init__(self) -> None:
        super().__init__()
        self.dep, self.ups, self.preds = _ckks()
        self.signer = self.dep.server_keys().signer
        self.ka = KeyAuthority(
            min_participants=MIN,
            keys=self.dep.authority.keys,  # type: ignore[attr-defined]
            aggregator=self.signer.identity,
            enrolled=frozenset(IDS),
            upload_shape=(N, C),
            consortium=self.dep.authority.consortium,  # type: ignore[attr-defined]
        )
        self.planned: dict[int, float] = {}  # round -> the plan's weight cap
        self.published: set[int] = set()
        # each authenticated channel serves rounds in order: an older round is a replay
        self.decrypt_round = self.plan_round = 0

    def _send(
        self, round_id: int, purpose: str, ids: list[str], ct: bytes, weights: list[float]
    ) -> bool:
        op = "weighted_sum" if purpose == "aggregate" else purpose
        claim: dict[str, object] = {"op": op, "uploads": [[p, "0" * 64] for p in ids]}
        if op == "weighted_sum":
            claim["weights"] = weights
        if op in ("moments", "score"):
            claim.update(center_sm3="0" * 64, samples=1, whitening=[[1.0]])
        request = decryption_request(
            round_id=round_id,
            purpose=purpose,
            participant_ids=ids,
            shape=(N, C),
            ciphertext=ct,
            claim=claim,
            signer=self.signer,
        )
        fresh = round_id >= self.decrypt_round
        self.decrypt_round = max(self.decrypt_round, round_id)
        try:
            self.ka.handle(request)
        except EXPECTED:
            return False
        assert fresh, f"round {round_id} served after round {self.decrypt_round}"
        return True

    @initialize()
    def first_plan(self) -> None:
        """Round 1 starts planned (so publications are reached early), cap 1/3."""
        self.install_plan(1, 1 / 3)

    @rule(round_id=ROUNDS, cap=CAPS)
    def install_plan(self, round_id: int, cap: float) -> None:
        the_plan = plan(round_id, (N, C), scored=False, max_weight=cap)
        fresh = round_id >= self.plan_round
        self.plan_round = max(self.plan_round, round_id)
        try:
            self.ka.install_plan(plan_request(the_plan, signer=self.signer))
        except (ModeSetupInvalid, ServerRequestReplayed):
            # only another plan for a planned round, or an older round's, is refused
            assert cap > 1 / MIN or self.planned.get(round_id, cap) != cap or not fresh
            return
        # new, or the same again
        assert cap <= 1 / MIN and self.planned.get(round_id, cap) == cap and fresh
        self.planned[round_id] = cap

    @rule(
        round_id=ROUNDS,
        members=MEMBERS,
        odd=ODD_WEIGHT,
        purpose=st.sampled_from(["aggregate", "mean", "moments", "score"]),
    )
    def request(self, round_id: int, members: list[str], odd: float | None, purpose: str) -> None:
        weights = _weights(len(members), odd)
        try:
            ct = weighted_sum([self.ups[p] for p in members], weights).to_bytes()
        except CryptoError:
            return  # the aggregator cannot even build it
        fresh = round_id >= self.decrypt_round
        granted = self._send(round_id, purpose, members, ct, weights)
        fine = (
            fresh
            and purpose == "aggregate"
            and round_id in self.planned
            and round_id not in self.published
            and len(set(members)) == len(members) >= MIN
            and odd is None
            and _within_cap(len(members), self.planned.get(round_id))
        )
        assert granted == fine, (round_id, purpose, members, odd, granted)
        if granted:
            self.published.add(round_id)

    @rule(round_id=ROUNDS, members=DISTINCT)
    def publish(self, round_id: int, members: list[str]) -> None:
        """A well-formed publication: granted exactly on a fresh, planned, unpublished round."""
        self.request(round_id, members, None, "aggregate")

    @rule(round_id=ROUNDS, pid=st.sampled_from(IDS))
    def single_upload(self, round_id: int, pid: str) -> None:
        """One participant's own upload, asked for as an aggregate of one."""
        ct = self.ups[pid].to_bytes()
        assert not self._send(round_id, "aggregate", [pid], ct, [1.0])

    @rule(
        round_id=ROUNDS,
        members=DISTINCT,
        named=MEMBERS,
    )
    def mislabelled(self, round_id: int, members: list[str], named: list[str]) -> None:
        """A ciphertext over ``members`` asked for under other participant ids."""
        weights = [1.0 / len(members)] * len(members)
        ct = weighted_sum([self.ups[p] for p in members], weights).to_bytes()
        granted = self._send(round_id, "aggregate", named, ct, _weights(len(named), None))
        if granted:  # only the count is in the header: equal counts of distinct ids may pass
            assert len(named) == len(members)
            self.published.add(round_id)

    @invariant()
    def only_planned_releases(self) -> None:
        _check_log(self.ka.log, self.planned, set(IDS))


TestKeyAuthorityRequests = KeyAuthorityMachine.TestCase
TestKeyAuthorityRequests.settings = SETTINGS


# -- the shares helper ----------------------------------------------------------------


class HelperMachine(RuleBasedStateMachine):
    """Requests to one shares helper (a fresh deployment per run).

    The machine crafts the helper's plain ``linear`` requests, so its deployment has
    no MACs (an authenticated helper releases a publication only through a checked
    opening: ``test_an_authenticated_helper_never_releases_a_plain_linear_publication``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.dep = SharesDeployment.deploy(
            DeploymentPlan(
                shape=(N, C),
                participant_ids=tuple(IDS),
                min_participants=MIN,
                policy=publication_only(IDS, (N, C), quorum=MIN),
            ),
            authenticated=False,
        )
        agg = self.dep.aggregator(bound=BOUND)
        preds = population(len(IDS), N, C, seed=5)
        self.uids: dict[str, str] = {}
        for pid, matrix in zip(IDS, preds.values(), strict=True):
            self.uids[pid] = self._load(agg, pid, matrix)
        self.uids["p00-again"] = self._load(agg, "p00", preds["p00"] * 0.5)
        self.owner = {uid: name.split("-")[0] for name, uid in self.uids.items()}
        self.planned: dict[int, float] = {}  # round -> the plan's weight cap
        self.published: set[int] = set()
        self.opened_in: dict[str, int] = {}
        self.op_round = self.plan_round = 0

    def _load(self, agg: Any, pid: str, matrix: np.ndarray) -> str:
        payload = self.dep.encoder(pid, bound=BOUND).encode(matrix)
        agg.load(payload)
        head, _ = decode_frame(payload, SHARES_UPLOAD)
        return str(head["upload_id"])

    @initialize()
    def first_plan(self) -> None:
        """Round 1 starts planned (so publications are reached early), cap 1/3."""
        self.install_plan(1, 1 / 3)

    @rule(round_id=ROUNDS, cap=CAPS)
    def install_plan(self, round_id: int, cap: float) -> None:
        the_plan = plan(round_id, (N, C), scored=False, max_weight=cap)
        fresh = round_id >= self.plan_round
        self.plan_round = max(self.plan_round, round_id)
        try:
            install_helper_plan(self.dep.helper, the_plan)
        except (ModeSetupInvalid, AuthorityRequestMalformed, ServerRequestReplayed):
            assert cap > 1 / MIN or self.planned.get(round_id, cap) != cap or not fresh
            return
        assert cap <= 1 / MIN and self.planned.get(round_id, cap) == cap and fresh
        self.planned[round_id] = cap

    @rule(
        round_id=ROUNDS,
        names=st.lists(st.sampled_from([*IDS, "p00-again"]), min_size=1, max_size=6),
        odd=ODD_WEIGHT,
        purpose=st.sampled_from(["aggregate", "mean", "moments"]),
    )
    def linear(self, round_id: int, names: list[str], odd: float | None, purpose: str) -> None:
        uids = [self.uids[n] for n in names]
        weights = _weights(len(uids), odd)
        request = {
            "op": "linear",
            "purpose": purpose,
            "uids": uids,
            "weights": weights,
            "round_id": round_id,
        }
        fresh = round_id >= self.op_round
        self.op_round = max(self.op_round, round_id)
        try:
            reply_array(self.dep.helper.handle(signed(self.dep, request)))
        except EXPECTED:
            granted = False
        else:
            granted = True
        owners = [self.owner[u] for u in uids]
        fine = (
            fresh
            and purpose == "aggregate"
            and round_id in self.planned
            and round_id not in self.published
            and len(set(owners)) == len(owners) >= MIN
            and odd is None
            and _within_cap(len(owners), self.planned.get(round_id))
            and all(self.opened_in.get(u, round_id) == round_id for u in uids)
        )
        assert granted == fine, (round_id, purpose, names, odd, granted)
        if granted:
            self.published.add(round_id)
            self.opened_in.update({u: round_id for u in uids})

    @rule(round_id=ROUNDS, members=DISTINCT)
    def publish(self, round_id: int, members: list[str]) -> None:
        """A well-formed publication: granted exactly when the model says so."""
        self.linear(round_id, members, None, "aggregate")

    @invariant()
    def only_planned_releases(self) -> None:
        _check_log(self.dep.helper.log, self.planned, set(IDS))


TestHelperRequests = HelperMachine.TestCase
TestHelperRequests.settings = SETTINGS


def _plain_publication(dep: Any) -> Any:
    """Install round 1's plan and ask the helper for a plain (unchecked) weighted sum."""
    agg = dep.aggregator(bound=BOUND)
    preds = population(MIN, N, C, seed=5)
    uids = []
    for pid, matrix in zip(IDS, preds.values(), strict=False):
        payload = dep.encoder(pid, bound=BOUND).encode(matrix)
        agg.load(payload)
        uids.append(str(decode_frame(payload, SHARES_UPLOAD)[0]["upload_id"]))
    install_helper_plan(dep.helper, plan(1, (N, C), scored=False, max_weight=1 / MIN))
    request = {
        "op": "linear",
        "purpose": "aggregate",
        "uids": uids,
        "weights": _weights(len(uids), None),
        "round_id": 1,
    }
    return reply_array(dep.helper.handle(signed(dep, request)))


def test_an_authenticated_helper_never_releases_a_plain_linear_publication() -> None:
    """With MACs, a publication leaves the helper only through a checked opening.

    The plain ``linear`` request the machine above is granted (unauthenticated
    shares) would let an aggregator that offsets its own share skip the MAC check.
    """
    policy = publication_only(IDS, (N, C), quorum=MIN)
    plain = SharesDeployment.deploy(
        DeploymentPlan(shape=(N, C), participant_ids=tuple(IDS), min_participants=MIN,
                       policy=policy),
        authenticated=False,
    )  # fmt: skip
    assert _plain_publication(plain)  # granted without MACs
    macs = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=IDS, min_participants=MIN, policy=policy
    )
    with pytest.raises(EXPECTED):
        _plain_publication(macs)

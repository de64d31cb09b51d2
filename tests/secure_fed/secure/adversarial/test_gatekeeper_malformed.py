"""A gatekeeper refuses a signed request whose content is malformed: typed, audited, no effect.

The attacker holds the aggregator's keys (or is the aggregator): every request
below is properly signed (key authority) or tagged (helper), so the signature
is not what is refused, the malformed content is. The key authority and the
helper are the real parties of a shares deployment; during an honest round the
helper's channel sends, before each chosen honest request, variants of it
re-tagged with the channel key: a Beaver opening or finish with another count
of payload parts, with no ``op_id`` (once read as the label ``"None"``) or no
triple label, a finish with a malformed output share, a linear opening with no
weights. Each refusal is :class:`~secure_fed.errors.AuthorityRequestMalformed`
(``AUTHORITY_REQUEST_MALFORMED``), one ``access.denied`` event naming the
operation and the reason, and changes nothing: no release is counted and the
honest request that follows is served (the round publishes; a copies count whose
share bytes are cut is refused and the honest count still opens, once). Malformed plans
(to either gatekeeper) and a deal naming no tensor are refused the same way,
and a refusal crosses the helper's HTTP service as the same typed error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from fastapi.testclient import TestClient

from api.services.apps import create_helper_app
from secure_fed.deploy.transport import HELPER_PATH, OCTET_STREAM, error_for
from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.shares import SharesDeployment
from secure_fed.secure.parties import helper as helper_party
from secure_fed.secure.parties import key_authority
from secure_fed.secure.parties.helper import HelperParty, helper_request
from secure_fed.secure.server_auth import authenticate_request
from secure_fed.wire import HELPER_REQUEST, KEY_AUTHORITY_REQUEST, decode_frame
from tests.secure_fed.secure.helpers import Harness, plan, population, publication_only
from tests.secure_fed.secure.parties.test_copies_mutants import CopiesRound
from tests.secure_fed.secure.signed_requests import signed

IDS = [f"p{j:02d}" for j in range(4)]
CODE = "AUTHORITY_REQUEST_MALFORMED"
Header = dict[str, object]


Alter = Callable[[Header, bytes], tuple[Header, bytes]]
Shares = tuple[SharesDeployment, MemoryAuditSink]


def _parts(head: Header, payload: bytes, sizes: list[int]) -> tuple[Header, bytes]:
    return {**head, "parts": sizes}, payload


def _split_last(head: Header, payload: bytes) -> tuple[Header, bytes]:
    """One more part: the last one split in two (the bytes are the same)."""
    sizes = list(head["parts"])  # type: ignore[call-overload]
    return _parts(head, payload, [*sizes[:-1], sizes[-1] - 1, 1])


def _without(name: str) -> Alter:
    return lambda head, payload: ({k: v for k, v in head.items() if k != name}, payload)


#: (case, operation, how the honest request is altered, a word the refusal's reason names)
VARIANTS: dict[str, tuple[str, Alter, str]] = {
    "open, two payload parts": (
        "open",
        lambda h, p: _parts(h, p, [len(p) - 1, 1]),
        "payload part",
    ),
    "open, no op_id": ("open", _without("op_id"), "op_id"),
    "open, no triple label": ("open", _without("tensor"), "tensor"),
    "finish, one payload part": ("finish", lambda h, p: _parts(h, p, [len(p)]), "payload part"),
    "finish, three payload parts": ("finish", _split_last, "payload part"),
    "finish, no op_id": ("finish", _without("op_id"), "op_id"),
    "finish, malformed output share": (
        "finish",
        lambda h, p: ({**h, "array": {"dtype": "u8", "shape": [1]}}, p),
        "array",
    ),
    "linear, no weights": ("linear", _without("weights"), "weights"),
}


@dataclass
class Outcome:
    """What one malformed variant got from the helper."""

    error: BaseException | None
    denied: list[dict[str, object]]
    released: int  # rows the helper's release log gained


#: The fixture's round: each variant's outcome, the round's state, its publication.
Round = tuple[dict[str, Outcome], object, object]


class _Injector:
    """The aggregator's channel to the helper: before each chosen op's first honest
    request, it sends that request's malformed variants, tagged with the channel key."""

    def __init__(self, dep: SharesDeployment, sink: MemoryAuditSink) -> None:
        self.dep, self.sink = dep, sink
        self.outcomes: dict[str, Outcome] = {}
        self.done: set[str] = set()

    def __call__(self, request: bytes) -> bytes:
        head, payload = decode_frame(request, HELPER_REQUEST)
        op = str(head["op"])
        if op not in self.done:
            self.done.add(op)
            for case, (target, alter, _) in VARIANTS.items():
                if target == op:
                    self.outcomes[case] = self._send(head, payload, alter)
        return self.dep.helper.handle(request)

    def _send(self, head: Header, payload: bytes, alter: Alter) -> Outcome:
        bare = {k: v for k, v in head.items() if k not in ("auth", "signature")}
        round_id = int(head["auth"]["round_id"])  # type: ignore[index]
        new_head, new_payload = alter(bare, payload)
        key = self.dep.helper.request_key
        assert key is not None
        forged = helper_request(new_head, new_payload, key=key, round_id=round_id)
        return _attempt(self.dep.helper, self.sink, forged)


def _attempt(helper: HelperParty, sink: MemoryAuditSink, request: bytes) -> Outcome:
    """Send ``request`` to ``helper``; return what it raised, audited and released."""
    denied, released = len(sink.named("access.denied")), len(helper.log)
    error: BaseException | None = None
    try:
        helper.handle(request)
    except Exception as exc:  # noqa: BLE001 - recorded: the test names what it must be
        error = exc
    return Outcome(
        error=error,
        denied=sink.named("access.denied")[denied:],
        released=len(helper.log) - released,
    )


@pytest.fixture(scope="module")
def malformed_round(tmp_path_factory: pytest.TempPathFactory) -> Round:
    """One honest shares round, each chosen helper request preceded by its malformed variants."""
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares", shape=(120, 10), participant_ids=IDS, min_participants=3, audit=sink
    )
    assert isinstance(dep, SharesDeployment)
    harness = Harness(dep, tmp_path_factory.mktemp("mal"), ids=IDS, min_participants=3, audit=sink)
    injector = _Injector(dep, sink)
    aggregator = harness.engine.aggregator
    aggregator.keys = replace(aggregator.keys, helper=injector)  # type: ignore[attr-defined]
    _, state, publication = harness.round(1, population(4, 120, 10, seed=3))
    return injector.outcomes, state, publication


def _refused(outcome: Outcome, party: str, op: str, word: str) -> None:
    assert isinstance(outcome.error, AuthorityRequestMalformed), repr(outcome.error)
    assert outcome.error.code == CODE
    assert len(outcome.denied) == 1, outcome.denied
    event = outcome.denied[0]
    assert (event["party"], event["op"], event["code"]) == (party, op, CODE)
    assert word in str(event["reason"]), event


@pytest.mark.parametrize("case", list(VARIANTS))
def test_a_malformed_helper_request_is_refused_typed_audited_and_changes_nothing(
    malformed_round: Round, case: str
) -> None:
    outcomes, state, publication = malformed_round
    op, _, word = VARIANTS[case]
    outcome = outcomes[case]
    _refused(outcome, "helper", op, word)
    assert outcome.released == 0
    # the honest request that followed was served: the round went on and published
    assert publication, state


def test_a_copies_count_of_the_wrong_length_is_refused_and_the_counts_still_open_once() -> None:
    """A count step whose share bytes are no whole u8 per member: refused, the run kept."""
    run = CopiesRound.scored()
    inner = run.agg.keys.helper
    outcomes: list[Outcome] = []

    def channel(request: bytes) -> bytes:
        head, payload = decode_frame(request, HELPER_REQUEST)
        if head.get("op") == "copies" and head.get("stage") == "count" and not outcomes:
            cut = signed(run.dep, head, payload[:-1])
            outcomes.append(_attempt(run.helper, run.sink, cut))
        return inner(request)  # type: ignore[no-any-return]

    run.agg.keys = replace(run.agg.keys, helper=channel)
    assert run.agg.copies(run.handles, round_id=1) == {"a": 1, "b": 0, "c": 0, "d": 1}
    (outcome,) = outcomes
    _refused(outcome, "helper", "copies", "count shares")
    assert outcome.released == 0
    released = [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]
    assert len(released) == 1  # the honest count step opened the counts, once


# -- plans and deals, to either gatekeeper -----------------------------------------------

N, C = 32, 3


@pytest.fixture
def shares() -> Shares:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
    )
    assert isinstance(dep, SharesDeployment)
    return dep, sink


#: A plan that does not parse or validate, and a word its refusal's reason names.
BAD_PLANS: dict[str, tuple[str | dict[str, object], str]] = {
    "not an object": ("[]", "JSON object"),
    "a round that is no integer": ({"round_id": "x"}, "round_id"),
    "one class": ({"num_classes": 1}, "num_classes"),
}


def _bad_plan(round_id: int, case: str) -> bytes:
    change, _ = BAD_PLANS[case]
    if isinstance(change, str):
        return change.encode()
    honest = json.loads(plan(round_id, (N, C), scored=False).to_bytes())
    return json.dumps({**honest, **change}).encode()


@pytest.mark.parametrize("case", list(BAD_PLANS))
def test_the_key_authority_refuses_and_audits_a_malformed_signed_plan(
    shares: Shares, case: str
) -> None:
    dep, sink = shares
    signer = dep.server_keys().signing_key
    assert signer is not None
    ka = dep.authority
    request = authenticate_request(
        KEY_AUTHORITY_REQUEST,
        {"round_id": 5, "purpose": "plan"},
        _bad_plan(5, case),
        signer=signer,
        round_id=5,
        purpose="plan",
    )
    denied = len(sink.named("access.denied"))
    with pytest.raises(AuthorityRequestMalformed, match="release plan refused") as refused:
        ka.install_plan(request)
    outcome = Outcome(refused.value, sink.named("access.denied")[denied:], 0)
    _refused(outcome, "key_authority", "plan", BAD_PLANS[case][1])
    assert ka.plans.tracker(5) is None
    # nothing changed: the honest plan for the round is fixed afterwards
    ka.install_plan(key_authority.plan_request(plan(5, (N, C), scored=False), signer=signer))
    assert ka.plans.tracker(5) is not None


def _helper_plan(dep: SharesDeployment, round_id: int, payload: bytes) -> bytes:
    key = dep.helper.request_key
    assert key is not None
    head = {"op": "plan", "round_id": round_id, "purpose": "plan", "parts": [len(payload)]}
    return helper_request(head, payload, key=key, round_id=round_id)


@pytest.mark.parametrize("case", list(BAD_PLANS))
def test_the_helper_refuses_and_audits_a_malformed_tagged_plan(shares: Shares, case: str) -> None:
    dep, sink = shares
    denied = len(sink.named("access.denied"))
    with pytest.raises(AuthorityRequestMalformed, match="release plan refused") as refused:
        dep.helper.handle(_helper_plan(dep, 5, _bad_plan(5, case)))
    outcome = Outcome(refused.value, sink.named("access.denied")[denied:], 0)
    _refused(outcome, "helper", "plan", BAD_PLANS[case][1])
    assert dep.helper.plans.tracker(5) is None
    key = dep.helper.request_key
    assert key is not None
    dep.helper.handle(helper_party.plan_request(plan(5, (N, C), scored=False), key=key))
    assert dep.helper.plans.tracker(5) is not None


def test_the_key_authority_refuses_and_audits_a_deal_naming_no_tensor(shares: Shares) -> None:
    dep, sink = shares
    keys = dep.server_keys()
    assert keys.signing_key is not None
    malformed = authenticate_request(
        KEY_AUTHORITY_REQUEST,
        {"round_id": 1, "count": 4},
        signer=keys.signing_key,
        round_id=1,
        purpose="triples",
    )
    denied, dealt = len(sink.named("access.denied")), len(dep.authority.log)
    with pytest.raises(AuthorityRequestMalformed, match="tensor") as refused:
        keys.dealer(malformed)
    outcome = Outcome(refused.value, sink.named("access.denied")[denied:], 0)
    _refused(outcome, "key_authority", "triples", "tensor")
    assert len(dep.authority.log) == dealt  # nothing dealt
    honest = key_authority.deal_request(round_id=1, tensor="t0", count=4, signer=keys.signing_key)
    keys.dealer(honest)
    assert len(dep.authority.log) == dealt + 1


def test_a_malformed_plan_crosses_the_helper_service_as_the_same_typed_error(
    shares: Shares,
) -> None:
    """Through the helper's real application: a 400 problem whose code the client re-raises."""
    dep, sink = shares
    client = TestClient(create_helper_app(dep.helper, hsts=False))
    denied = len(sink.named("access.denied"))
    response = client.post(
        HELPER_PATH,
        content=_helper_plan(dep, 6, b"[]"),
        headers={"content-type": OCTET_STREAM},
    )
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == CODE
    error = error_for(body["code"], str(body.get("detail", "")))
    assert isinstance(error, AuthorityRequestMalformed) and "release plan refused" in str(error)
    event = sink.named("access.denied")[denied]
    assert (event["party"], event["op"], event["code"]) == ("helper", "plan", CODE)
    assert dep.helper.plans.tracker(6) is None

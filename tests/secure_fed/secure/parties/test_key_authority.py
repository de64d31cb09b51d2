from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import pack_class_major, weighted_sum
from crypto.errors import ShareTampered
from crypto.shares import ShareLabel, ShareMacKey, TripleShare
from crypto.shares.wire import open_sealed
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyAuthorityConfigInvalid,
)
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.central_dp import central_sensitivity
from secure_fed.secure.parties.key_authority import (
    CentralDP,
    KeyAuthority,
    decryption_request,
    plan_request,
)
from secure_fed.wire import KEY_AUTHORITY_REPLY, decode_array, decode_frame
from tests.secure_fed.secure.conftest import IDS, C, N
from tests.secure_fed.secure.helpers import plan, population, publication_only
from tests.tolerances import aggregate_tolerance


@pytest.fixture(scope="module")
def ckks() -> tuple[SecureDeployment, MemoryAuditSink]:
    """One key epoch only: these requests publish scoring-epoch ciphertexts by hand."""
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        audit=sink,
        publication_preset=None,
        policy=publication_only(IDS, (N, C)),
    )
    return dep, sink


@pytest.fixture(scope="module")
def uploads(ckks):  # type: ignore[no-untyped-def]
    dep, _ = ckks
    preds = population(4, N, C, seed=21)
    return preds, {p: pack_class_major(dep.public_context, m) for p, m in preds.items()}


_SIGNER: list[object] = []
_ROUND = [0]


@pytest.fixture(autouse=True)
def _aggregator_signer(ckks) -> None:  # type: ignore[no-untyped-def]
    _SIGNER[:] = [ckks[0].server_keys().signer]
    _ROUND[0] += 1  # each test is a fresh round with a publication-only release plan
    ckks[0].authority.install_plan(_plan_request(_ROUND[0]))


def _plan_request(round_id: int) -> bytes:
    """A publication-only release plan for ``round_id``, signed by the aggregator."""
    return plan_request(plan(round_id, (N, C), scored=False), signer=_SIGNER[0])  # type: ignore[arg-type]


def _request(purpose: str, ids: list[str], ct: bytes, shape=(N, C), **extra) -> bytes:  # type: ignore[no-untyped-def]
    """A request signed by the deployment's aggregator, with a well-formed claim."""
    op = "weighted_sum" if purpose == "aggregate" else purpose
    claim: dict[str, object] = {"op": op, "uploads": [[p, "0" * 64] for p in ids]}
    if op == "weighted_sum":
        claim["weights"] = [1.0 / len(ids)] * len(ids)
    if op in ("moments", "score"):
        claim.update(center_sm3="0" * 64, samples=1, whitening=[[1.0]])
    extra.setdefault("signer", _SIGNER[0])
    return decryption_request(
        round_id=_ROUND[0],
        purpose=purpose,
        participant_ids=ids,
        shape=shape,
        ciphertext=ct,
        claim=claim,
        **extra,
    )


def test_aggregate_over_enough_participants_is_released_flooded(ckks, uploads) -> None:  # type: ignore[no-untyped-def]
    dep, sink = ckks
    preds, ups = uploads
    ids = sorted(ups)[:3]
    agg = weighted_sum([ups[p] for p in ids], [1 / 3] * 3)
    head, raw = decode_frame(
        dep.authority.handle(_request("aggregate", ids, agg.to_bytes())), b"SFKA", max_bytes=1 << 30
    )
    out = decode_array(head["array"], raw)
    tolerance = aggregate_tolerance(dep.authority.keys.public_context.preset, values=out.size)
    assert np.abs(out - np.mean([preds[p] for p in ids], axis=0)).max() <= tolerance
    assert dep.authority.log[-1].contributors == 3 and dep.authority.log[-1].released
    assert sink.named("decryption.released")[-1]["contributors"] == 3


def test_single_upload_and_small_aggregates_are_refused(ckks, uploads) -> None:  # type: ignore[no-untyped-def]
    dep, sink = ckks
    _, ups = uploads
    one = ups["p00"].to_bytes()
    with pytest.raises(DecryptionRefused, match="single participant's upload"):
        dep.authority.handle(_request("aggregate", IDS[:3], one))  # an upload is not an aggregate
    with pytest.raises(DecryptionRefused, match="single participant's upload"):
        dep.authority.handle(_request("score", ["p00"], one))
    two = weighted_sum([ups["p00"], ups["p01"]], [0.5, 0.5]).to_bytes()
    with pytest.raises(DecryptionRefused, match="2 distinct participants; at least 3"):
        dep.authority.handle(_request("mean", ["p00", "p01"], two))
    with pytest.raises(DecryptionRefused, match="contributor count"):
        dep.authority.handle(_request("mean", ["p00", "p01", "p02"], two))
    with pytest.raises(DecryptionRefused, match="exactly one"):
        dep.authority.handle(_request("score", ["p00", "p01"], one))
    assert sink.named("access.denied")
    assert not dep.authority.log[-1].released


def test_repeated_ids_are_not_distinct_contributors(ckks, uploads) -> None:  # type: ignore[no-untyped-def]
    """An aggregate naming one participant twice is refused, even with a consistent count."""
    dep, sink = ckks
    _, ups = uploads
    denied = len(sink.named("access.denied"))
    three = weighted_sum([ups["p00"], ups["p00"], ups["p01"]], [1 / 3] * 3).to_bytes()
    with pytest.raises(DecryptionRefused, match="repeat"):
        dep.authority.handle(_request("mean", ["p00", "p00", "p01"], three))
    four = weighted_sum([ups[p] for p in ("p00", "p00", "p01", "p02")], [0.25] * 4).to_bytes()
    with pytest.raises(DecryptionRefused, match="repeat"):
        dep.authority.handle(_request("aggregate", ["p00", "p00", "p01", "p02"], four))
    assert len(sink.named("access.denied")) == denied + 2
    assert sink.named("access.denied")[-1]["party"] == "key_authority"
    assert [r.released for r in dep.authority.log[-2:]] == [False, False]


def test_the_ciphertext_header_decides_the_kind(ckks, uploads) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    _, ups = uploads
    agg = weighted_sum([ups[p] for p in ("p00", "p01", "p02")], [1 / 3] * 3).to_bytes()
    with pytest.raises(DecryptionRefused, match="needs a 'score' value"):
        dep.authority.handle(_request("score", ["p00"], agg))  # an aggregate is not a score
    with pytest.raises(AuthorityRequestMalformed, match="not a CKKS ciphertext"):
        dep.authority.handle(_request("mean", ["p00", "p01", "p02"], b"SFCKCT" + bytes(10)))


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (lambda r: r[:10], "SFKR"),
        (lambda r: b"XXXX" + r[4:], "SFKR"),
    ],
)
def test_malformed_frames_are_refused(ckks, mutate, fragment) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    with pytest.raises(AuthorityRequestMalformed, match=fragment):
        dep.authority.handle(mutate(_request("mean", IDS[:3], b"x" * 20)))


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("purpose", "vector", "purpose"),
        ("participant_ids", [], "participant_ids"),
        ("shape", [3], "shape"),
        ("round_id", -1, "round_id"),
    ],
)
def test_bad_request_headers_are_refused(ckks, field, value, fragment) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks

    from secure_fed.secure.server_auth import authenticate_request

    header = {"round_id": _ROUND[0], "purpose": "mean", "participant_ids": IDS[:3], "shape": [N, C]}
    header[field] = value
    signed = authenticate_request(
        b"SFKR",
        header,
        b"x",
        signer=_SIGNER[0],  # type: ignore[arg-type]
        round_id=header["round_id"],  # type: ignore[arg-type]
        purpose=str(header["purpose"]),
    )
    with pytest.raises(AuthorityRequestMalformed, match=fragment):
        dep.authority.handle(signed)


def test_central_dp_charges_every_contributor(ckks, uploads) -> None:  # type: ignore[no-untyped-def]
    dep, _ = ckks
    preds, ups = uploads
    gate = InMemoryBudgetGate(epsilon=100.0, delta=1e-5)
    ids = sorted(ups)[:3]
    for p in ids:
        gate.set_budget(p, "private-train", epsilon=100.0)
    ka = KeyAuthority(
        min_participants=3,
        keys=None,
        central_dp=CentralDP(noise_multiplier=5.0),
        budget=gate,
        audit=MemoryAuditSink(),
        aggregator=_SIGNER[0].identity,  # type: ignore[attr-defined]
    )
    ka.keys = dep.authority.keys  # the same key epoch, a second authority object
    ka.install_plan(_plan_request(_ROUND[0]))
    agg = weighted_sum([ups[p] for p in ids], [1 / 3] * 3)
    reply = ka.handle(_request("aggregate", ids, agg.to_bytes(), bound=8.0, max_weight=1 / 3))
    assert ka.log[-1].central_dp
    # the noise itself, not only the flag: z times the sensitivity under the plan's weight cap
    head, raw = decode_frame(reply, KEY_AUTHORITY_REPLY, max_bytes=1 << 30)
    noise = decode_array(head["array"], raw) - np.mean([preds[p] for p in ids], axis=0)
    max_weight = ka.plans.tracker(_ROUND[0]).plan.max_weight  # type: ignore[union-attr]
    sensitivity = central_sensitivity(size=N * C, bound=8.0, max_weight=max_weight)
    assert head["central_dp"] is True
    assert np.std(noise) == pytest.approx(5.0 * sensitivity, rel=0.1)  # 3000 draws
    assert all(gate.epsilon_spent(p, "private-train") > 0 for p in ids)
    _ROUND[0] += 1  # the plan allows one publication per round
    ka.install_plan(_plan_request(_ROUND[0]))
    with pytest.raises(AuthorityRequestMalformed, match="max_weight"):
        ka.handle(_request("aggregate", ids, agg.to_bytes()))


def test_config_errors() -> None:
    with pytest.raises(KeyAuthorityConfigInvalid, match="min_participants"):
        KeyAuthority(min_participants=1)
    with pytest.raises(KeyAuthorityConfigInvalid, match="budget"):
        KeyAuthority(min_participants=2, central_dp=CentralDP(noise_multiplier=1.0))
    with pytest.raises(KeyAuthorityConfigInvalid, match="noise_multiplier"):
        CentralDP(noise_multiplier=0.0)
    with pytest.raises(KeyAuthorityConfigInvalid, match="delta"):
        CentralDP(noise_multiplier=1.0, delta=1.0)
    with pytest.raises(KeyAuthorityConfigInvalid, match="no CKKS keys"):
        _ = KeyAuthority(min_participants=2).public_context


def test_dealt_triples_multiply() -> None:
    ka = KeyAuthority(min_participants=2)
    ka_a, ka_h = ShareMacKey.generate(recipient="a"), ShareMacKey.generate(recipient="h")
    blob_a, blob_h = ka.deal(round_id=2, tensor="t", count=5, key_aggregator=ka_a, key_helper=ka_h)
    label = ShareLabel(round_id=2, participant_id="beaver", tensor="t")
    t0 = TripleShare.parse(blob_a, key=ka_a, label=label, party=0, seeded=True, count=5)
    with pytest.raises(ShareTampered):  # the helper's half travels sealed to the helper
        TripleShare.parse(blob_h, key=ka_h, label=label, party=1, count=5)
    t1 = TripleShare.parse(open_sealed(ka_h, blob_h), key=ka_h, label=label, party=1, count=5)
    (a0, b0, c0), (a1, b1, c1) = t0.parts(), t1.parts()
    assert np.array_equal((a0 + a1) * (b0 + b1), c0 + c1)
    assert ka.log[-1].kind == "triples" and not ka.log[-1].released

"""The key authority never releases more ciphertexts than its epoch's flooding is sized for.

Each decrypted ciphertext counts toward the ``t`` of the flooding bound. A
publication that would cross the limit is refused as a whole before anything is
decrypted (typed, journalled, ``access.denied``), even when the plan allows it;
the limit cannot be configured above the preset's sized count.
"""

from __future__ import annotations

import pytest

from crypto.ckks import pack_class_major
from crypto.sm import sm3_digest
from secure_fed.errors import KeyAuthorityConfigInvalid, KeyEpochExhausted
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.ckks_claims import evaluate
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import (
    KeyAuthority,
    decryption_request,
    plan_request,
)
from tests.secure_fed.secure.helpers import plan, population, publication_only

N, C = 4096, 2  # one class per ciphertext run: every aggregate is 2 ciphertexts
IDS = ["a", "b", "c", "d"]
ROUND = 3


def test_the_limit_defaults_to_the_preset_and_cannot_exceed_it() -> None:
    ka = KeyAuthority.for_ckks(min_participants=3)
    assert ka.keys is not None and ka.release_limit == ka.keys.preset.max_decryptions
    with pytest.raises(KeyAuthorityConfigInvalid, match="max_releases"):
        KeyAuthority(min_participants=3, keys=ka.keys, max_releases=ka.release_limit + 1)


def test_a_publication_crossing_the_limit_is_refused_whole() -> None:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(  # the scoring epoch's limit (one epoch, raw payloads)
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
        publication_preset=None,
    )
    keys, authority = dep.server_keys(), dep.authority  # type: ignore[attr-defined]
    authority.install_plan(plan_request(plan(ROUND, (N, C), scored=False), signer=keys.signer))
    preds = dict(zip(IDS, population(4, N, C, seed=2).values(), strict=True))
    payloads = {p: pack_class_major(dep.public_context, m).to_bytes() for p, m in preds.items()}  # type: ignore[attr-defined]
    agg = dep.aggregator(bound=8.0)
    ups = {p: agg.load(b).matrix for p, b in payloads.items()}  # type: ignore[attr-defined]
    digests = [[p, sm3_digest(payloads[p]).hex()] for p in IDS]
    claim = {"op": "weighted_sum", "uploads": digests, "weights": [0.25] * 4}
    matrix = evaluate(claim, ups, dep.public_context)  # type: ignore[attr-defined]
    assert len(matrix.vectors) == 2

    def publish() -> object:
        return authority.handle(
            decryption_request(
                round_id=ROUND,
                purpose="aggregate",
                participant_ids=IDS,
                shape=(N, C),
                ciphertext=matrix.to_bytes(),
                signer=keys.signer,
                claim=claim,
            )
        )

    before = authority.keys.releases
    authority.max_releases = before + 1  # one ciphertext left: the publication needs two
    with pytest.raises(KeyEpochExhausted, match="rotate the keys"):
        publish()
    assert authority.keys.releases == before  # nothing decrypted
    assert not authority.requests[-1].granted
    assert sink.named("access.denied")[-1]["code"] == "KEY_AUTHORITY_EPOCH_EXHAUSTED"
    authority.max_releases = before + 2
    publish()  # the same step, once the epoch has room, is released
    assert authority.keys.releases == before + 2
    with pytest.raises(KeyEpochExhausted):
        publish()  # now exhausted before parsing

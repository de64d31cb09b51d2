"""Authenticated shares: an offset on either server's share of the publication is caught.

Before MACs (``docs/audit/threat-model.md``, shares rows) a server that added an offset to
its own share of the publication moved the published cell unseen. With the shares mode's
default deployment every share carries SPDZ-style MACs under a key neither server holds
whole (:mod:`crypto.shares.mac`): the attacker here uses the project's own classes, adds
``+5.0`` to one cell of its share (and, the best it can do alone, shifts its MAC share by
its own key share times the offset); the other server's MAC check fails, the opening
raises ``SHARES_OPENING_FORGED``, nothing is returned or released, the helper refuses
every later opening of the round, and ``access.denied`` names the detecting party, the
step and the peer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import secure_fed.secure.modes.shares_aggregator as aggregator_module
import secure_fed.secure.parties.helper_openings as openings
from crypto.errors import ShareTampered
from crypto.shares import RING_PREDICTIONS, RING_WEIGHTS, ShareLabel, TripleShare
from crypto.shares.mac import MacOpening
from crypto.shares.wire import open_sealed
from secure_fed.errors import SharesOpeningForged
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.computation.evidence import evidence_sums
from secure_fed.secure.computation.share_ops import weighted_share
from tests.secure_fed.secure.adversarial.test_evidence_gatekeeping import Round as EvidenceRound
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, population

Dep = tuple[Any, MemoryAuditSink]
OFFSET = 5.0
FRAC = RING_PREDICTIONS.frac_bits + RING_WEIGHTS.frac_bits  # the publication's scale


def _round(dep: Any) -> tuple[Any, Any, dict[str, np.ndarray]]:
    preds = population(4, N, C, seed=11)
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    return agg, agg.weighted_sum(handles, {p: 1.0 for p in handles}), preds


def _released(dep: Any) -> list[object]:
    return [r for r in dep.helper.log if r.released]


def _forged(sink: MemoryAuditSink, party: str) -> list[dict[str, object]]:
    return [
        d
        for d in sink.named("access.denied")
        if d.get("code") == "SHARES_OPENING_FORGED" and d.get("party") == party
    ]


def test_an_honest_authenticated_round_publishes_what_an_unauthenticated_one_does(
    shares: Dep, shares_plain: Dep
) -> None:
    (dep, _), (plain, _) = shares, shares_plain
    agg, aggregate, preds = _round(dep)
    assert aggregate.macs is not None  # the default deployment authenticates
    out = agg.reveal(aggregate, round_id=1)
    agg_p, aggregate_p, _ = _round(plain)
    assert aggregate_p.macs is None
    assert np.array_equal(out, agg_p.reveal(aggregate_p, round_id=1))  # bit for bit
    truth = np.mean([np.clip(m, -BOUND, BOUND) for m in preds.values()], axis=0)
    assert np.abs(out - truth).max() < 1e-3
    assert len(_released(dep)) == 1


def _skip_own_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A malicious aggregator ignores its own MAC check and opens its check values anyway."""
    honest = MacOpening.check

    def check(self: MacOpening, peer: bytes) -> None:
        if self.party == 0:
            self._passed = True
            return
        honest(self, peer)

    monkeypatch.setattr(MacOpening, "check", check)


def test_an_aggregator_that_offsets_its_share_aborts_its_own_round(shares: Dep) -> None:
    dep, _ = shares
    agg, aggregate, _ = _round(dep)
    aggregate.share[0, 0] += np.uint64(int(OFFSET * 2**FRAC))
    with pytest.raises(SharesOpeningForged, match="MAC check failed"):
        agg.reveal(aggregate, round_id=1)
    assert _released(dep) == []


def test_an_offset_on_the_aggregators_share_of_the_publication_is_caught(
    shares: Dep, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, sink = shares
    agg, aggregate, _ = _round(dep)
    _skip_own_check(monkeypatch)
    e = np.uint64(int(OFFSET * 2**FRAC))
    aggregate.share[0, 0] += e  # its own share of one published cell
    own = agg.keys.mac_key.words()  # and its MAC shares, by what it can compute alone
    aggregate.macs[:, 0] += own * e
    with pytest.raises(SharesOpeningForged, match="aggregator's share of the publication"):
        agg.reveal(aggregate, round_id=1)
    assert _released(dep) == []  # the helper released nothing
    (event,) = _forged(sink, "helper")
    assert event["peer"] == "aggregator" and event["step"] == "publication"
    assert event["round_id"] == 1
    aggregate.share[0, 0] -= e  # the round is aborted: not even the honest share opens now
    aggregate.macs[:, 0] -= own * e
    with pytest.raises(SharesOpeningForged, match="aborted"):
        agg.reveal(aggregate, round_id=1)
    assert _released(dep) == []


def test_an_offset_on_the_helpers_share_of_the_publication_is_caught(
    shares: Dep, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, sink = shares
    agg, aggregate, _ = _round(dep)
    honest = weighted_share
    calls: list[int] = []

    def offset(shares_in: list[np.ndarray], weights: list[float]) -> np.ndarray:
        out = honest(shares_in, weights)
        if not calls:  # the helper's share of the publication's values (then its MACs)
            out = out.copy()
            out[0, 0] += np.uint64(int(OFFSET * 2**FRAC))
        calls.append(1)
        return out

    monkeypatch.setattr(openings, "weighted_share", offset)
    with pytest.raises(SharesOpeningForged, match="helper.s share of the publication"):
        agg.reveal(aggregate, round_id=1)
    assert calls  # the offset was applied
    assert _released(dep) == []  # the helper was never asked to release
    (event,) = _forged(sink, "aggregator")
    assert event["peer"] == "helper" and event["step"] == "publication"


def test_without_macs_the_same_offset_moves_the_published_cell(shares_plain: Dep) -> None:
    """The limit MACs remove: the unauthenticated baseline publishes the shifted cell."""
    dep, _ = shares_plain
    agg, aggregate, preds = _round(dep)
    aggregate.share[0, 0] += np.uint64(int(OFFSET * 2**FRAC))
    out = agg.reveal(aggregate, round_id=1)
    truth = np.mean([np.clip(m, -BOUND, BOUND) for m in preds.values()], axis=0)
    assert out[0, 0] - truth[0, 0] == pytest.approx(OFFSET, abs=1e-3)


def test_neither_server_holds_the_mac_key_whole(shares: Dep) -> None:
    dep, _ = shares
    agg = dep.aggregator(bound=BOUND)
    whole = dep._masks._alpha  # the dealer's (the key authority's deployment holds it)
    a0, a1 = agg.keys.mac_key.words(), dep.helper.mac_key.words()
    assert agg.keys.mac_key.party == 0 and dep.helper.mac_key.party == 1
    assert np.array_equal(a0 + a1, whole)
    held = {
        "aggregator": [*vars(agg).values(), *(getattr(agg.keys, f) for f in vars(agg.keys))],
        "helper": [getattr(dep.helper, f) for f in vars(dep.helper)],
    }
    for party, values in held.items():
        for value in values:
            words = value.words() if hasattr(value, "words") else value
            if isinstance(words, np.ndarray) and words.shape == whole.shape:
                assert not np.array_equal(words, whole), party
    assert not hasattr(agg.keys, "masks") and not hasattr(dep.helper, "_alpha")


def test_the_helpers_dealt_material_is_sealed_from_the_aggregator(shares: Dep) -> None:
    """What the aggregator forwards to the helper does not show the helper's half.

    Before, the blob was only tagged: its payload, the helper's triple and range-mask
    shares, was readable, and with the aggregator's own half it opened every masked input.
    """
    dep, _ = shares
    keys = dep.server_keys()
    helper_key = dep.helper.dealer_key
    _, triples = keys.deal(round_id=1, tensor="t-seal", count=64)
    label = ShareLabel(round_id=1, participant_id="beaver", tensor="t-seal")
    a1, b1, c1 = TripleShare.parse(
        open_sealed(helper_key, triples), key=helper_key, label=label, party=1, count=64
    ).parts()
    assert not triples.startswith(b"SFS1")  # not a readable share frame
    for part in (a1, b1, c1):
        assert part.tobytes()[:32] not in triples
    _, material = keys.deal_range(round_id=1, tensor="r-seal", count=16)
    assert not material.startswith(b"SFS1")
    with pytest.raises(ShareTampered):  # sealed for the helper: another key cannot open it
        open_sealed(keys.dealer_key, material)


def _offset_first(module: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Offset the first result of ``module.name`` (a server's evidence sums) by 5.0."""
    honest = evidence_sums
    calls: list[int] = []

    def offset(shares_in: list[np.ndarray], piece: Any) -> np.ndarray:
        out = honest(shares_in, piece)
        if not calls:
            out = out.copy()
            out[0] += np.uint64(int(OFFSET * 2**RING_PREDICTIONS.frac_bits))
        calls.append(1)
        return out

    monkeypatch.setattr(module, name, offset)
    return calls


def test_an_offset_on_the_aggregators_share_of_the_evidence_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    round_ = EvidenceRound("shares", tmp_path)
    before = _released(round_.dep)
    _skip_own_check(monkeypatch)
    calls = _offset_first(aggregator_module, monkeypatch, "evidence_sums")
    with pytest.raises(SharesOpeningForged, match="aggregator's share of the evidence"):
        round_.publish()
    assert calls and _released(round_.dep) == before  # no evidence, no publication
    (event,) = _forged(round_.sink, "helper")
    assert event["step"] == "evidence" and event["peer"] == "aggregator"


def test_an_offset_on_the_helpers_share_of_the_evidence_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    round_ = EvidenceRound("shares", tmp_path)
    before = _released(round_.dep)
    calls = _offset_first(openings, monkeypatch, "evidence_sums")
    with pytest.raises(SharesOpeningForged, match="helper's share of the evidence"):
        round_.publish()
    assert calls and _released(round_.dep) == before
    (event,) = _forged(round_.sink, "aggregator")
    assert event["step"] == "evidence" and event["peer"] == "helper"

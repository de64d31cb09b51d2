"""Deployed shares are authenticated: the helper service refuses an offset publication share.

The key ceremony's shares deployment holds the SPDZ-style MAC keys
(:mod:`crypto.shares.mac`), so the real key authority service deals the uploads' input
masks (``/v1/deal-masks``) and the real helper service runs the MAC-checked opening
(op ``mac_check`` on ``/v1/helper``). The honest round publishes; then the aggregator
(the project's own classes, loaded from its ceremony directory) adds an offset to its
share of one published cell, shifts its MAC shares by what it can compute alone and
skips its own check: the helper service refuses with ``SHARES_OPENING_FORGED`` over
HTTP (the same typed error here), records it in its ``audit.db`` and releases nothing.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.shares import RING_PREDICTIONS, RING_WEIGHTS
from crypto.shares.mac import MacOpening
from secure_fed.deploy.keys import load_aggregator, load_participant
from secure_fed.deploy.tls import LocalCA
from secure_fed.deploy.transport import remote_authority, remote_helper
from secure_fed.errors import SharesOpeningForged
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.modes.shares_aggregator import SharesAggregator
from tests.api.services.conftest import Service
from tests.secure_fed.deploy.loaded import LoadedDeployment, run_round
from tests.secure_fed.secure.helpers import Harness, population

OFFSET = 5.0
FRAC = RING_PREDICTIONS.frac_bits + RING_WEIGHTS.frac_bits  # the publication's scale


def _entries(database: Path) -> list[dict[str, Any]]:
    """The helper's audit events, as written to its ``audit.db``: the event name and fields."""
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT entry FROM audit_entries ORDER BY entry_index").fetchall()
    found = []
    for (raw,) in rows:
        entry = json.loads(raw)
        found.append({"event": entry["event"], **entry["fields"]})
    return found


def _published(entries: list[dict[str, Any]], round_id: int) -> bool:
    return any(
        e["event"] == "decryption.released"
        and e.get("purpose") == "aggregate"
        and e.get("round_id") == round_id
        for e in entries
    )


def _offset_publication(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A malicious aggregator: offset its share of one published cell, skip its own check."""
    calls: list[int] = []
    honest_reveal, honest_check = SharesAggregator.reveal, MacOpening.check

    def reveal(self: SharesAggregator, aggregate: Any, *, round_id: int) -> np.ndarray:
        e = np.uint64(int(OFFSET * 2**FRAC))
        own = self.keys.mac_key
        assert own is not None  # the ceremony's deployment authenticates
        aggregate.share[0, 0] += e
        aggregate.macs[:, 0] += own.words() * e  # all it can do alone
        calls.append(round_id)
        return honest_reveal(self, aggregate, round_id=round_id)

    def check(self: MacOpening, peer: bytes) -> None:
        if self.party == 0:
            self._passed = True  # ignores its own check, opens its check values anyway
            return
        honest_check(self, peer)

    monkeypatch.setattr(SharesAggregator, "reveal", reveal)
    monkeypatch.setattr(MacOpening, "check", check)
    return calls


def test_an_offset_aggregator_share_is_refused_by_the_helper_service(
    shares_keys: Path,
    shares_services: tuple[Service, Service],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    authority, helper = shares_services
    tls = LocalCA(shares_keys / "tls").client("aggregator")
    agg = load_aggregator(
        shares_keys / "aggregator",
        authority=remote_authority(authority.url, tls=tls),
        helper=remote_helper(helper.url, tls=tls),
        audit=MemoryAuditSink(),
    )
    run_round(agg, shares_keys, tmp_path / "honest", round_id=1)  # publishes, MAC-checked
    database = helper.state / "audit.db"
    assert _published(_entries(database), 1)  # the helper released round 1's publication

    calls = _offset_publication(monkeypatch)
    ids = agg.participant_ids
    parts = {p: load_participant(shares_keys / "participants" / p) for p in ids}
    harness = Harness(
        LoadedDeployment(agg, parts),
        tmp_path / "forged",
        ids=ids,
        min_participants=2,
        audit=MemoryAuditSink(),
    )
    harness.keys = {p: parts[p].signing_key for p in ids}
    harness.verifier.keys = {p: k.public_key for p, k in harness.keys.items()}
    preds = dict(zip(ids, population(len(ids), *agg.shape, seed=2).values(), strict=True))
    with pytest.raises(SharesOpeningForged, match="aggregator's share of the publication"):
        harness.round(2, preds)
    assert calls == [2]  # the offset was applied, in round 2
    entries = _entries(database)
    forged = [e for e in entries if e.get("code") == "SHARES_OPENING_FORGED"]
    assert [(e["party"], e["peer"], e["step"], e["round_id"]) for e in forged] == [
        ("helper", "aggregator", "publication", 2)
    ]
    assert forged[0]["event"] == "access.denied"
    assert not _published(entries, 2)  # nothing of round 2's publication was released

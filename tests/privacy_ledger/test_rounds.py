"""Round-state repository: stages with compare-and-set, upload and decryption evidence."""

from __future__ import annotations

import pytest

from privacy_ledger import PrivacyLedger, RoundStore
from privacy_ledger.errors import LedgerParameterInvalid, RoundUnknown

from .helpers import setup_budget


def test_round_state_and_evidence(ledger: PrivacyLedger) -> None:
    setup_budget(ledger)
    store = RoundStore(ledger.engine)
    store.save("r1", stage="collect", state={"expected": ["h1"], "received": []})
    store.save("r1", stage="aggregate", state={"received": ["h1"]}, expected_stage="collect")
    loaded = store.load("r1")
    assert (loaded.stage, loaded.state) == ("aggregate", {"received": ["h1"]})
    with pytest.raises(RoundUnknown, match="expected stage 'collect'"):
        store.save("r1", stage="decrypt", state={}, expected_stage="collect")
    store.record_upload(
        "r1", "h1", digest="AB" * 32, size=4096, kind="ckks_scores", shape=[128, 10]
    )
    [upload] = store.uploads("r1")
    assert (upload.digest, upload.size, upload.shape) == ("ab" * 32, 4096, [128, 10])
    store.record_decryption(
        "r1", requester="keyauthority", kind="aggregate", what="sum of scores", aggregate_size=1280
    )
    assert [d.requester for d in store.decryptions("r1")] == ["keyauthority"]


def test_round_errors(ledger: PrivacyLedger) -> None:
    setup_budget(ledger)
    store = RoundStore(ledger.engine)
    with pytest.raises(RoundUnknown, match="not stored"):
        store.load("nope")
    with pytest.raises(RoundUnknown, match="not stored"):
        store.record_upload("nope", "h1", digest="00", size=1, kind="k", shape=[1])
    store.save("r1", stage="collect", state={})
    with pytest.raises(LedgerParameterInvalid, match="digest"):
        store.record_upload("r1", "h1", digest="xyz", size=1, kind="k", shape=[1])
    with pytest.raises(LedgerParameterInvalid, match="size"):
        store.record_upload("r1", "h1", digest="00", size=-1, kind="k", shape=[1])
    with pytest.raises(LedgerParameterInvalid, match="shape"):
        store.record_upload("r1", "h1", digest="00", size=1, kind="k", shape=[-2])
    with pytest.raises(LedgerParameterInvalid, match="round_id"):
        store.save("bad round", stage="x", state={})

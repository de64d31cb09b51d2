"""The key ceremony's authenticated shares: each MAC secret at its holder only, loaded parties.

A shares deployment made by ``secure-fed deploy keys`` holds the SPDZ-style MAC keys
(:mod:`crypto.shares.mac`): the key authority's dealer the whole keys, the
dealer-helper mask secret and every participant's dealer secret; each server one
share of the keys (the helper also the mask secret); each participant its own dealer
secret. The loaders build the authenticated parties from them, and a round on the
loaded parties runs the MAC-checked openings.
"""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.deploy.ceremony import read_secret
from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.keys import (
    load_aggregator,
    load_helper,
    load_key_authority,
    load_participant,
)
from secure_fed.deploy.transport import AuthorityChannels
from secure_fed.secure.audit import MemoryAuditSink
from tests.secure_fed.deploy.loaded import run_round
from tests.secure_fed.secure.helpers import BOUND, population

IDS = ("h1", "h2", "b1")


def _contents(directory: Path) -> str:
    """Every file of a party's directory, as one text (secrets are written as hex)."""
    return "\n".join(
        p.read_bytes().decode("ascii", "replace") for p in sorted(directory.rglob("*"))
    )


def _lanes(raw: bytes) -> list[int]:
    return [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]


def _secrets(root: Path) -> dict[str, str]:
    """Each authenticated-shares secret of the ceremony, by name, as its hex."""
    ka = root / "keyauthority"
    found = {
        "mac_key": read_secret(ka / "mac-key.secret", size=16).hex(),
        "share0": read_secret(root / "aggregator" / "mac-key-share.secret", size=16).hex(),
        "share1": read_secret(root / "helper" / "mac-key-share.secret", size=16).hex(),
        "mask": read_secret(ka / "dealer-mask.secret").hex(),
    }
    for pid in IDS:
        own = json.loads((root / "participants" / pid / "enrolment.json").read_text())
        found[pid] = own["dealer_secret"]
        assert json.loads((ka / "input-masks.json").read_text())[pid] == own["dealer_secret"]
    return found


def test_each_mac_secret_is_written_to_its_holders_only_mode_0600(shares_root: Path) -> None:
    found = _secrets(shares_root)
    assert len(set(found.values())) == len(found)  # all distinct, none empty
    whole = _lanes(bytes.fromhex(found["mac_key"]))
    shares = zip(
        _lanes(bytes.fromhex(found["share0"])), _lanes(bytes.fromhex(found["share1"])), strict=True
    )
    assert [(a + b) % (1 << 64) for a, b in shares] == whole  # the dealer's key, shared
    holders = {
        "aggregator": {"share0"},
        "helper": {"share1", "mask"},
        "keyauthority": {"mac_key", "mask", *IDS},
        "api": set(),
        "participants/h1": {"h1"},
        "participants/h2": {"h2"},
        "participants/b1": {"b1"},
    }
    for party, own in holders.items():
        text = _contents(shares_root / party)
        held = {name for name, value in found.items() if value in text}
        assert held == own, (party, held)
    for name in ("mac-key-share.secret",):
        for party in ("aggregator", "helper"):
            mode = (shares_root / party / name).stat().st_mode
            assert stat.S_IMODE(mode) == 0o600
    for name in ("mac-key.secret", "dealer-mask.secret", "input-masks.json"):
        assert stat.S_IMODE((shares_root / "keyauthority" / name).stat().st_mode) == 0o600
    assert stat.S_IMODE((shares_root / "helper" / "dealer-mask.secret").stat().st_mode) == 0o600


def test_the_loaders_build_the_authenticated_parties(shares_root: Path, tmp_path: Path) -> None:
    audit = MemoryAuditSink()
    ka = load_key_authority(shares_root / "keyauthority", audit=audit, state_dir=tmp_path / "ka")
    helper = load_helper(shares_root / "helper", audit=audit, state_dir=tmp_path / "helper")
    assert helper.mac_key is not None and helper.mac_key.party == 1
    assert helper.mask_secret is not None
    channels = ka.channels()
    assert channels.deal_masks is not None
    agg = load_aggregator(
        shares_root / "aggregator", authority=channels, helper=helper.handle, audit=audit
    )
    aggregator = agg.aggregator(bound=BOUND)
    keys = aggregator.keys  # type: ignore[attr-defined]
    assert keys.mac_key is not None and keys.mac_key.party == 0
    assert keys.mask_dealer is not None
    # a participant's upload is masked (d = x - r): the aggregator holds its MAC shares
    (matrix,) = population(1, *agg.shape, seed=3).values()
    encoder = load_participant(shares_root / "participants" / "h1").encoder(bound=BOUND)
    handle: Any = aggregator.load(encoder.encode(matrix))
    assert handle.macs is not None and handle.macs.shape == (2, int(np.prod(agg.shape)))
    # and a scored round on the loaded parties publishes through the MAC-checked opening
    run_round(agg, shares_root, tmp_path)


def test_the_aggregator_is_refused_without_its_share_or_the_mask_channel(
    shares_root: Path, tmp_path: Path
) -> None:
    ka = load_key_authority(shares_root / "keyauthority", audit=None, state_dir=tmp_path / "ka")
    helper = load_helper(shares_root / "helper", audit=None, state_dir=tmp_path / "helper")
    c = ka.channels()
    without = AuthorityChannels(deal=c.deal, deal_range=c.deal_range, deal_compare=c.deal_compare)
    agg = load_aggregator(shares_root / "aggregator", authority=without, helper=helper.handle)
    with pytest.raises(KeyDirectoryInvalid, match="input-mask channel"):
        agg.aggregator(bound=BOUND)
    copy = tmp_path / "aggregator"
    shutil.copytree(shares_root / "aggregator", copy)
    (copy / "mac-key-share.secret").unlink()
    agg = load_aggregator(copy, authority=c, helper=helper.handle)
    with pytest.raises(KeyDirectoryInvalid, match="mac-key-share.secret"):
        agg.aggregator(bound=BOUND)

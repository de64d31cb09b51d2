"""The key ceremony and the loaders: each party's directory, and a round in process."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest

from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.keys import (
    AggregatorKeys,
    ParticipantKeys,
    create_keys,
    load_aggregator,
    load_helper,
    load_key_authority,
    load_participant,
    read_manifest,
)
from secure_fed.deploy.transport import AuthorityChannels
from secure_fed.errors import ModeSetupInvalid, ServerRequestReplayed
from secure_fed.federation.messages import decode_publication
from secure_fed.secure.audit import MemoryAuditSink
from tests.secure_fed.secure.helpers import BOUND, Harness, population

IDS = ("h1", "h2", "b1")
SHAPE = (64, 4)


class _Deployment:
    """The loaded parties seen through the interface the test harness drives."""

    def __init__(self, agg: AggregatorKeys, parts: dict[str, ParticipantKeys]) -> None:
        self.agg, self.parts = agg, parts
        self.mode, self.params, self.shape = agg.mode, agg.params, agg.shape

    def aggregator(self, *, bound: float):  # type: ignore[no-untyped-def]
        return self.agg.aggregator(bound=bound)

    def encoder(self, pid: str, *, bound: float):  # type: ignore[no-untyped-def]
        return self.parts[pid].encoder(bound=bound)


def _files(root: Path) -> dict[str, set[str]]:
    return {
        d: {p.name for p in (root / d).iterdir()}
        for d in ("aggregator", "keyauthority", "api", "participants/h1")
    }


def _load(root: Path, tmp_path: Path, audit: MemoryAuditSink) -> _Deployment:
    ka = load_key_authority(root / "keyauthority", audit=audit, state_dir=tmp_path / "ka")
    manifest = read_manifest(root / "aggregator")
    helper = None
    if manifest.mode == "shares":
        helper = load_helper(root / "helper", audit=audit, state_dir=tmp_path / "helper").handle
    agg = load_aggregator(root / "aggregator", authority=ka.channels(), helper=helper)
    parts = {p: load_participant(root / "participants" / p) for p in IDS}
    return _Deployment(agg, parts)


def test_each_party_holds_only_its_own_files_mode_0600(ckks_root: Path) -> None:
    files = _files(ckks_root)
    assert files["aggregator"] == {
        "party.json",
        "aggregator.key.pem",
        "scoring.context",
        "publication.context",
    }
    assert {"scoring.sealed", "publication.sealed", "seal.key"} <= files["keyauthority"]
    assert files["participants/h1"] == {
        "party.json",
        "signing.key.pem",
        "scoring.context",
        "publication.context",
    }
    assert not (ckks_root / "helper").exists()
    for path in ckks_root.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_keys_are_never_overwritten(ckks_root: Path) -> None:
    with pytest.raises(KeyDirectoryInvalid, match="already holds keys"):
        create_keys(ckks_root, mode="ckks", participant_ids=IDS, shape=SHAPE, min_participants=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "plaintext"}, "mode must be one of"),
        ({"participant_ids": ("a", "a")}, "participant_ids must be distinct"),
        ({"min_participants": 1}, "min_participants must be >= 2"),
        ({"shape": (0, 4)}, "shape must be two integers"),
    ],
)
def test_a_bad_ceremony_is_refused_naming_the_parameter(
    tmp_path: Path, kwargs: dict[str, object], match: str
) -> None:
    args: dict[str, object] = {
        "mode": "shares",
        "participant_ids": IDS,
        "shape": SHAPE,
        "min_participants": 2,
    }
    with pytest.raises(ModeSetupInvalid, match=match):
        create_keys(tmp_path / "k", **{**args, **kwargs})  # type: ignore[arg-type]


def test_a_party_directory_is_refused_as_another_party_s(ckks_root: Path, tmp_path: Path) -> None:
    with pytest.raises(
        KeyDirectoryInvalid, match="holds the 'aggregator' keys, not 'keyauthority'"
    ):
        load_key_authority(ckks_root / "aggregator", audit=None, state_dir=tmp_path)
    with pytest.raises(KeyDirectoryInvalid, match="not a secure-fed-keys/1 key directory"):
        (tmp_path / "x").mkdir()
        (tmp_path / "x" / "party.json").write_text('{"format": "other"}')
        load_participant(tmp_path / "x")
    with pytest.raises(KeyDirectoryInvalid, match="shares aggregator needs a helper"):
        shares = tmp_path / "s"
        create_keys(shares, mode="shares", participant_ids=IDS, shape=SHAPE, min_participants=2)
        load_aggregator(shares / "aggregator", authority=AuthorityChannels())


def test_a_tampered_sealed_secret_key_is_refused(ckks_root: Path, tmp_path: Path) -> None:
    sealed = ckks_root / "keyauthority" / "scoring.sealed"
    blob = bytearray(sealed.read_bytes())
    blob[-1] ^= 1
    sealed.write_bytes(bytes(blob))
    with pytest.raises(KeyDirectoryInvalid, match="scoring secret key .* refused"):
        load_key_authority(ckks_root / "keyauthority", audit=None, state_dir=tmp_path)


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_a_round_runs_on_the_loaded_keys(mode: str, tmp_path: Path, request) -> None:  # type: ignore[no-untyped-def]
    root = request.getfixturevalue(f"{mode}_root")
    audit = MemoryAuditSink()
    dep = _load(root, tmp_path, audit)
    harness = Harness(dep, tmp_path, ids=IDS, min_participants=2, audit=audit)
    preds = dict(zip(IDS, population(3, *SHAPE, seed=1).values(), strict=True))
    _, _, raw = harness.round(1, preds)
    publication = decode_publication(raw, max_bytes=1 << 24, shape=SHAPE)
    assert set(publication.weights) == set(IDS)
    expected = sum(w * np.clip(preds[p], -BOUND, BOUND) for p, w in publication.weights.items())
    np.testing.assert_allclose(publication.aggregate, expected, atol=0.01)


def test_a_replayed_request_is_refused_after_the_key_authority_reloads(
    shares_root: Path, tmp_path: Path
) -> None:
    from secure_fed.deploy.ceremony import read_sm2
    from secure_fed.secure.parties.key_authority import deal_request
    from secure_fed.secure.server_auth import ServerSigningKey

    signer = ServerSigningKey(
        name="aggregator", key=read_sm2(shares_root / "aggregator", "aggregator")
    )
    request = deal_request(round_id=3, tensor="t", count=4, signer=signer)
    first = load_key_authority(shares_root / "keyauthority", audit=None, state_dir=tmp_path)
    first.deal(request)
    again = load_key_authority(shares_root / "keyauthority", audit=None, state_dir=tmp_path)
    with pytest.raises(ServerRequestReplayed, match="nonce already used in round 3"):
        again.deal(request)
    older = deal_request(round_id=2, tensor="t", count=4, signer=signer)
    with pytest.raises(ServerRequestReplayed, match="round 2 after round 3"):
        again.deal(older)

"""The key ceremony and the loaders: each party's directory, and a round in process."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.keys import (
    AggregatorKeys,
    create_keys,
    load_aggregator,
    load_helper,
    load_key_authority,
    load_participant,
    read_manifest,
)
from secure_fed.deploy.transport import AuthorityChannels
from secure_fed.deploy.verifier_party import load_verifier
from secure_fed.errors import ModeSetupInvalid, ServerRequestReplayed
from secure_fed.secure.audit import MemoryAuditSink
from tests.secure_fed.deploy.loaded import run_round

IDS = ("h1", "h2", "b1")
SHAPE = (64, 4)


def _files(root: Path) -> dict[str, set[str]]:
    return {
        d: {p.name for p in (root / d).iterdir()}
        for d in ("aggregator", "keyauthority", "api", "participants/h1")
    }


def _load(root: Path, tmp_path: Path, audit: MemoryAuditSink) -> AggregatorKeys:
    ka = load_key_authority(root / "keyauthority", audit=audit, state_dir=tmp_path / "ka")
    manifest = read_manifest(root / "aggregator")
    helper, verifier = None, None
    if manifest.mode == "shares":
        helper = load_helper(root / "helper", audit=audit, state_dir=tmp_path / "helper").handle
    else:
        verifier = load_verifier(root / "verifier", audit=audit).channels()
    return load_aggregator(
        root / "aggregator", authority=ka.channels(), helper=helper, verifier=verifier
    )


def test_each_party_holds_only_its_own_files_mode_0600(ckks_root: Path) -> None:
    files = _files(ckks_root)
    assert files["aggregator"] == {
        "party.json",
        "policy.json",
        "aggregator.key.pem",
        "scoring.context",
        "publication.context",
    }
    assert {"scoring.sealed", "publication.sealed", "seal.key", "policy.json"} <= files[
        "keyauthority"
    ]
    assert files["participants/h1"] == {
        "party.json",
        "policy.json",
        "signing.key.pem",
        "scoring.context",
        "publication.context",
        "node.key",
        "node.pub",
    }
    assert {p.name for p in (ckks_root / "superlink" / "nodes").iterdir()} == {
        f"{pid}.pub" for pid in IDS
    }
    assert not (ckks_root / "helper").exists()
    # the verifier: its attestation key, its audit key, public contexts; no secret key
    assert {p.name for p in (ckks_root / "verifier").iterdir()} == {
        "party.json",
        "policy.json",
        "verifier.key.pem",
        "audit.key.pem",
        "scoring.context",
        "publication.context",
    }
    for party in ("aggregator", "keyauthority", "verifier", "participants/h1"):
        assert read_manifest(ckks_root / party).verifier_key is not None  # every party knows it
    for path in ckks_root.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_each_participant_has_its_own_p384_node_key_and_the_superlink_its_public_half(
    ckks_root: Path,
) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import (
        load_ssh_private_key,
        load_ssh_public_key,
    )

    seen = set()
    for pid in IDS:
        own = ckks_root / "participants" / pid
        private = load_ssh_private_key((own / "node.key").read_bytes(), None)
        public = load_ssh_public_key(
            (ckks_root / "superlink" / "nodes" / f"{pid}.pub").read_bytes()
        )
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        assert isinstance(private.curve, ec.SECP384R1)
        assert private.public_key() == public
        assert (own / "node.pub").read_bytes() == (
            ckks_root / "superlink" / "nodes" / f"{pid}.pub"
        ).read_bytes()
        seen.add(public.public_numbers())
    assert len(seen) == len(IDS)  # one key per node, none shared
    for other in ("aggregator", "keyauthority", "api"):
        assert not list((ckks_root / other).glob("node.*"))


def test_a_ckks_aggregator_without_the_pinned_verifier_s_channels_is_refused(
    ckks_root: Path, tmp_path: Path
) -> None:
    ka = load_key_authority(ckks_root / "keyauthority", audit=None, state_dir=tmp_path / "ka")
    assert ka.authority.verifier is not None  # the ceremony's verifier, pinned
    assert ka.authority.verifier.public_key == read_manifest(ckks_root / "verifier").verifier_key
    agg = load_aggregator(ckks_root / "aggregator", authority=ka.channels())
    with pytest.raises(KeyDirectoryInvalid, match="needs its channels"):
        agg.aggregator(bound=8.0)


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
    copy = shutil.copytree(ckks_root / "keyauthority", tmp_path / "keyauthority")
    sealed = copy / "scoring.sealed"
    blob = bytearray(sealed.read_bytes())
    blob[-1] ^= 1
    sealed.write_bytes(bytes(blob))
    with pytest.raises(KeyDirectoryInvalid, match="scoring secret key .* refused"):
        load_key_authority(copy, audit=None, state_dir=tmp_path / "state")


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_a_round_runs_on_the_loaded_keys(mode: str, tmp_path: Path, request) -> None:  # type: ignore[no-untyped-def]
    root = request.getfixturevalue(f"{mode}_root")
    run_round(_load(root, tmp_path, MemoryAuditSink()), root, tmp_path)


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


def test_a_replayed_helper_request_is_refused_after_the_helper_reloads(
    shares_root: Path, tmp_path: Path
) -> None:
    from secure_fed.deploy.ceremony import read_secret
    from secure_fed.secure.parties.helper import plan_request
    from secure_fed.secure.server_auth import ChannelKey
    from tests.secure_fed.secure.helpers import plan

    key = ChannelKey(
        name="aggregator", key=read_secret(shares_root / "aggregator" / "request.secret")
    )
    captured = plan_request(plan(4, SHAPE, min_participants=2), key=key)
    load_helper(shares_root / "helper", audit=None, state_dir=tmp_path).handle(captured)
    audit = MemoryAuditSink()
    again = load_helper(shares_root / "helper", audit=audit, state_dir=tmp_path)
    with pytest.raises(ServerRequestReplayed, match="nonce already used in round 4"):
        again.handle(captured)
    assert [e["code"] for e in audit.named("access.denied")] == ["SERVER_REQUEST_REPLAYED"]
    # a fresh plan request of the same round is still served (the helper lost its plans)
    again.handle(plan_request(plan(4, SHAPE, min_participants=2), key=key))


def test_the_release_count_of_each_epoch_survives_a_restart(
    ckks_root: Path, tmp_path: Path
) -> None:
    from secure_fed.deploy.authority import RELEASES_FILE

    state = tmp_path / "ka"
    ka = load_key_authority(ckks_root / "keyauthority", audit=None, state_dir=state)
    verifier = load_verifier(ckks_root / "verifier", audit=None).channels()
    agg = load_aggregator(ckks_root / "aggregator", authority=ka.channels(), verifier=verifier)
    run_round(agg, ckks_root, tmp_path)
    released = ka.releases()
    assert len(released) == 2 and all(count > 0 for count in released.values())
    again = load_key_authority(ckks_root / "keyauthority", audit=None, state_dir=state)
    assert again.releases() == released
    # an epoch restored at its sized limit releases nothing more
    scoring = again.authority.keys
    assert scoring is not None
    limit = scoring.preset.max_decryptions
    (state / RELEASES_FILE).write_text(json.dumps({scoring.fingerprint.hex(): limit}))
    full = load_key_authority(ckks_root / "keyauthority", audit=None, state_dir=state)
    assert full.authority.keys is not None and full.authority.keys.releases == limit
    (state / RELEASES_FILE).write_text(json.dumps({scoring.fingerprint.hex(): limit + 1}))
    with pytest.raises(KeyDirectoryInvalid, match="scoring secret key .* refused"):
        load_key_authority(ckks_root / "keyauthority", audit=None, state_dir=state)


def test_the_gatekeepers_pin_the_policy_every_participant_signed_at_the_ceremony(
    shares_root: Path, tmp_path: Path
) -> None:
    """Both gatekeepers verify every participant's signature on ``policy.json`` and pin it;
    a file rewritten after the ceremony (no scoring required) or one signature short
    keeps them from starting."""
    from dataclasses import replace

    from secure_fed.errors import PolicyInvalid
    from secure_fed.secure.consortium_policy import ConsortiumPolicy

    sink = MemoryAuditSink()
    load_key_authority(shares_root / "keyauthority", audit=sink, state_dir=tmp_path / "ka")
    load_helper(shares_root / "helper", audit=sink, state_dir=tmp_path / "helper")
    pinned = sink.named("policy.pinned")
    assert [e["party"] for e in pinned] == ["key_authority", "helper"]
    assert all(e["signers"] == sorted(IDS) for e in pinned)
    assert len({e["policy_sm3"] for e in pinned}) == 1
    raw = json.loads((shares_root / "helper" / "policy.json").read_bytes())
    policy = ConsortiumPolicy.from_bytes(raw["document"].encode())
    assert policy.quorum == read_manifest(shares_root / "helper").min_participants
    laxer = replace(policy, scored=False, ranking=False)
    for name, forged in {
        "rewritten": {**raw, "document": laxer.to_bytes().decode()},
        "one short": {
            **raw,
            "signatures": {p: s for p, s in raw["signatures"].items() if p != "h2"},
        },
    }.items():
        copy = tmp_path / name
        shutil.copytree(shares_root, copy)
        for party in ("keyauthority", "helper"):
            (copy / party / "policy.json").write_text(json.dumps(forged), encoding="utf-8")
        with pytest.raises(PolicyInvalid):
            load_key_authority(copy / "keyauthority", audit=None, state_dir=tmp_path / f"{name}-ka")
        with pytest.raises(PolicyInvalid):
            load_helper(copy / "helper", audit=None, state_dir=tmp_path / f"{name}-helper")

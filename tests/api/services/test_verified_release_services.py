"""Verified release over HTTPS: the real key authority and verifier services, a forging aggregator.

The key authority (``secure-fed keyauthority serve``) pins the verifier key of the key
ceremony; the verifier (``secure-fed verifier serve``) holds the uploads the aggregator
forwarded as their participants signed them. The attacker is the aggregator with its
own signing key and its own mutual-TLS certificate: in a round it runs honestly up to
the publication, it sends one participant's upload relabelled as the round's
publication (that upload at every claimed weight, over the real ids, with a consistent
witness, re-signed), first asking the verifier to attest it (refused, typed over HTTP),
then sending it to the key authority with no attestation, or with the honest
request's. The key authority refuses it before anything is decrypted
(``KEY_AUTHORITY_RELEASE_UNATTESTED``, an ``access.denied`` event naming the forged
request in its own audit log; its publication epoch released nothing), and an honest
round over the same services publishes, each of its releases attested in the
verifier's own audit log.

Without the pin (``verifier`` left ``None`` in
:func:`secure_fed.deploy.authority.load_key_authority`, as a deployment without a
verifier is built) the forged publication is decrypted and released: these tests fail.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from crypto.ckks import load_encrypted, weighted_sum
from crypto.sm import sm3_digest
from secure_fed.deploy.authority import RELEASES_FILE
from secure_fed.deploy.ceremony import read_sm2
from secure_fed.deploy.keys import AggregatorKeys, load_aggregator, load_participant, read_manifest
from secure_fed.deploy.tls import LocalCA
from secure_fed.deploy.transport import (
    VerifierChannels,
    remote_authority,
    remote_verifier,
)
from secure_fed.errors import AttestationRefused, ReleaseUnattested
from secure_fed.federation.envelope import EnvelopeVerifier
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.modes.ckks import CkksAggregator
from secure_fed.secure.modes.ckks_upload import epoch_part
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.publication_check import witness_field
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import KEY_AUTHORITY_REQUEST, decode_frame, encode_header
from tests.api.services.conftest import Service
from tests.secure_fed.deploy.loaded import LoadedDeployment, run_round
from tests.secure_fed.secure.helpers import Harness, population

pytestmark = pytest.mark.slow
UNATTESTED = ReleaseUnattested.code


def _entries(service: Service, event: str) -> list[dict[str, Any]]:
    """The fields of every ``event`` in the service's own audit log, in order."""
    with sqlite3.connect(service.state / "audit.db") as db:
        rows = db.execute(
            "SELECT entry FROM audit_entries WHERE event = ? ORDER BY entry_index", (event,)
        ).fetchall()
    return [json.loads(bytes(r[0]))["fields"] for r in rows]


def _releases(service: Service) -> dict[str, int]:
    path = service.state / RELEASES_FILE
    return json.loads(path.read_text()) if path.exists() else {}


class Forger:
    """The aggregator's channels: honest, but the round's publication request is swapped."""

    def __init__(self, keys: Path, authority: Service, verifier: Service, *, attach: bool) -> None:
        tls = LocalCA(keys / "tls").client("aggregator")
        self.decrypt = remote_authority(authority.url, tls=tls).decrypt
        self.remote = remote_verifier(verifier.url, tls=tls)
        self.manifest = read_manifest(keys / "aggregator")
        own = read_sm2(keys / "aggregator", "aggregator")
        self.signer = ServerSigningKey(name="aggregator", key=own)
        self.gate = EnvelopeVerifier(
            keys=dict(self.manifest.participant_keys),
            submit=lambda *_a, **_k: "",
            params=self.manifest.params,
            max_bytes=32 << 20,
        )
        self.attach = attach  # send the honest request's attestation with the forgery
        self.payloads: dict[str, bytes] = {}
        self.forged: list[bytes] = []
        self.verifier_refusals: list[AttestationRefused] = []
        self.publication: Any = None
        self.scoring: Any = None

    def channels(self) -> VerifierChannels:
        return VerifierChannels(forward=self.forward, attest=self.remote.attest)

    def forward(self, envelope: bytes, round_id: int) -> object:
        pid, payload = self.gate.open(envelope, round_id)  # the aggregator holds every upload
        self.payloads[pid] = payload
        return self.remote.forward(envelope, round_id)

    def __call__(self, request: bytes, attestation: bytes | None = None) -> bytes:
        decoded, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        header: dict[str, Any] = dict(decoded)
        if header["purpose"] != "aggregate":
            return self.decrypt(request, attestation)  # type: ignore[misc]
        forged = self._forge(header)
        self.forged.append(forged)
        try:  # asked to attest its forgery, the verifier recomputes the claim: refused
            self.remote.attest(forged)
        except AttestationRefused as exc:
            self.verifier_refusals.append(exc)
        return self.decrypt(forged, attestation if self.attach else None)  # type: ignore[misc]

    def _forge(self, header: dict[str, Any]) -> bytes:
        """The first participant's upload at every claimed weight, "over" the real ids."""
        ids = list(header["participant_ids"])
        raw = self.payloads[ids[0]]
        assert self.publication is not None
        parts = []
        for public in (self.publication, self.scoring):
            up = load_encrypted(
                public,
                epoch_part(raw, public),
                kind="upload",
                n_samples=self.manifest.shape[0],
                n_classes=self.manifest.shape[1],
            )
            parts.append(weighted_sum([up] * len(ids), [1.0 / len(ids)] * len(ids)).to_bytes())
        ciphertext, witness = parts
        extra: dict[str, Any] = {"epoch": header["epoch"]}
        extra["witness"] = witness_field(ciphertext, witness)
        for name in ("bound", "max_weight"):
            if name in header:
                extra[name] = header[name]
        return decryption_request(
            round_id=int(header["round_id"]),
            purpose=str(header["purpose"]),
            participant_ids=ids,
            shape=tuple(header["shape"]),
            ciphertext=ciphertext + witness,
            signer=self.signer,
            claim=header["claim"],
            **extra,
        )


def _forging_round(
    keys: Path, agg: AggregatorKeys, forger: Forger, tmp_path: Path, round_id: int
) -> None:
    """Run ``round_id`` through the forger's channels (the publication swapped)."""
    honest = agg.aggregator(bound=8.0)
    assert isinstance(honest, CkksAggregator)
    forger.scoring, forger.publication = honest.keys.public_context, honest.keys.publication_context
    forging = CkksAggregator(
        shape=agg.shape,
        bound=8.0,
        keys=replace(honest.keys, authority=forger),
        scoring=honest.scoring,
        min_participants=agg.min_participants,
    )
    ids = agg.participant_ids
    parts = {p: load_participant(keys / "participants" / p) for p in ids}
    loaded = LoadedDeployment(agg, parts)
    loaded.aggregator = lambda *, bound: forging  # type: ignore[method-assign]
    harness = Harness(loaded, tmp_path, ids=ids, min_participants=2, audit=MemoryAuditSink())
    harness.keys = {p: parts[p].signing_key for p in ids}
    harness.verifier.keys = {p: k.public_key for p, k in harness.keys.items()}
    harness.verifier.forward = forging.forward_upload
    preds = dict(zip(ids, population(len(ids), *agg.shape, seed=round_id).values(), strict=True))
    with pytest.raises(ReleaseUnattested, match="attestation"):
        harness.round(round_id, preds)


@pytest.mark.parametrize("attach", [False, True], ids=["no-attestation", "honest-attestation"])
def test_a_relabelled_upload_as_the_publication_is_refused_by_the_key_authority_service(
    ckks_keys: Path,
    ckks_authority: Service,
    ckks_verifier: Service,
    tmp_path: Path,
    attach: bool,
) -> None:
    round_id = 10 + int(attach)
    forger = Forger(ckks_keys, ckks_authority, ckks_verifier, attach=attach)
    tls = LocalCA(ckks_keys / "tls").client("aggregator")
    channels = remote_authority(ckks_authority.url, tls=tls)
    agg = load_aggregator(ckks_keys / "aggregator", authority=channels, verifier=forger.channels())
    before = _releases(ckks_authority)
    _forging_round(ckks_keys, agg, forger, tmp_path, round_id)
    # the verifier refused to attest it, in its own log
    assert len(forger.forged) == 1 and len(forger.verifier_refusals) == 1
    assert "not the one its claim recomputes to" in str(forger.verifier_refusals[0])
    forged_sm3 = sm3_digest(_signed_header(forger.forged[0])).hex()
    by_verifier = [e for e in _entries(ckks_verifier, "access.denied") if e.get("op") == "attest"]
    assert forged_sm3 in [e.get("request_sm3") for e in by_verifier]
    # the key authority refused it before decrypting: audited, nothing released
    denied = [e for e in _entries(ckks_authority, "access.denied") if e.get("code") == UNATTESTED]
    assert [e["request_sm3"] for e in denied if e["round_id"] == round_id] == [forged_sm3]
    assert denied[-1]["party"] == "key_authority" and denied[-1]["purpose"] == "aggregate"
    released = _entries(ckks_authority, "decryption.released")
    assert not [e for e in released if e["round_id"] == round_id and e["purpose"] == "aggregate"]
    publication = read_manifest(ckks_keys / "keyauthority").fingerprints["publication"]
    assert _releases(ckks_authority).get(publication, 0) == before.get(publication, 0)


def test_an_honest_round_over_the_services_publishes_each_release_attested(
    ckks_keys: Path, ckks_authority: Service, ckks_verifier: Service, tmp_path: Path
) -> None:
    tls = LocalCA(ckks_keys / "tls").client("aggregator")
    agg = load_aggregator(
        ckks_keys / "aggregator",
        authority=remote_authority(ckks_authority.url, tls=tls),
        verifier=remote_verifier(ckks_verifier.url, tls=tls),
    )
    run_round(agg, ckks_keys, tmp_path, round_id=20)  # the publication is the weighted mean
    attestations = _entries(ckks_verifier, "verifier.attested")
    attested = {e["request_sm3"] for e in attestations if e["round_id"] == 20}
    asked = [e for e in _entries(ckks_authority, "decryption.requested") if e["round_id"] == 20]
    assert asked and {e["request_sm3"] for e in asked} == attested
    held = [e for e in _entries(ckks_verifier, "verifier.upload_held") if e["round_id"] == 20]
    assert {e["participant_id"] for e in held} == set(agg.participant_ids)
    released = [e for e in _entries(ckks_authority, "decryption.released") if e["round_id"] == 20]
    assert {"aggregate", "score"} <= {e["purpose"] for e in released}


def _signed_header(request: bytes) -> bytes:
    """The signed header of a decryption request (its SM3 names the request in audit events)."""
    decoded, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
    header = dict(decoded)
    header.pop("signature")
    return encode_header(KEY_AUTHORITY_REQUEST, header)


def test_the_verifier_service_refuses_a_foreign_client_and_bad_uploads_typed_and_audited(
    ckks_keys: Path, ckks_verifier: Service, tmp_path: Path
) -> None:
    """Another certificate of the same CA, an envelope no participant signed, a bad body."""
    from secure_fed.deploy.errors import PeerRefused
    from secure_fed.deploy.transport import VERIFIER_PATHS, RemoteParty
    from secure_fed.errors import VerifierUploadRefused

    ca = LocalCA(ckks_keys / "tls")
    participant = ca.issue_client("h1")  # same CA, clientAuth, not the aggregator
    with pytest.raises(PeerRefused, match="not 'aggregator'"):
        remote_verifier(ckks_verifier.url, tls=participant).attest(b"x")
    channels = remote_verifier(ckks_verifier.url, tls=ca.client("aggregator"))
    # a participant's envelope with one byte changed: its signature no longer verifies
    agg = load_aggregator(
        ckks_keys / "aggregator",
        authority=remote_authority("https://127.0.0.1:9", tls=ca.client("aggregator")),
        verifier=channels,
    )
    parts = {p: load_participant(ckks_keys / "participants" / p) for p in agg.participant_ids}
    harness = Harness(LoadedDeployment(agg, parts), tmp_path, ids=agg.participant_ids,
                      min_participants=2, audit=MemoryAuditSink())  # fmt: skip
    harness.keys = {p: parts[p].signing_key for p in agg.participant_ids}
    matrix = population(1, *agg.shape, seed=3)
    envelope = bytearray(harness.envelope("h1", next(iter(matrix.values())), 30))
    envelope[-1] ^= 1
    with pytest.raises(VerifierUploadRefused, match="forwarded upload refused"):
        channels.forward(bytes(envelope), 30)
    with pytest.raises(VerifierUploadRefused, match="round id and an envelope"):
        RemoteParty(ckks_verifier.url, VERIFIER_PATHS["upload"], tls=ca.client("aggregator"))(b"x")
    denied = _entries(ckks_verifier, "access.denied")
    assert {e["code"] for e in denied} >= {"DEPLOY_PEER_REFUSED", "VERIFIER_UPLOAD_REFUSED"}
    assert not [e for e in _entries(ckks_verifier, "verifier.upload_held") if e["round_id"] == 30]

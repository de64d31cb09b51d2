"""Mutual TLS names the client: a certificate of the deployment's CA is not enough.

Real ``keyauthority serve`` / ``helper serve`` processes over loopback. The CA
issues every party's certificate; a participant (or anyone holding another
certificate of the same CA) must not reach the key authority or the helper.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

from secure_fed.deploy.errors import PeerRefused
from secure_fed.deploy.peer import certificate_names, require_peer
from secure_fed.deploy.tls import AGGREGATOR_NAME, LocalCA
from secure_fed.deploy.transport import AUTHORITY_PATHS, RemoteParty, remote_helper
from secure_fed.errors import AuthorityRequestMalformed, ServerRequestUnauthenticated
from tests.api.services.conftest import Service


def _der(pem_file: Path) -> bytes:
    import ssl

    return ssl.PEM_cert_to_DER_cert(pem_file.read_text())


def _denied(database: Path) -> list[str]:
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT * FROM audit_entries").fetchall()
    return [str(r) for r in rows if "access.denied" in str(r) and "DEPLOY_PEER_REFUSED" in str(r)]


def test_the_ceremony_names_the_aggregator_certificate_and_no_other(ckks_keys: Path) -> None:
    ca = LocalCA(ckks_keys / "tls")
    assert certificate_names(_der(ca.cert("aggregator"))) == (AGGREGATOR_NAME,)
    require_peer(_der(ca.cert("aggregator")), expected=AGGREGATOR_NAME)  # no error
    for other in ("api", "keyauthority", "superlink"):
        with pytest.raises(PeerRefused, match="not 'aggregator'"):
            require_peer(_der(ca.cert(other)), expected=AGGREGATOR_NAME)
    with pytest.raises(PeerRefused, match="no client certificate"):
        require_peer(None, expected=AGGREGATOR_NAME)
    with pytest.raises(PeerRefused, match="does not parse"):
        require_peer(b"\x30\x03junk", expected=AGGREGATOR_NAME)


def test_a_participant_certificate_of_the_same_ca_is_refused_and_audited(
    ckks_keys: Path, ckks_authority: Service
) -> None:
    ca = LocalCA(ckks_keys / "tls")
    participant = ca.issue_client("h1")  # the CA's own helper: same CA, clientAuth, other name
    decrypt = RemoteParty(ckks_authority.url, AUTHORITY_PATHS["decrypt"], tls=participant)
    with pytest.raises(PeerRefused, match=r"names \['h1'\], not 'aggregator'") as refused:
        decrypt(b"a request the handler never sees")
    assert isinstance(refused.value, ServerRequestUnauthenticated)  # the round aborts
    with httpx.Client(verify=participant.ssl_context(), timeout=10.0) as client:
        health = client.get(f"{ckks_authority.url}/healthz")
        context = client.get(f"{ckks_authority.url}/v1/contexts/scoring")
    for reply in (health, context):
        assert reply.status_code == 403
        assert reply.headers["content-type"] == "application/problem+json"
        assert reply.json()["code"] == "DEPLOY_PEER_REFUSED"
    assert len(_denied(ckks_keys.parent / "ka-state" / "audit.db")) >= 3
    # the aggregator's own certificate still reaches the handler (a typed refusal of junk)
    aggregator = ca.client("aggregator")
    with pytest.raises(AuthorityRequestMalformed):
        RemoteParty(ckks_authority.url, AUTHORITY_PATHS["decrypt"], tls=aggregator)(b"junk")


def test_the_helper_serves_only_the_client_it_is_told_to(shares_keys: Path, tmp_path: Path) -> None:
    ca = LocalCA(shares_keys / "tls")
    operator = ca.issue_client("aggregator-2")
    service = Service(
        "helper", shares_keys / "helper", tmp_path / "helper", client_name="aggregator-2"
    )
    service.start_with(operator)
    try:
        with pytest.raises(AuthorityRequestMalformed):  # served: the helper itself refuses junk
            remote_helper(service.url, tls=operator)(b"junk")
        with pytest.raises(PeerRefused, match="not 'aggregator-2'"):
            remote_helper(service.url, tls=ca.client("aggregator"))(b"junk")
    finally:
        service.stop()
    assert len(_denied(tmp_path / "helper" / "audit.db")) == 1
    with sqlite3.connect(tmp_path / "helper" / "audit.db") as db:
        started = [str(r) for r in db.execute("SELECT * FROM audit_entries").fetchall()]
    assert any('"client_name":"aggregator-2"' in row for row in started)


def _cert(common: str, dns: tuple[str, ...]) -> bytes:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if dns:
        san = x509.SubjectAlternativeName([x509.DNSName(d) for d in dns])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def test_a_subject_alternative_name_overrides_the_common_name() -> None:
    require_peer(_cert("aggregator", ()), expected="aggregator")  # no SAN: the CN names it
    require_peer(_cert("x", ("Aggregator",)), expected="aggregator")  # DNS names: any case
    with pytest.raises(PeerRefused, match=r"names \['h1'\]"):
        require_peer(_cert("aggregator", ("h1",)), expected="aggregator")
    with pytest.raises(PeerRefused):
        require_peer(_cert("aggregator-evil", ()), expected="aggregator")

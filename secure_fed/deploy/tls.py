"""TLS material for a try-out federation and the TLS settings of clients and servers.

:func:`create_local_ca` writes a private CA and the certificates one machine needs
to run every service on loopback: server certificates (``serverAuth`` only) for the
SuperLink, the key authority, the helper, the verifier and the REST API, valid for ``127.0.0.1``
and ``localhost``, and one client certificate (``clientAuth`` only) for the
aggregator, which the key authority, the helper and the verifier require (mutual TLS). Keys are
ECDSA P-256 from the OS generator, written unencrypted with mode 0600: a try-out;
in production each machine's certificate comes from the operator's own CA.

:class:`ClientTLS` builds the :class:`ssl.SSLContext` of a client (the CA to trust,
and the client certificate presented for mutual TLS); :class:`ServerTLS` names a
server's certificate, key and the CA whose client certificates it requires.

Public API (stable; the deployment helpers code against it)::

    create_local_ca(directory, *, hosts=("127.0.0.1", "localhost"),
                    servers=SERVER_NAMES, clients=CLIENT_NAMES, days=30) -> LocalCA
    ClientTLS(ca=Path, cert=Path | None, key=Path | None).ssl_context()
    ServerTLS(cert=Path, key=Path, client_ca=Path | None, client_name=AGGREGATOR_NAME)
    LocalCA(directory).issue_client(name) -> ClientTLS

A CA proves only that a certificate is the deployment's, not whose: with mutual
TLS a server also names the one client it serves (``client_name``, the
aggregator), checked on every request by
:func:`secure_fed.deploy.peer.require_peer` (``api.services`` applies it).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from secure_fed.deploy.errors import TlsConfigInvalid

__all__ = [
    "AGGREGATOR_NAME",
    "CLIENT_NAMES",
    "SERVER_NAMES",
    "ClientTLS",
    "LocalCA",
    "ServerTLS",
    "create_local_ca",
    "private_dir",
    "write_private",
]

#: Services that get a server certificate in a try-out.
SERVER_NAMES = ("superlink", "keyauthority", "helper", "api", "verifier")
#: The name the ceremony gives the aggregator's client certificate (subject CN and DNS SAN);
#: the key authority and the helper serve only a client certificate of this name.
AGGREGATOR_NAME = "aggregator"
#: Parties that get a client certificate (mutual TLS to the key authority and helper).
CLIENT_NAMES = (AGGREGATOR_NAME,)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents with mode 0700; return it."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (mode 0600, created so)."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


@dataclass(frozen=True)
class LocalCA:
    """Where :func:`create_local_ca` wrote its files (``<name>.pem`` / ``<name>.key``)."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        """The CA certificate every party trusts."""
        return self.directory / "ca.pem"

    def cert(self, name: str) -> Path:
        """Certificate of server or client ``name``."""
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        """Private key of server or client ``name``."""
        return self.directory / f"{name}.key"

    def server(self, name: str, *, mutual: bool = True) -> ServerTLS:
        """Server settings of ``name`` (requiring client certificates of this CA if ``mutual``)."""
        return ServerTLS(
            cert=self.cert(name), key=self.key(name), client_ca=self.ca_cert if mutual else None
        )

    def client(self, name: str | None = None) -> ClientTLS:
        """Client settings trusting this CA (presenting ``name``'s certificate when given)."""
        if name is None:
            return ClientTLS(ca=self.ca_cert)
        return ClientTLS(ca=self.ca_cert, cert=self.cert(name), key=self.key(name))

    def issue_client(self, name: str, *, days: int = 30) -> ClientTLS:
        """Issue one more client certificate ``name`` with this CA's key (``ca/ca.key``).

        Raises
        ------
        TlsConfigInvalid
            If ``name`` is not a simple name or already has a certificate here, or
            the CA's files do not load.
        """
        if not (isinstance(name, str) and _NAME.fullmatch(name)) or self.cert(name).exists():
            raise TlsConfigInvalid(f"name must be a new simple name, got {name!r}")
        try:
            ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
            ca_key = serialization.load_pem_private_key(
                (self.directory / "ca" / "ca.key").read_bytes(), password=None
            )
        except (OSError, ValueError) as exc:
            raise TlsConfigInvalid(f"the CA in {self.directory} does not load: {exc}") from exc
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise TlsConfigInvalid("the CA key is not an EC key")
        cert, key = _leaf(
            name,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            hosts=(),
            ca_key=ca_key,
            ca_name=ca_cert.subject,
            days=days,
        )
        write_private(self.cert(name), cert)
        write_private(self.key(name), key)
        return self.client(name)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "secure-fed try-out"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def _builder(subject: str, issuer: x509.Name, public: object, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _leaf(
    name: str,
    *,
    usage: x509.ObjectIdentifier,
    hosts: Sequence[str],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    days: int,
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(name, ca_name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(_san(hosts), critical=False)
    else:  # a client is named by its party name (what the services check)
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def create_local_ca(
    directory: Path,
    *,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    servers: Sequence[str] = SERVER_NAMES,
    clients: Sequence[str] = CLIENT_NAMES,
    days: int = 30,
) -> LocalCA:
    """Write a private CA and server and client certificates under ``directory``.

    The CA's own key goes to ``directory/ca/ca.key`` (keep it off the service
    machines); every other file is ``<name>.pem`` and ``<name>.key`` (mode 0600).

    Raises
    ------
    TlsConfigInvalid
        If a name is repeated, empty or not a simple file name, or ``days`` < 1.
    """
    names = [*servers, *clients]
    if len(set(names)) != len(names) or not all(n and n.isidentifier() for n in names):
        raise TlsConfigInvalid(f"servers and clients must be distinct simple names, got {names}")
    if not isinstance(days, int) or days < 1:
        raise TlsConfigInvalid(f"days must be an integer >= 1, got {days!r}")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("secure-fed try-out CA")
    ca_cert = (
        _builder("secure-fed try-out CA", ca_name, ca_key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca = LocalCA(directory)
    write_private(ca.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    write_private(directory / "ca" / "ca.key", _key_pem(ca_key))
    for name, usage in [
        *((s, ExtendedKeyUsageOID.SERVER_AUTH) for s in servers),
        *((c, ExtendedKeyUsageOID.CLIENT_AUTH) for c in clients),
    ]:
        cert, key = _leaf(name, usage=usage, hosts=hosts, ca_key=ca_key, ca_name=ca_name, days=days)
        write_private(ca.cert(name), cert)
        write_private(ca.key(name), key)
    return ca


def _readable(path: Path, what: str) -> Path:
    if not isinstance(path, Path) or not path.is_file():
        raise TlsConfigInvalid(f"{what} {path} is not a readable file")
    return path


@dataclass(frozen=True, kw_only=True)
class ClientTLS:
    """A client's TLS settings: the CA it trusts and, for mutual TLS, its certificate.

    Parameters
    ----------
    ca
        PEM file of the CA whose server certificates are accepted (no system CAs).
    cert, key
        The client certificate and key presented to servers that require one
        (both or neither).
    """

    ca: Path
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        _readable(self.ca, "ca")
        if (self.cert is None) != (self.key is None):
            raise TlsConfigInvalid("cert and key go together: give both or neither")
        if self.cert is not None and self.key is not None:
            _readable(self.cert, "cert")
            _readable(self.key, "key")

    def ssl_context(self) -> ssl.SSLContext:
        """Return a TLS >= 1.2 client context verifying the server against :attr:`ca`.

        Raises
        ------
        TlsConfigInvalid
            If a file does not parse as a certificate or key, or they do not match.
        """
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca))
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            if self.cert is not None and self.key is not None:
                context.load_cert_chain(str(self.cert), str(self.key))
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigInvalid(f"TLS files refused: {exc}") from exc
        return context


@dataclass(frozen=True, kw_only=True)
class ServerTLS:
    """A server's TLS settings.

    Parameters
    ----------
    cert, key
        The server's certificate chain and private key (PEM).
    client_ca
        CA whose client certificates the server requires (mutual TLS); ``None``
        accepts any client (server authentication only).
    client_name
        With ``client_ca``: the only client served, by the name in its
        certificate (DNS SAN, or the subject CN of a certificate without one).
    """

    cert: Path
    key: Path
    client_ca: Path | None = None
    client_name: str = AGGREGATOR_NAME

    def __post_init__(self) -> None:
        _readable(self.cert, "cert")
        _readable(self.key, "key")
        if self.client_ca is not None:
            _readable(self.client_ca, "client_ca")
        if not isinstance(self.client_name, str) or not self.client_name.strip():
            raise TlsConfigInvalid(f"client_name must be a name, got {self.client_name!r}")

    def uvicorn_options(self) -> dict[str, object]:
        """Keyword arguments of :func:`uvicorn.run` / ``uvicorn.Config`` for these settings."""
        options: dict[str, object] = {
            "ssl_certfile": str(self.cert),
            "ssl_keyfile": str(self.key),
        }
        if self.client_ca is not None:
            options["ssl_ca_certs"] = str(self.client_ca)
            options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return options

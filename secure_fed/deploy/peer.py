"""Who is on the other end of a mutual-TLS connection: the names in its certificate.

A certificate of the deployment's CA proves only that the CA issued it; every
party's certificate passes that check. A party service serves one client (the
aggregator), so it also checks the name in the client certificate the TLS layer
verified: its DNS subject alternative names or, for a certificate without any,
its subject common name (RFC 6125's order: a SAN present overrides the CN).

Public API::

    certificate_names(der) -> tuple[str, ...]
    require_peer(der | None, *, expected) -> None     # raises PeerRefused
"""

from __future__ import annotations

import hmac

from cryptography import x509
from cryptography.x509.oid import NameOID

from secure_fed.deploy.errors import PeerRefused

__all__ = ["certificate_names", "require_peer"]


def certificate_names(der: bytes) -> tuple[str, ...]:
    """Return the DNS SANs of a DER certificate, or its subject CN when it has none.

    Raises
    ------
    PeerRefused
        If ``der`` does not parse as an X.509 certificate.
    """
    try:
        cert = x509.load_der_x509_certificate(der)
    except (TypeError, ValueError) as exc:
        raise PeerRefused(f"the client certificate does not parse: {exc}") from exc
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        return tuple(san.value.get_values_for_type(x509.DNSName))
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return tuple(str(a.value) for a in common)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.lower().encode(), b.lower().encode())


def require_peer(der: bytes | None, *, expected: str) -> None:
    """Return None if the client certificate ``der`` names ``expected``; raise otherwise.

    Raises
    ------
    PeerRefused
        No client certificate, one that does not parse, or one of another name.
    """
    if not der:
        raise PeerRefused(f"no client certificate: only {expected!r} is served")
    names = certificate_names(der)
    if not any(_same(name, expected) for name in names):
        raise PeerRefused(f"the client certificate names {list(names)}, not {expected!r}")

"""Typed errors of a deployment: unreachable parties, bad replies, bad key or TLS files.

Each sits under the :mod:`secure_fed.errors` family a caller acts on: a party that
cannot be reached or answers nonsense released nothing (:class:`ReleaseRefused`, so a
round aborts exactly as on a refusal); a bad key directory or TLS file is the
operator's own configuration (:class:`ConfigurationInvalid`). Codes are documented in
``docs/audit/errors-secure-fed.md``.
"""

from __future__ import annotations

from secure_fed.errors import (
    ConfigurationInvalid,
    ReleaseRefused,
    RoundStateError,
    ServerRequestUnauthenticated,
)

__all__ = [
    "KeyDirectoryInvalid",
    "PartyReplyInvalid",
    "PartyUnavailable",
    "PeerRefused",
    "StoredPublicationInvalid",
    "TlsConfigInvalid",
]


class PartyUnavailable(ReleaseRefused):
    """A key authority or helper service could not be reached, timed out, or refused TLS.

    Nothing was released: the round aborts with the usual refusal path.
    """

    code = "DEPLOY_PARTY_UNAVAILABLE"


class PartyReplyInvalid(ReleaseRefused):
    """A party service answered with something that is neither its reply nor a known problem."""

    code = "DEPLOY_PARTY_REPLY_INVALID"


class KeyDirectoryInvalid(ConfigurationInvalid):
    """A party's key directory is missing a file, holds another party's, or is malformed."""

    code = "DEPLOY_KEY_DIRECTORY_INVALID"


class TlsConfigInvalid(ConfigurationInvalid):
    """TLS certificates, keys or CA files are missing or unusable, or TLS was half configured."""

    code = "DEPLOY_TLS_INVALID"


class PeerRefused(ServerRequestUnauthenticated):
    """A TLS client certificate of the deployment's CA names another party than the one served.

    The key authority and the helper serve the aggregator only: a participant's or
    another service's certificate passes the CA check but is refused (403, audited).
    """

    code = "DEPLOY_PEER_REFUSED"


class StoredPublicationInvalid(RoundStateError):
    """A published round's stored publication fails its integrity check; it is not sent.

    Its bytes do not match the SM3 stored with them or the SM3 the audit log
    recorded for the round, or they do not decode as that round's publication.
    """

    code = "DEPLOY_STORED_PUBLICATION_INVALID"

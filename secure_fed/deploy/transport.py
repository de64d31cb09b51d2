"""Server-to-server requests over HTTPS: a remote party is a callable, bytes in, bytes out.

The key authority and the helper already speak in bytes (signed or HMAC-tagged
frames of :mod:`secure_fed.wire`); :class:`RemoteParty` POSTs those bytes to a
party service (``application/octet-stream``) and returns the reply bytes, so the
aggregators of :mod:`secure_fed.secure.modes` run unchanged against a remote party.

A refusal comes back as an RFC 9457 problem (``application/problem+json``) whose
``code`` is one of our stable error codes; it is raised again here as the same
typed error class (:func:`error_for`), so ``except DecryptionRefused`` works across
the wire. A party that cannot be reached, times out or fails the TLS handshake
raises :class:`~secure_fed.deploy.errors.PartyUnavailable`; any other reply
raises :class:`~secure_fed.deploy.errors.PartyReplyInvalid`. Both are
:class:`~secure_fed.errors.ReleaseRefused`: the round aborts and nothing is released.
Requests are never retried (each carries a fresh nonce; the caller decides).

Public API (stable)::

    RemoteParty(base_url, path, *, tls: ClientTLS | None, timeout=60.0)  # bytes -> bytes
    RemoteDealer(base_url, path, *, tls, timeout)      # bytes -> (aggregator blob, helper blob)
    RemoteDecrypt(base_url, path, *, tls, timeout)     # (request, attestation) -> bytes
    AuthorityChannels(decrypt=, plan=, deal=, deal_range=, deal_compare=, deal_masks=)
    VerifierChannels(forward=, attest=)
    remote_authority(base_url, *, tls, timeout=60.0) -> AuthorityChannels
    remote_helper(base_url, *, tls, timeout=60.0) -> RemoteParty
    remote_verifier(base_url, *, tls, timeout=60.0) -> VerifierChannels
    pack_pair(a, b) -> bytes; unpack_pair(data) -> (a, b)
    pack_upload(envelope, round_id) -> bytes; unpack_upload(data) -> (envelope, round_id)
    error_for(code, detail) -> Exception
    AUTHORITY_PATHS, HELPER_PATH, VERIFIER_PATHS, ATTESTATION_HEADER, OCTET_STREAM

Verified release (ckks mode): the aggregator forwards every accepted upload, as its
participant signed it, to the verifier service (``POST /v1/verifier/upload``, body
:func:`pack_upload`), asks it to attest each signed decryption request (``POST
/v1/verifier/attest``: the reply is the attestation) and sends the attestation with
the request to the key authority's ``/v1/decrypt`` in the :data:`ATTESTATION_HEADER`
header (hex). A request without it, or with any other, is refused by the key
authority before anything is decrypted (``KEY_AUTHORITY_RELEASE_UNATTESTED``).
"""

from __future__ import annotations

import logging
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from crypto.errors import CryptoError
from secure_fed.deploy.errors import PartyReplyInvalid, PartyUnavailable, TlsConfigInvalid
from secure_fed.deploy.tls import ClientTLS
from secure_fed.errors import AuthorityRequestMalformed, SecureFedError

__all__ = [
    "ATTESTATION_HEADER",
    "AUTHORITY_PATHS",
    "HELPER_PATH",
    "OCTET_STREAM",
    "VERIFIER_PATHS",
    "AuthorityChannels",
    "RemoteDealer",
    "RemoteDecrypt",
    "RemoteParty",
    "VerifierChannels",
    "error_for",
    "pack_pair",
    "pack_upload",
    "remote_authority",
    "remote_helper",
    "remote_verifier",
    "unpack_pair",
    "unpack_upload",
]

_log = logging.getLogger(__name__)

OCTET_STREAM = "application/octet-stream"
PROBLEM_JSON = "application/problem+json"
#: Routes of the key authority service, by channel.
AUTHORITY_PATHS = {
    "decrypt": "/v1/decrypt",
    "plan": "/v1/plan",
    "deal": "/v1/deal",
    "deal_range": "/v1/deal-range",
    "deal_compare": "/v1/deal-compare",
    "deal_masks": "/v1/deal-masks",
}
#: Route of the helper service.
HELPER_PATH = "/v1/helper"
#: Routes of the verifier service (ckks mode), by channel.
VERIFIER_PATHS = {"upload": "/v1/verifier/upload", "attest": "/v1/verifier/attest"}
#: Header of ``/v1/decrypt`` carrying the verifier's attestation (hex of its bytes).
ATTESTATION_HEADER = "secure-fed-attestation"
_PAIR = struct.Struct(">Q")
#: Largest reply read from a party (a decrypted 10,000 x 10 aggregate is under 1 MB).
MAX_REPLY_BYTES = 512 << 20


def pack_pair(first: bytes, second: bytes) -> bytes:
    """Frame two blobs as one body: 8-byte big-endian length of ``first``, then both."""
    return _PAIR.pack(len(first)) + first + second


def unpack_pair(data: bytes) -> tuple[bytes, bytes]:
    """Split a body made by :func:`pack_pair`.

    Raises
    ------
    PartyReplyInvalid
        If the length prefix does not fit the body.
    """
    if len(data) < _PAIR.size:
        raise PartyReplyInvalid("a two-blob reply is shorter than its length prefix")
    (size,) = _PAIR.unpack_from(data)
    if size > len(data) - _PAIR.size:
        raise PartyReplyInvalid("a two-blob reply's length prefix exceeds the body")
    return data[_PAIR.size : _PAIR.size + size], data[_PAIR.size + size :]


def pack_upload(envelope: bytes, round_id: int) -> bytes:
    """Frame a forwarded upload: the round id (8 bytes, big-endian), then the envelope.

    Raises
    ------
    AuthorityRequestMalformed
        If ``round_id`` is not an integer in ``[0, 2^63)``.
    """
    if not isinstance(round_id, int) or not 0 <= round_id < 1 << 63:
        raise AuthorityRequestMalformed(f"round_id must be in [0, 2^63), got {round_id!r}")
    return _PAIR.pack(round_id) + envelope


def unpack_upload(data: bytes) -> tuple[bytes, int]:
    """Split a body made by :func:`pack_upload` into ``(envelope, round_id)``.

    Raises
    ------
    AuthorityRequestMalformed
        If the body is shorter than its round id.
    """
    if not isinstance(data, bytes) or len(data) <= _PAIR.size:
        raise AuthorityRequestMalformed("a forwarded upload is a round id and an envelope")
    (round_id,) = _PAIR.unpack_from(data)
    return data[_PAIR.size :], int(round_id)


def _error_classes() -> dict[str, type[Exception]]:
    found: dict[str, type[Exception]] = {}
    stack: list[type[Exception]] = [SecureFedError, CryptoError]
    while stack:
        cls = stack.pop()
        code = vars(cls).get("code")
        if isinstance(code, str):
            found.setdefault(code, cls)
        stack.extend(cls.__subclasses__())
    return found


def error_for(code: str, detail: str) -> Exception:
    """Return our typed error for a problem's ``code`` (:class:`PartyReplyInvalid` if unknown).

    The message is the problem's ``detail`` without the ``[CODE]`` prefix our errors add.
    """
    cls = _error_classes().get(code)
    message = detail.removeprefix(f"[{code}] ")
    if cls is None:
        return PartyReplyInvalid(f"the party refused with unknown code {code!r}: {message}")
    try:
        return cls(message)
    except TypeError:  # an error class with a richer constructor
        return PartyReplyInvalid(f"the party refused with {code}: {message}")


class RemoteParty:
    """A party service endpoint as a bytes channel (``channel(request) -> reply``).

    Parameters
    ----------
    base_url
        ``https://host:port`` of the service (``http://`` only with ``tls=None``).
    path
        The route, e.g. ``AUTHORITY_PATHS["decrypt"]`` or :data:`HELPER_PATH`.
    tls
        The CA to trust and the client certificate to present; ``None`` for a
        plain-HTTP development service (``--insecure-dev``).
    timeout
        Seconds for connecting and for the whole reply.

    Raises
    ------
    TlsConfigInvalid
        If the URL scheme does not match ``tls`` (https with TLS, http without).
    """

    def __init__(
        self, base_url: str, path: str, *, tls: ClientTLS | None, timeout: float = 60.0
    ) -> None:
        scheme = "https://" if tls is not None else "http://"
        if not isinstance(base_url, str) or not base_url.startswith(scheme):
            raise TlsConfigInvalid(f"base_url must start with {scheme} (tls={tls!r}): {base_url!r}")
        if not isinstance(path, str) or not path.startswith("/"):
            raise TlsConfigInvalid(f"path must start with '/', got {path!r}")
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise TlsConfigInvalid(f"timeout must be > 0 seconds, got {timeout!r}")
        self.url = base_url.rstrip("/") + path
        verify: ssl.SSLContext | bool = tls.ssl_context() if tls is not None else False
        self._client = httpx.Client(verify=verify, timeout=timeout, trust_env=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def __call__(self, request: bytes) -> bytes:
        """POST ``request`` and return the reply bytes (:meth:`post`)."""
        return self.post(request)

    def post(self, request: bytes, headers: dict[str, str] | None = None) -> bytes:
        """POST ``request`` (with extra ``headers``) and return the reply bytes.

        Raises
        ------
        PartyUnavailable
            The service cannot be reached, timed out, or the TLS handshake failed.
        PartyReplyInvalid
            An unexpected reply (status, content type, or unknown problem code).
        SecureFedError, CryptoError
            The party's own refusal, re-raised as the same typed error.
        """
        try:
            response = self._client.post(
                self.url, content=request, headers={**(headers or {}), "content-type": OCTET_STREAM}
            )
        except httpx.TimeoutException as exc:
            raise PartyUnavailable(f"{self.url} timed out: {exc}") from exc
        except (httpx.TransportError, ssl.SSLError) as exc:
            raise PartyUnavailable(f"{self.url} unreachable: {exc}") from exc
        return self._reply(response)

    def _reply(self, response: httpx.Response) -> bytes:
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        if response.status_code == 200 and kind == OCTET_STREAM:
            if len(response.content) > MAX_REPLY_BYTES:
                raise PartyReplyInvalid(f"{self.url} replied with more than {MAX_REPLY_BYTES} B")
            return response.content
        if kind == PROBLEM_JSON:
            raise self._problem(response)
        if response.status_code in (502, 503, 504):
            raise PartyUnavailable(f"{self.url} answered {response.status_code}")
        raise PartyReplyInvalid(f"{self.url} answered {response.status_code} {kind or 'no type'}")

    def _problem(self, response: httpx.Response) -> Exception:
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            return PartyReplyInvalid(f"{self.url} answered {response.status_code}, no code")
        code, detail = body["code"], str(body.get("detail", ""))
        _log.info("%s refused: %s", self.url, code)
        if response.status_code == 503 and code not in _error_classes():
            return PartyUnavailable(f"{self.url} is not serving: {code}: {detail}")
        return error_for(code, detail)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


class RemoteDealer(RemoteParty):
    """A dealing endpoint: the reply is two blobs (for the aggregator, for the helper)."""

    def __call__(self, request: bytes) -> tuple[bytes, bytes]:  # type: ignore[override]
        """POST ``request`` and return ``(aggregator blob, helper blob)``.

        Raises
        ------
        PartyUnavailable, PartyReplyInvalid, SecureFedError
            As :meth:`RemoteParty.__call__`.
        """
        return unpack_pair(super().__call__(request))


class RemoteDecrypt(RemoteParty):
    """The key authority's decrypt route: the request, with the verifier's attestation."""

    def __call__(self, request: bytes, attestation: bytes | None = None) -> bytes:
        """POST ``request`` (the attestation, if any, in :data:`ATTESTATION_HEADER`).

        Raises
        ------
        PartyUnavailable, PartyReplyInvalid, SecureFedError
            As :meth:`RemoteParty.__call__`.
        """
        if attestation is None:
            return self.post(request)
        return self.post(request, {ATTESTATION_HEADER: attestation.hex()})


class RemoteUpload(RemoteParty):
    """The verifier's upload route: ``forward(envelope, round_id) -> participant id``."""

    def __call__(self, envelope: bytes, round_id: int) -> str:  # type: ignore[override]
        """POST a forwarded upload; return the participant the verifier found it signed by.

        Raises
        ------
        PartyUnavailable, PartyReplyInvalid, SecureFedError
            As :meth:`RemoteParty.__call__` (a refusal is ``VERIFIER_UPLOAD_REFUSED``).
        """
        reply = self.post(pack_upload(envelope, round_id))
        try:
            return reply.decode("utf-8")
        except UnicodeDecodeError:
            raise PartyReplyInvalid(f"{self.url} replied with no participant id") from None


@dataclass(frozen=True, kw_only=True)
class VerifierChannels:
    """The aggregator's channels to the verifier (ckks mode; remote or in-process).

    ``forward(envelope, round_id)`` hands it an accepted upload as its participant signed
    it; ``attest(request)`` returns its attestation of a signed decryption request.
    """

    forward: Callable[[bytes, int], object]
    attest: Callable[[bytes], bytes]


def remote_verifier(
    base_url: str, *, tls: ClientTLS | None, timeout: float = 60.0
) -> VerifierChannels:
    """Return the channels to the verifier service at ``base_url``."""
    return VerifierChannels(
        forward=RemoteUpload(base_url, VERIFIER_PATHS["upload"], tls=tls, timeout=timeout),
        attest=RemoteParty(base_url, VERIFIER_PATHS["attest"], tls=tls, timeout=timeout),
    )


@dataclass(frozen=True, kw_only=True)
class AuthorityChannels:
    """The aggregator's channels to the key authority (remote or in-process).

    ``decrypt`` and ``plan`` serve the ``ckks`` mode, ``deal``, ``deal_range``,
    ``deal_compare`` (the copies step's comparison material) and ``deal_masks`` (the
    uploads' input masks, authenticated shares) the ``shares`` mode; a mode needs
    only its own.
    """

    decrypt: Callable[..., bytes] | None = None
    plan: Callable[[bytes], bytes] | None = None
    deal: Callable[[bytes], tuple[bytes, bytes]] | None = None
    deal_range: Callable[[bytes], tuple[bytes, bytes]] | None = None
    deal_compare: Callable[[bytes], tuple[bytes, bytes]] | None = None
    #: The dealer of the uploads' input masks (authenticated shares): one blob, the
    #: aggregator's (the helper derives its own from its dealer secret).
    deal_masks: Callable[[bytes], bytes] | None = None


def remote_authority(
    base_url: str, *, tls: ClientTLS | None, timeout: float = 60.0
) -> AuthorityChannels:
    """Return every channel of the key authority service at ``base_url``."""
    return AuthorityChannels(
        decrypt=RemoteDecrypt(base_url, AUTHORITY_PATHS["decrypt"], tls=tls, timeout=timeout),
        plan=RemoteParty(base_url, AUTHORITY_PATHS["plan"], tls=tls, timeout=timeout),
        deal=RemoteDealer(base_url, AUTHORITY_PATHS["deal"], tls=tls, timeout=timeout),
        deal_range=RemoteDealer(base_url, AUTHORITY_PATHS["deal_range"], tls=tls, timeout=timeout),
        deal_compare=RemoteDealer(
            base_url, AUTHORITY_PATHS["deal_compare"], tls=tls, timeout=timeout
        ),
        deal_masks=RemoteParty(base_url, AUTHORITY_PATHS["deal_masks"], tls=tls, timeout=timeout),
    )


def remote_helper(base_url: str, *, tls: ClientTLS | None, timeout: float = 60.0) -> RemoteParty:
    """Return the channel to the helper service at ``base_url``."""
    return RemoteParty(base_url, HELPER_PATH, tls=tls, timeout=timeout)

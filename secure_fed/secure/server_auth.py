"""Authenticated server-to-server requests: bound to round, purpose and a fresh nonce.

Two channels carry requests between servers, and both are authenticated here:

* aggregator -> key authority (CKKS decryptions, Beaver-triple dealing): an SM2
  signature (GB/T 32918, SM3 digest) by the aggregator's own key pair. The key
  authority keeps the signed request, so a decryption can be attributed to the
  aggregator afterwards by anyone holding its public key (non-repudiation: an
  HMAC shared with the key authority could have been forged by the key
  authority itself).
* aggregator <-> helper (shares mode): HMAC-SM3 under a 32-byte key only these
  two servers hold. In the two-server model each of them recomputes everything
  it releases from its own view, so what matters on this link is that nobody
  else can inject or replay a request; a third-party-verifiable signature adds
  nothing the helper's own log does not already show, and HMAC costs
  microseconds where pure-Python SM2 costs milliseconds.

A signed request is a normal frame of :mod:`secure_fed.wire` whose canonical
header carries ``auth`` (signer, nonce from :mod:`secrets`, round id, purpose,
SM3 of the payload) and ``signature`` (hex). The tag covers
``domain | magic | SM3(canonical header without "signature")``, so every header
field, the payload digest and the message kind are bound. A
:class:`RequestVerifier` refuses, with a typed error, a request that is unsigned,
signed by another key, altered, for another round or purpose than it claims, a
round older than one it already served, or a nonce it has already seen in this
round (the cache is per round and bounded).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey, sm3_digest
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
)
from secure_fed.wire import MessageKind, decode_frame, encode_frame, encode_header, kind_of

__all__ = [
    "ChannelKey",
    "FreshnessStore",
    "RequestVerifier",
    "ServerIdentity",
    "ServerSigningKey",
    "VerifiedRequest",
    "authenticate_request",
    "request_message",
]

_DOMAIN = b"secure-fed/server-request/v1|"
NONCE_BYTES = 16
#: Nonces remembered per round before the verifier refuses more requests of that round.
MAX_NONCES_PER_ROUND = 100_000


def _name(name: object) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        raise ModeSetupInvalid(f"server name must be a string of 1-64 characters, got {name!r}")
    return name


@dataclass(frozen=True)
class ServerIdentity:
    """A server's public identity: its name and SM2 public key (enrolled at deployment)."""

    name: str
    public_key: SM2PublicKey

    def __post_init__(self) -> None:
        _name(self.name)
        if not isinstance(self.public_key, SM2PublicKey):
            raise ModeSetupInvalid("public_key must be an SM2PublicKey")


class ServerSigningKey:
    """A server's SM2 key pair; opaque, never pickled, copied or shown by ``repr``."""

    __slots__ = ("_key", "_name")

    def __init__(self, *, name: str, key: SM2PrivateKey) -> None:
        if not isinstance(key, SM2PrivateKey):
            raise ModeSetupInvalid("key must be an SM2PrivateKey")
        self._name, self._key = _name(name), key

    @classmethod
    def generate(cls, name: str) -> ServerSigningKey:
        """Generate a fresh key pair for the server called ``name``."""
        return cls(name=name, key=SM2PrivateKey.generate())

    @property
    def identity(self) -> ServerIdentity:
        """The public identity other servers enrol."""
        return ServerIdentity(self._name, self._key.public_key)

    def tag(self, message: bytes) -> bytes:
        """SM2 signature of ``message`` (DER)."""
        return self._key.sign(message)

    def __repr__(self) -> str:
        return f"ServerSigningKey({self._name!r}, {self._key.public_key.fingerprint()[:12]}...)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("ServerSigningKey cannot be pickled")

    def __copy__(self) -> NoReturn:
        raise TypeError("ServerSigningKey cannot be copied")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("ServerSigningKey cannot be copied")


class ChannelKey:
    """HMAC-SM3 key of one server-to-server link (32 bytes from :mod:`secrets`); opaque."""

    __slots__ = ("_key", "_name")

    def __init__(self, *, name: str, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) < 32:
            raise ModeSetupInvalid("a channel key must be at least 32 bytes")
        self._name, self._key = _name(name), key

    @classmethod
    def generate(cls, name: str) -> ChannelKey:
        """Fresh random key for the link ``name`` (the sender's name in requests)."""
        return cls(name=name, key=secrets.token_bytes(32))

    @property
    def name(self) -> str:
        """The sender name requests under this key carry."""
        return self._name

    def tag(self, message: bytes) -> bytes:
        """HMAC-SM3 of ``message``."""
        return hmac.new(self._key, message, "sm3").digest()

    def check(self, message: bytes, tag: bytes) -> bool:
        """Constant-time comparison of ``tag`` with the HMAC of ``message``."""
        return hmac.compare_digest(self.tag(message), tag)

    def __repr__(self) -> str:
        return f"ChannelKey({self._name!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("ChannelKey cannot be pickled")

    def __copy__(self) -> NoReturn:
        raise TypeError("ChannelKey cannot be copied")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("ChannelKey cannot be copied")


Signer = ServerSigningKey | ChannelKey


def _signer_name(signer: Signer) -> str:
    return signer.identity.name if isinstance(signer, ServerSigningKey) else signer.name


def request_message(kind: MessageKind | bytes, signed_header: bytes) -> bytes:
    """Return the bytes a request tag covers: domain, kind magic, SM3 of the signed header."""
    return _DOMAIN + kind_of(kind).magic + sm3_digest(signed_header)


_message = request_message


def authenticate_request(
    kind: MessageKind | bytes,
    header: Mapping[str, object],
    payload: bytes = b"",
    *,
    signer: Signer,
    round_id: int,
    purpose: str,
) -> bytes:
    """Frame ``header`` and ``payload`` as a request signed (SM2) or MACed (HMAC-SM3).

    ``auth`` (signer, fresh nonce, round, purpose, payload SM3) is added to the
    header and the tag covers the whole canonical header.
    """
    spec = kind_of(kind)
    auth = {
        "signer": _signer_name(signer),
        "nonce": secrets.token_hex(NONCE_BYTES),
        "round_id": round_id,
        "purpose": purpose,
        "payload_sm3": sm3_digest(payload).hex(),
    }
    signed = {**header, "auth": auth}
    tag = signer.tag(_message(spec, encode_header(spec, signed)))
    return encode_frame(spec, {**signed, "signature": tag.hex()}, payload)


@dataclass(frozen=True)
class VerifiedRequest:
    """A request that passed :meth:`RequestVerifier.verify`.

    ``signed_header`` is the canonical header the tag covers; ``request_sm3``
    its SM3 (hex), the digest the audit log and the decryption log cite.
    """

    header: dict[str, object]
    payload: bytes
    signed_header: bytes
    signature: bytes
    request_sm3: str
    round_id: int
    purpose: str
    nonce: str
    signer: str


class FreshnessStore(Protocol):
    """A persisted record of served nonces (``secure_fed.secure.parties.nonces.NonceStore``)."""

    def claim(
        self, channel: str, round_id: int, nonce: str, *, any_round: bool, max_nonces: int
    ) -> None:
        """Record a nonce with the verifier's rules, or raise ``ServerRequestReplayed``."""
        ...


@dataclass
class RequestVerifier:
    """Checks tags, binding and freshness of one channel's requests (the receiver's side).

    Parameters
    ----------
    kind
        The message kind of this channel's requests.
    sender
        The enrolled sender: its SM2 :class:`ServerIdentity` or the link's :class:`ChannelKey`.
    max_nonces
        Bound of the per-round nonce cache; a round that exceeds it is refused.
    any_round
        For requests that belong to no round of their own (an upload's load and
        range check, which an aggregator restarted mid-round sends again under the
        newest round it knows): no round order is enforced, and the last
        ``max_nonces`` nonces of every round are remembered (oldest forgotten first).
    store, channel
        Keep the freshness record in ``store`` under ``channel`` (it survives a
        restart) instead of in memory; the rules are the same.
    """

    kind: MessageKind
    sender: ServerIdentity | ChannelKey
    max_nonces: int = MAX_NONCES_PER_ROUND
    any_round: bool = False
    store: FreshnessStore | None = field(default=None, repr=False)
    channel: str = "requests"
    _round: int = field(default=-1, repr=False)
    _nonces: set[str] = field(default_factory=set, repr=False)
    _recent: dict[str, None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.sender, ServerIdentity | ChannelKey):
            raise ModeSetupInvalid("sender must be a ServerIdentity or a ChannelKey")

    @property
    def sender_name(self) -> str:
        """The name requests must carry as ``auth.signer``."""
        return self.sender.name

    def verify(self, data: bytes, *, max_bytes: int | None = None) -> VerifiedRequest:
        """Decode ``data`` and return it verified; remember its nonce.

        Raises
        ------
        AuthorityRequestMalformed
            A malformed frame (from :func:`secure_fed.wire.decode_frame`).
        ServerRequestUnauthenticated
            No or a bad tag, another signer, a header or payload that does not match it.
        ServerRequestReplayed
            A nonce already served in this round, or a round older than the latest served.
        """
        header, payload = decode_frame(data, self.kind, max_bytes=max_bytes)
        request = self._check_tag(header, payload)
        self._check_fresh(request)
        return request

    def _check_tag(self, header: dict[str, object], payload: bytes) -> VerifiedRequest:
        raw_sig, auth = header.pop("signature", None), header.get("auth")
        if not isinstance(raw_sig, str) or not isinstance(auth, dict):
            _unauthenticated("the request is not signed")
        signer, nonce, round_id = auth.get("signer"), auth.get("nonce"), auth.get("round_id")
        if signer != self.sender_name:
            _unauthenticated(f"signer {signer!r} is not the enrolled {self.sender_name!r}")
        try:
            signature = bytes.fromhex(raw_sig)
        except ValueError:
            _unauthenticated("the signature is not hex")
        head = encode_header(self.kind, header)
        self._check_signature(_message(self.kind, head), signature)
        digest = sm3_digest(payload).hex()
        if not hmac.compare_digest(str(auth.get("payload_sm3")), digest):
            _unauthenticated("the payload does not match its signed digest")
        purpose = auth.get("purpose")
        if not isinstance(nonce, str) or len(nonce) != 2 * NONCE_BYTES:
            _unauthenticated("the request carries no nonce")
        if (
            not isinstance(round_id, int)
            or isinstance(round_id, bool)
            or not isinstance(purpose, str)
        ):
            _unauthenticated("the request names no round or purpose")
        if round_id < 0:
            raise AuthorityRequestMalformed("request needs an integer round_id >= 0")
        for name, signed in (("round_id", round_id), ("purpose", purpose)):
            if name in header and header[name] != signed:
                _unauthenticated(f"{name} {header[name]!r} differs from the signed {signed!r}")
        return VerifiedRequest(
            header,
            payload,
            head,
            signature,
            sm3_digest(head).hex(),
            round_id,
            purpose,
            nonce,
            signer,
        )

    def _check_signature(self, message: bytes, signature: bytes) -> None:
        if isinstance(self.sender, ChannelKey):
            if not self.sender.check(message, signature):
                _unauthenticated("the request's HMAC-SM3 tag is wrong")
            return
        try:
            self.sender.public_key.verify(message, signature)
        except CryptoError:
            _unauthenticated("the request's SM2 signature is wrong")

    def _check_fresh(self, request: VerifiedRequest) -> None:
        if self.store is not None:
            self.store.claim(
                self.channel,
                request.round_id,
                request.nonce,
                any_round=self.any_round,
                max_nonces=self.max_nonces,
            )
            return
        if self.any_round:
            if request.nonce in self._recent:
                raise ServerRequestReplayed("nonce already used")
            self._recent[request.nonce] = None
            if len(self._recent) > self.max_nonces:  # forget the oldest (insertion order)
                del self._recent[next(iter(self._recent))]
            return
        if request.round_id < self._round:
            raise ServerRequestReplayed(
                f"request for round {request.round_id} after round {self._round} was served"
            )
        if request.round_id > self._round:
            self._round, self._nonces = request.round_id, set()
        if request.nonce in self._nonces:
            raise ServerRequestReplayed(f"nonce already used in round {request.round_id}")
        if len(self._nonces) >= self.max_nonces:
            raise ServerRequestReplayed(
                f"round {request.round_id} exceeded {self.max_nonces} requests"
            )
        self._nonces.add(request.nonce)


def _unauthenticated(reason: str) -> NoReturn:
    raise ServerRequestUnauthenticated(reason)

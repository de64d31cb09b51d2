"""API tokens of the REST service: stored only as salted HMAC-SM3 hashes, with scopes and expiry.

A token is ``sft_<id>.<secret>``: ``id`` (16 hex characters) is the public
lookup key, ``secret`` 32 random bytes (``secrets.token_urlsafe``). The table
``api_tokens`` (migration ``0003``) keeps, per token, a fresh 16-byte salt and
``HMAC-SM3(salt, secret)`` (RFC 2104 over SM3, GB/T 32905); the secret itself
is never stored or logged. Verification recomputes the hash and compares with
:func:`hmac.compare_digest`; an unknown id is hashed against a dummy salt so
that unknown and wrong tokens cost the same. A fast keyed hash (rather than
scrypt) fits because the secret has 256 bits of entropy: there is nothing to
guess offline, and the API checks a token on every request.

Tokens live in the ledger database, so ``revoke`` and ``rotate`` take effect
on the next request of every worker process, without a restart.
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import JSON, CheckConstraint, Double, Engine, LargeBinary, String, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from crypto.sm import sm3_digest
from privacy_ledger.budget.participants import check_id
from privacy_ledger.errors import LedgerError, LedgerParameterInvalid, ParticipantUnknown
from privacy_ledger.models import Base, Participant

__all__ = [
    "ROLES",
    "ApiToken",
    "ApiTokenRow",
    "ApiTokenStore",
    "IssuedToken",
    "TokenError",
    "TokenExpired",
    "TokenInvalid",
    "TokenRevoked",
    "TokenUnknown",
    "hmac_sm3",
]

logger = logging.getLogger(__name__)

#: Roles a token can carry (docs/api.md says what each may do).
ROLES = ("participant", "officer", "admin", "service")
_PREFIX = "sft_"
_TOKEN = re.compile(r"^sft_([0-9a-f]{16})\.([A-Za-z0-9_-]{43})$")
_SCOPE = re.compile(r"^[a-z][a-z_]*:[a-z][a-z_]*$")
_BLOCK = 64  # SM3 block size in bytes
_MAX_TTL = 400 * 86400.0


class TokenError(LedgerError):
    """Base of the API-token errors: a presented token does not authenticate anyone."""

    code: ClassVar[str] = "LEDGER_TOKEN_ERROR"


class TokenInvalid(TokenError):
    """The presented token is malformed or its secret does not match (nothing says which)."""

    code = "LEDGER_TOKEN_INVALID"


class TokenExpired(TokenError):
    """The token passed its expiry time."""

    code = "LEDGER_TOKEN_EXPIRED"


class TokenRevoked(TokenError):
    """The token was revoked (or replaced by ``rotate``)."""

    code = "LEDGER_TOKEN_REVOKED"


class TokenUnknown(LedgerError):
    """An administrator named a token id that does not exist (revoke, rotate)."""

    code = "LEDGER_TOKEN_UNKNOWN"


def hmac_sm3(key: bytes, message: bytes) -> bytes:
    """Return HMAC-SM3 of ``message`` under ``key`` (RFC 2104, 64-byte block)."""
    if len(key) > _BLOCK:
        key = sm3_digest(key)
    key = key.ljust(_BLOCK, b"\0")
    inner = sm3_digest(bytes(b ^ 0x36 for b in key) + message)
    return sm3_digest(bytes(b ^ 0x5C for b in key) + inner)


class ApiTokenRow(Base):
    """One API token: role, optional participant, scopes, expiry, salt and hash of the secret."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint(
            "role IN (" + ", ".join(f"'{r}'" for r in ROLES) + ")",
            name="role",
        ),
    )

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    participant_id: Mapped[str | None] = mapped_column(String(128))
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    salt: Mapped[bytes] = mapped_column(LargeBinary)
    secret_hash: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float] = mapped_column(Double)
    revoked_at: Mapped[float | None] = mapped_column(Double)
    replaced_by: Mapped[str | None] = mapped_column(String(16))


@dataclass(frozen=True, kw_only=True)
class ApiToken:
    """What the ledger knows about a token (never its secret)."""

    id: str
    name: str
    role: str
    participant_id: str | None
    scopes: tuple[str, ...]
    created_at: float
    expires_at: float
    revoked_at: float | None = None
    replaced_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class IssuedToken:
    """A newly created token: ``secret`` is shown once and never stored."""

    token: ApiToken
    secret: str

    def __repr__(self) -> str:
        return f"IssuedToken(id={self.token.id!r}, role={self.token.role!r})"


def _info(row: ApiTokenRow) -> ApiToken:
    return ApiToken(
        id=row.id,
        name=row.name,
        role=row.role,
        participant_id=row.participant_id,
        scopes=tuple(str(s) for s in row.scopes),
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        replaced_by=row.replaced_by,
    )


def _check_fields(
    name: str, role: str, participant_id: str | None, scopes: Sequence[str], ttl: float
) -> None:
    if not isinstance(name, str) or not 0 < len(name.strip()) <= 128:
        raise LedgerParameterInvalid("name: must be 1-128 characters")
    if role not in ROLES:
        raise LedgerParameterInvalid(f"role: {role!r} is not one of {', '.join(ROLES)}")
    if (role == "participant") != (participant_id is not None):
        raise LedgerParameterInvalid("participant_id: required for role participant, else None")
    if participant_id is not None:
        check_id("participant_id", participant_id)
    if isinstance(scopes, str) or not all(isinstance(s, str) and _SCOPE.match(s) for s in scopes):
        raise LedgerParameterInvalid("scopes: a list of 'area:action' names (e.g. budgets:read)")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= _MAX_TTL:
        raise LedgerParameterInvalid(f"ttl_seconds: must be in (0, {_MAX_TTL:.0f}], got {ttl!r}")


class ApiTokenStore:
    """Create, authenticate, list, revoke and rotate API tokens in the ledger database.

    Parameters
    ----------
    engine
        Migrated ledger engine.
    clock
        Source of epoch seconds (injectable for expiry tests).
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(engine, Engine):
            raise LedgerParameterInvalid(f"engine: expected a SQLAlchemy Engine, got {engine!r}")
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._clock = clock
        self._dummy_salt = secrets.token_bytes(16)

    def create(
        self,
        *,
        name: str,
        role: str,
        participant_id: str | None = None,
        scopes: Sequence[str] = (),
        ttl_seconds: float = 90 * 86400.0,
    ) -> IssuedToken:
        """Create a token and return it with its secret (shown once).

        Raises
        ------
        LedgerParameterInvalid
            Naming the first invalid argument.
        ParticipantUnknown
            When ``participant_id`` is not a registered participant.
        """
        _check_fields(name, role, participant_id, scopes, ttl_seconds)
        token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        now = self._clock()
        row = ApiTokenRow(
            id=token_id,
            name=name,
            role=role,
            participant_id=participant_id,
            scopes=sorted(set(scopes)),
            salt=salt,
            secret_hash=hmac_sm3(salt, secret.encode("ascii")),
            created_at=now,
            expires_at=now + float(ttl_seconds),
            revoked_at=None,
            replaced_by=None,
        )
        with self._sessions() as session, session.begin():
            if participant_id is not None and session.get(Participant, participant_id) is None:
                raise ParticipantUnknown(f"participant_id: {participant_id!r} is not registered")
            session.add(row)
        logger.info("api token %s created (role %s)", token_id, role)
        return IssuedToken(token=_info(row), secret=f"{_PREFIX}{token_id}.{secret}")

    def authenticate(self, presented: str) -> ApiToken:
        """Return the token ``presented`` (``sft_<id>.<secret>``) if valid now.

        Raises
        ------
        TokenInvalid
            Malformed, unknown id or wrong secret (the message does not say which).
        TokenExpired, TokenRevoked
            For a token whose secret matched.
        """
        match = _TOKEN.match(presented) if isinstance(presented, str) else None
        if match is None:
            raise TokenInvalid("token: malformed (expected sft_<id>.<secret>)")
        with self._sessions() as session:
            row = session.get(ApiTokenRow, match[1])
        salt = row.salt if row is not None else self._dummy_salt
        expected = row.secret_hash if row is not None else b"\0" * 32
        computed = hmac_sm3(salt, match[2].encode("ascii"))
        if not hmac.compare_digest(computed, expected) or row is None:
            raise TokenInvalid("token: unknown or wrong secret")
        if row.revoked_at is not None:
            raise TokenRevoked(f"token {row.id}: revoked")
        if row.expires_at <= self._clock():
            raise TokenExpired(f"token {row.id}: expired")
        return _info(row)

    def get(self, token_id: str) -> ApiToken:
        """Return token ``token_id`` (valid or not) without authenticating it.

        Raises
        ------
        TokenUnknown
            When no token has this id.
        """
        with self._sessions() as session:
            row = session.get(ApiTokenRow, token_id)
        if row is None:
            raise TokenUnknown(f"token_id: {token_id!r} does not exist")
        return _info(row)

    def list(self) -> list[ApiToken]:
        """Return every token (revoked and expired included), oldest first."""
        with self._sessions() as session:
            rows = session.execute(select(ApiTokenRow).order_by(ApiTokenRow.created_at)).scalars()
            return [_info(r) for r in rows]

    def revoke(self, token_id: str) -> ApiToken:
        """Revoke ``token_id`` now; revoking twice keeps the first time.

        Raises
        ------
        TokenUnknown
            When no token has this id.
        """
        with self._sessions() as session, session.begin():
            row = session.get(ApiTokenRow, token_id, with_for_update=True)
            if row is None:
                raise TokenUnknown(f"token_id: {token_id!r} does not exist")
            if row.revoked_at is None:
                row.revoked_at = self._clock()
            info = _info(row)
        logger.info("api token %s revoked", token_id)
        return info

    def rotate(self, token_id: str, *, ttl_seconds: float = 90 * 86400.0) -> IssuedToken:
        """Replace ``token_id`` by a new token with the same name, role and scopes.

        Raises
        ------
        TokenUnknown
            When no token has this id.
        """
        old = self.get(token_id)
        issued = self.create(
            name=old.name,
            role=old.role,
            participant_id=old.participant_id,
            scopes=old.scopes,
            ttl_seconds=ttl_seconds,
        )
        with self._sessions() as session, session.begin():
            row = session.get(ApiTokenRow, token_id, with_for_update=True)
            if row is not None:
                row.revoked_at = row.revoked_at or self._clock()
                row.replaced_by = issued.token.id
        return issued

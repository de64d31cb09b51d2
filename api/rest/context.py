"""What every request of the service shares: the ledger, its audit log, tokens and keys.

:func:`build_context` is the composition root of the service: it opens the
ledger database (schema at the newest migration, created if the database is
empty), loads the audit log's signing key (denials are written to the log,
so the service refuses to start without it) and the optional report-signing
key. Nothing here holds per-request state: several worker processes over one
PostgreSQL database serve the same answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from api.rest.errors import ServiceMisconfigured
from api.rest.settings import ApiSettings
from compliance.errors import PartyLogsConfigInvalid
from compliance.parties import PartySource, run_folder_sources
from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey
from privacy_ledger import AuditLog, PrivacyLedger, RoundStore
from privacy_ledger.api_tokens import ApiTokenStore
from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow
from privacy_ledger.budget.receipts import ReceiptIssuer
from privacy_ledger.db import create_ledger_engine, upgrade

__all__ = ["AppContext", "build_context", "load_key"]

logger = logging.getLogger(__name__)

_MAX_KEY_BYTES = 1 << 16


@dataclass(frozen=True, kw_only=True)
class AppContext:
    """Shared, read-mostly state of one service process.

    Attributes
    ----------
    settings
        The typed settings.
    engine
        The ledger engine.
    sessions
        Session factory for the service's own queries.
    ledger
        Budget service writing its changes (and nothing else) to ``audit``.
    audit
        The audit log (denials, budget changes).
    rounds
        Rounds, uploads and decryption requests.
    tokens
        API tokens (revocation takes effect on the next request).
    report_key
        SM2 key signing exported JSON bundles, if configured.
    receipts
        Issuer of budget receipts (the ledger's receipt key), if configured.
    log_public_key
        The log's pinned public key, if configured.
    session_key
        Key of the console's session cookies.
    party_logs
        The key authority's and helper's audit logs to read (may be empty).
    party_logs_from
        Where :attr:`party_logs` came from (shown by the console and reports).
    """

    settings: ApiSettings
    engine: Engine
    sessions: sessionmaker[Session]
    ledger: PrivacyLedger
    audit: AuditLog
    rounds: RoundStore
    tokens: ApiTokenStore
    report_key: SM2PrivateKey | None
    receipts: ReceiptIssuer | None
    log_public_key: SM2PublicKey | None
    session_key: bytes
    party_logs: tuple[PartySource, ...] = ()
    party_logs_from: str = "none configured"

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()


def _read(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise ServiceMisconfigured(f"{what} {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_KEY_BYTES:
        raise ServiceMisconfigured(f"{what} {path}: larger than {_MAX_KEY_BYTES} bytes")
    return data


def load_key(path: Path, settings: ApiSettings, what: str) -> SM2PrivateKey:
    """Load an SM2 private key PEM, decrypting it with ``key_passphrase`` if encrypted.

    Raises
    ------
    ServiceMisconfigured
        When the file is unreadable, the passphrase missing or wrong, or an
        unencrypted key is used in production.
    """
    pem = _read(path, what)
    encrypted = b"ENCRYPTED PRIVATE KEY" in pem
    if not encrypted and settings.environment == "production" and not settings.api_insecure_dev:
        raise ServiceMisconfigured(f"{what} {path}: production refuses an unencrypted key")
    phrase = settings.key_passphrase
    if encrypted and phrase is None:
        raise ServiceMisconfigured(f"{what} {path} is encrypted: set SECURE_FED_KEY_PASSPHRASE")
    try:
        secret = phrase.get_secret_value().encode("utf-8") if encrypted and phrase else None
        return SM2PrivateKey.from_pem(pem, passphrase=secret)
    except CryptoError as exc:
        raise ServiceMisconfigured(f"{what} {path}: {exc}") from None


def _origin(engine: Engine, fallback: str) -> str:
    with engine.connect() as conn:
        stored = conn.execute(
            select(LogStateRow.origin).where(LogStateRow.id == LOG_STATE_ID)
        ).scalar_one_or_none()
    return stored or fallback


def build_context(settings: ApiSettings, *, migrate: bool = True) -> AppContext:
    """Open the ledger and keys named by ``settings``.

    Parameters
    ----------
    settings
        The service settings.
    migrate
        Bring the schema to the newest migration first (idempotent; serialized
        between processes on PostgreSQL).

    Raises
    ------
    ServiceMisconfigured
        When the audit signing key (or another configured key) cannot be loaded.
    DatabaseUrlInvalid
        For an unsupported database URL.
    """
    audit_key = load_key(settings.resolved_audit_key_file(), settings, "audit signing key")
    report_file, receipt_file = (
        settings.resolved_report_key_file(),
        settings.resolved_receipt_key_file(),
    )
    report_key = (
        None if report_file is None else load_key(report_file, settings, "report signing key")
    )
    receipt_key = None if receipt_file is None else load_key(receipt_file, settings, "receipt key")
    log_public_key = None
    if settings.api_log_public_key_file is not None:
        pem = _read(settings.api_log_public_key_file, "log public key")
        try:
            log_public_key = SM2PublicKey.from_pem(pem)
        except CryptoError as exc:
            raise ServiceMisconfigured(f"log public key: {exc}") from None
    folder, party_from = settings.resolved_party_logs_dir()
    try:
        parties = () if folder is None else run_folder_sources(folder)
    except PartyLogsConfigInvalid as exc:
        raise ServiceMisconfigured(f"api_party_logs_dir: {exc.message}") from None
    engine = create_ledger_engine(settings.resolved_database_url(), pool_size=10)
    if migrate:
        upgrade(engine)
    audit = AuditLog(signer=audit_key, origin=_origin(engine, settings.api_audit_origin))
    ledger = PrivacyLedger(engine, audit=audit)
    logger.info("REST service over %s (audit log %s)", engine.url.render_as_string(), audit)
    return AppContext(
        settings=settings,
        engine=engine,
        sessions=sessionmaker(engine, expire_on_commit=False),
        ledger=ledger,
        audit=audit,
        rounds=RoundStore(engine),
        tokens=ApiTokenStore(engine),
        report_key=report_key,
        receipts=None if receipt_key is None else ReceiptIssuer(ledger=ledger, key=receipt_key),
        log_public_key=log_public_key,
        session_key=settings.session_key(),
        party_logs=parties,
        party_logs_from=party_from,
    )

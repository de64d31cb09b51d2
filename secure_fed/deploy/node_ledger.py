"""A participant node's own privacy ledger (``budget.ledger_url``), every budget change audited.

A node without the ledger's API (a try-out) charges DP-SGD to a ledger of its
own. Like ``secure-fed budget set``, every budget it sets is written to that
ledger's tamper-evident audit log in the same transaction, signed by the log's
own key, so that ``secure-fed ledger verify`` finds no unaudited budget
(``LEDGER_BUDGET_UNAUDITED``). The key is ``budget.audit_key`` or, without it,
``log-signing-key.pem`` beside a SQLite ledger file (where ``secure-fed demo``
and ``budget set`` look for it). A fresh ledger with no key there gets one:
written mode 0600 unencrypted (a try-out, like the key ceremony's keys), with
``log-public-key.pem`` beside it for ``ledger verify --public-key``. A key that is
not the one of the log already in the ledger is refused, and so is a non-SQLite
ledger without ``budget.audit_key``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from sqlalchemy import Engine, inspect, select

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import LOG_STATE_ID, LogStateRow
from privacy_ledger.budget.service import PrivacyLedger
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import LedgerError
from secure_fed.deploy.config_errors import ParticipantConfigInvalid
from secure_fed.deploy.participant_config import ParticipantConfig
from secure_fed.federation.config import ASSET_ID

__all__ = ["OWN_KEY", "OWN_PUBLIC_KEY", "open_node_ledger", "sqlite_file"]

_log = logging.getLogger(__name__)

#: The ledger's own audit key beside a SQLite ledger file (the name ``budget set`` reads).
OWN_KEY = "log-signing-key.pem"
#: Its public key, for ``secure-fed ledger verify --public-key``.
OWN_PUBLIC_KEY = "log-public-key.pem"
_MAX_PEM = 1 << 14


def sqlite_file(url: str) -> Path | None:
    """Return the file of a ``sqlite:///PATH`` URL (``None`` for memory or other backends)."""
    match = re.match(r"sqlite(\+\w+)?:///([^?]*)", url)
    if match is None or match[2] in ("", ":memory:") or match[2].startswith("file:"):
        return None
    return Path(match[2])


def _logged(engine: Engine) -> tuple[str | None, str | None]:
    """Return the audit log's key fingerprint and origin (``None``: no log yet)."""
    if not inspect(engine).has_table(LogStateRow.__tablename__):
        return None, None
    with engine.connect() as conn:
        row = conn.execute(
            select(LogStateRow.key_fingerprint, LogStateRow.origin).where(
                LogStateRow.id == LOG_STATE_ID
            )
        ).first()
    return (None, None) if row is None else (row[0], row[1])


def _read_key(config: ParticipantConfig, path: Path) -> SM2PrivateKey:
    try:
        data = path.read_bytes()[: _MAX_PEM + 1]
        if len(data) > _MAX_PEM:
            raise ValueError("larger than a PEM key")
        return SM2PrivateKey.from_pem(data, passphrase=None)
    except (OSError, ValueError) as exc:
        raise ParticipantConfigInvalid(
            f"{config.source}: the ledger's audit key {path} cannot be read: {exc}",
            field="budget.audit_key",
        ) from None


def _write_own_key(config: ParticipantConfig, path: Path) -> SM2PrivateKey:
    """Generate the fresh ledger's audit key at ``path`` (0600) and its public key beside it.

    The key appears whole or not at all (written aside, then linked): another node
    sharing the ledger that linked its key first wins, and that key is read instead.
    """
    key = SM2PrivateKey.generate()
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.to_pem_unencrypted_insecure())
    try:
        os.link(aside, path)
    except FileExistsError:
        return _read_key(config, path)
    finally:
        aside.unlink()
    (path.parent / OWN_PUBLIC_KEY).write_bytes(key.public_key.to_pem())
    _log.info("new audit key of the node's ledger: %s (unencrypted, 0600)", path)
    return key


def _key_path(config: ParticipantConfig) -> Path:
    """Return ``budget.audit_key``, else the own key's place beside the SQLite ledger file.

    Raises
    ------
    ParticipantConfigInvalid
        A ledger that is not a SQLite file and no ``budget.audit_key`` (nothing opened yet).
    """
    if config.audit_key is not None:
        return config.audit_key
    file = sqlite_file(config.ledger_url)
    if file is None:
        raise ParticipantConfigInvalid(
            f"{config.source}: budget changes are always audited: a ledger that is not a "
            "SQLite file needs budget.audit_key (the log's SM2 key)",
            field="budget.audit_key",
        )
    return file.parent / OWN_KEY


def _audit_key(config: ParticipantConfig, path: Path, logged: str | None) -> SM2PrivateKey:
    """Return the log's key at ``path``; a new own key for a new log without one.

    Raises
    ------
    ParticipantConfigInvalid
        An unreadable key, or not the key of the log already in the ledger.
    """
    if config.audit_key is None and not path.exists() and logged is None:
        return _write_own_key(config, path)
    key = _read_key(config, path)
    if logged is not None and logged != key.public_key.fingerprint():
        raise ParticipantConfigInvalid(
            f"{config.source}: {path} is not the key of this ledger's audit log "
            f"(fingerprint {logged[:16]}...)",
            field="budget.audit_key",
        )
    return key


def open_node_ledger(config: ParticipantConfig) -> PrivacyLedger:
    """Open the node's ledger, audited; set its budget from ``dp`` when it has none yet.

    Raises
    ------
    ParticipantConfigInvalid
        No usable audit key (see the module docstring).
    """
    path = _key_path(config)
    engine = create_ledger_engine(config.ledger_url)
    upgrade(engine)
    logged, origin = _logged(engine)
    try:
        key = _audit_key(config, path, logged)
    except BaseException:
        engine.dispose()
        raise
    audit = AuditLog(signer=key, origin=origin or f"secure-fed/node/{config.participant_id}")
    ledger = PrivacyLedger(engine, audit=audit)
    pid = config.participant_id
    try:
        ledger.budget_status(pid, ASSET_ID)
    except LedgerError:  # a fresh local ledger: the node's own goal is its budget
        ledger.register_participant(pid, institution=pid, kind="other")
        ledger.register_asset(pid, ASSET_ID)
        ledger.set_budget(pid, ASSET_ID, epsilon=repr(config.epsilon), delta=config.delta)
    return ledger

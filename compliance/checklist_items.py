"""Checklist items about the ledger, the keys and where the log signing key lives."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

from sqlalchemy import select

from compliance.checklist_base import Facts, Item, Outcome
from crypto import CryptoError
from crypto.sm import SM2PublicKey
from privacy_ledger.audit.verify.log import stored_public_key, verify_log
from privacy_ledger.errors import LedgerError
from privacy_ledger.models import Budget, Participant

__all__ = ["LEDGER_ITEMS", "no_ledger"]


def no_ledger() -> Outcome:
    """Return the outcome of an item that needs the ledger when none is reachable."""
    return "fail", "no ledger database reachable (pass --db or [database] url)"


def _ledger_verifies(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    pinned = f.config.path("log", "public_key")
    try:
        key = SM2PublicKey.from_pem(pinned.read_bytes()) if pinned else stored_public_key(f.engine)
        if key is None:
            return "fail", "the audit log has no entries and no key yet"
        report = verify_log(f.engine, public_key=key)
    except (OSError, CryptoError, LedgerError) as exc:
        return "fail", f"audit log does not verify: {exc}"
    origin = "pinned key" if pinned else "key stored in the database (not pinned)"
    return "pass", (
        f"{report.tree_size} entries and {report.heads_checked} signed heads verify "
        f"with the {origin}; {report.unsigned_entries} entries not yet signed"
    )


def _log_key_pinned(f: Facts) -> Outcome:
    pinned = f.config.path("log", "public_key")
    if pinned is None:
        return "manual", (
            "obtain the log operator's public key out of band and set [log] "
            "public_key, so verification does not trust the database's copy"
        )
    if f.engine is None:
        return no_ledger()
    try:
        key, stored = SM2PublicKey.from_pem(pinned.read_bytes()), stored_public_key(f.engine)
    except (OSError, CryptoError, LedgerError) as exc:
        return "fail", f"cannot compare the pinned key: {exc}"
    if stored is None or stored.fingerprint() != key.fingerprint():
        return "fail", f"pinned key {key.fingerprint()[:16]} is not the log's key"
    return "pass", f"log key {key.fingerprint()[:16]}... matches the pinned key"


def _budgets(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    with f.engine.connect() as db:
        people = list(db.scalars(select(Participant.id).where(Participant.status == "active")))
        funded = set(db.scalars(select(Budget.participant_id).distinct()))
    if not people:
        return "fail", "no active participant is registered"
    missing = sorted(set(people) - funded)
    if missing:
        return "fail", f"no budget set for: {', '.join(missing)}"
    return "pass", f"all {len(people)} active participants have a budget"


def _participant_keys(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    with f.engine.connect() as db:
        rows = db.execute(select(Participant.id, Participant.public_key_pem)).all()
    if not rows:
        return "fail", "no participant is registered"
    missing = sorted(pid for pid, pem in rows if pem is None)
    if missing:
        return "fail", f"no SM2 public key registered for: {', '.join(missing)}"
    return "pass", f"all {len(rows)} participants have an SM2 public key registered"


def _key_file_problem(path: Path) -> str | None:
    try:
        mode, head = path.stat().st_mode, path.read_bytes()[:4096]
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if b"ENCRYPTED PRIVATE KEY" not in head:
        return f"{path}: not an encrypted PKCS#8 key"
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"{path}: readable by group or others (mode {stat.filemode(mode)})"
    return None


def _keys_at_rest(f: Facts) -> Outcome:
    files = f.config.paths("keys", "private_keys")
    log_key = f.config.path("log", "signing_key")
    if log_key is not None and log_key.exists():
        files.append(log_key)
    if not files:
        return "manual", (
            "list every private key file of this host under [keys] private_keys "
            "(they are checked for encryption and mode 0600)"
        )
    problems = [p for p in map(_key_file_problem, files) if p]
    if problems:
        return "fail", "; ".join(problems)
    return "pass", f"{len(files)} key files are encrypted PKCS#8 with owner-only access"


def _local_names() -> set[str]:
    return {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}


def _database_host(f: Facts) -> str | None:
    if f.config.get("database", "host"):
        return str(f.config.get("database", "host"))
    if f.engine is None:
        return None
    if f.engine.dialect.name == "sqlite":
        return socket.gethostname()
    return f.engine.url.host or socket.gethostname()


def _keys_beside_sqlite(f: Facts) -> list[Path]:
    if f.engine is None or f.engine.dialect.name != "sqlite" or not f.engine.url.database:
        return []
    folder = Path(f.engine.url.database).parent
    found = []
    for candidate in sorted(folder.glob("*.pem")) + sorted(folder.glob("*.key")):
        try:
            with candidate.open("rb") as handle:
                if b"PRIVATE KEY-----" in handle.read(4096):
                    found.append(candidate)
        except OSError:
            continue
    return found


def _signing_key_elsewhere(f: Facts) -> Outcome:
    db_host, key_file = _database_host(f), f.config.path("log", "signing_key")
    local_db = db_host is not None and db_host in _local_names()
    beside = _keys_beside_sqlite(f)
    if beside:
        names = ", ".join(str(p) for p in beside)
        return "fail", f"private keys lie next to the ledger database file: {names}"
    if key_file is not None and key_file.exists() and local_db:
        return "fail", f"the log signing key {key_file} is on the database host ({db_host})"
    signer = f.config.get("log", "signing_host")
    if signer and db_host:
        if signer in {db_host} or (signer in _local_names() and local_db):
            return "fail", f"the log signing key and the database are both on {db_host}"
        return "pass", f"log signing host {signer} differs from database host {db_host}"
    return "manual", (
        "confirm the log signing key is not on the database host; set [log] "
        "signing_host (and [database] host) to check it"
    )


#: Items about the ledger, keys and their placement.
LEDGER_ITEMS: list[Item] = [
    Item(
        "ledger.verifies", "Audit log verifies (Merkle tree, signed heads)", True, _ledger_verifies
    ),
    Item("ledger.log_key_pinned", "Log public key pinned out of band", False, _log_key_pinned),
    Item("budgets.every_participant", "A budget is set for every participant", True, _budgets),
    Item(
        "keys.participants_registered",
        "Every participant's SM2 key is registered",
        True,
        _participant_keys,
    ),
    Item(
        "keys.encrypted_at_rest",
        "Private keys encrypted at rest (PKCS#8, mode 0600)",
        True,
        _keys_at_rest,
    ),
    Item(
        "log.signing_key_not_on_database_host",
        "Log signing key not on the database host",
        True,
        _signing_key_elsewhere,
    ),
]

"""The other parties' audit logs: where they are, and reading each one verified.

The key authority and the helper each keep their own audit log (``<state>/audit.db``
by default, heads signed with the party's ``audit.key.pem``; see
``docs/deploy.md``). A report of a deployment covers them too: each log is
verified end to end as the ledger's own log is
(:func:`privacy_ledger.audit.verify.log.verify_log`: every entry's hash chain,
the Merkle roots, every signed head's SM2 signature), its origin must name the
party it is read as, and only a log that verifies contributes rows.

A ``secure-fed deploy local`` run folder holds every party's log and key
(:func:`run_folder_sources`), so a report needs no more than the folder:

* ``<run>/keyauthority/audit.db`` with ``<run>/keys/keyauthority/audit.key.pem``;
* ``<run>/helper/audit.db`` with ``<run>/keys/helper/audit.key.pem`` (shares mode
  only: ``party.json`` says the mode).

:func:`discover_run_folder` finds that folder from the ledger's SQLite file
(``<run>/ledger.db``) or the API's audit key (``<run>/keys/api/audit.key.pem``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from compliance.collect import snapshot
from compliance.derive import Deriver
from compliance.errors import PartyLogsConfigInvalid
from compliance.scope import NOT_RECORDED, Scope
from crypto import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.audit.verify.log import stored_public_key, verify_log
from privacy_ledger.errors import LedgerError

__all__ = [
    "PARTIES",
    "PartyLog",
    "PartyRead",
    "PartySource",
    "discover_run_folder",
    "read_party_logs",
    "run_folder_sources",
]

#: Party name in the audit fields -> its folder (state and keys) and log origin.
PARTIES = {"key_authority": "keyauthority", "helper": "helper"}
#: The party's name as people read it.
PARTY_TITLES = {"key_authority": "key authority", "helper": "helper"}
_MANIFEST = Path("keys") / "keyauthority" / "party.json"
_MAX_FILE = 1 << 20
#: Events of a party log shown besides its decryptions (what the party pinned and ran).
CONTEXT_EVENTS = ("policy.pinned", "policy.changed", "plan.installed", "service.started")


@dataclass(frozen=True, kw_only=True)
class PartySource:
    """Where one party's audit log is, and the key its heads must verify under.

    Attributes
    ----------
    party
        ``key_authority`` or ``helper`` (a key of :data:`PARTIES`).
    url
        SQLAlchemy URL of the party's audit database.
    public_key
        The party's log key obtained from its key directory (else the copy
        stored in the database is used, and the report says so).
    key_from
        Where :attr:`public_key` came from (shown in the report).
    """

    party: str
    url: str
    public_key: SM2PublicKey | None = None
    key_from: str = "the database's own copy (not pinned)"

    def __post_init__(self) -> None:
        if self.party not in PARTIES:
            raise PartyLogsConfigInvalid(
                f"party: {self.party!r} is not one of {', '.join(sorted(PARTIES))}"
            )

    @property
    def location(self) -> str:
        """The database as shown to people (a file path for SQLite)."""
        url = make_url(self.url)
        if url.get_backend_name() == "sqlite":
            return str(url.database)
        return url.render_as_string(hide_password=True)


@dataclass(frozen=True, kw_only=True)
class PartyLog:
    """One party log as read: included (verified) or not, and why."""

    party: str
    location: str
    included: bool
    status: str
    reason: str
    entries: int = 0
    heads_checked: int = 0
    newest_head_size: int = 0
    root: str = NOT_RECORDED
    key_fingerprint: str = NOT_RECORDED
    key_from: str = NOT_RECORDED

    def row(self) -> dict[str, Any]:
        """Return the report row of this log (section ``party_logs``)."""
        return {
            "party": self.party,
            "location": self.location,
            "included": self.included,
            "status": self.status,
            "reason": self.reason,
            "entries": self.entries,
            "heads_checked": self.heads_checked,
            "newest_head_size": self.newest_head_size,
            "root": self.root,
            "key_fingerprint": self.key_fingerprint,
            "key_from": self.key_from,
        }


@dataclass(frozen=True, kw_only=True)
class PartyRead:
    """Every configured party log, and the rows the verified ones give."""

    logs: tuple[PartyLog, ...] = ()
    decryptions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    configured_from: str = "none"

    def included(self, party: str) -> bool:
        """Whether ``party``'s log was read and verified."""
        return any(log.party == party and log.included for log in self.logs)


def _read_key(path: Path) -> SM2PublicKey | None:
    try:
        with path.open("rb") as handle:
            pem = handle.read(_MAX_FILE)
    except OSError:
        return None
    try:
        if b"PRIVATE KEY" in pem:
            return SM2PrivateKey.from_pem(pem, passphrase=None).public_key
        return SM2PublicKey.from_pem(pem)
    except CryptoError:
        return None


def run_folder_sources(run: Path) -> tuple[PartySource, ...]:
    """Return the party logs a ``deploy local`` run folder holds (the helper in shares mode).

    Raises
    ------
    PartyLogsConfigInvalid
        ``run`` is not a run folder (no ``keys/keyauthority/party.json``).
    """
    run = Path(run)
    try:
        with (run / _MANIFEST).open("rb") as handle:
            mode = json.loads(handle.read(_MAX_FILE)).get("mode")
    except (OSError, ValueError, AttributeError) as exc:
        raise PartyLogsConfigInvalid(
            f"party logs: {run} is not a deployment folder (cannot read {_MANIFEST}: {exc})"
        ) from None
    parties = ["key_authority"] + (["helper"] if mode == "shares" else [])
    sources = []
    for party in parties:
        folder = PARTIES[party]
        key_file = run / "keys" / folder / "audit.key.pem"
        key = _read_key(key_file)
        sources.append(
            PartySource(
                party=party,
                url=f"sqlite:///{(run / folder / 'audit.db').as_posix()}",
                public_key=key,
                key_from=str(key_file)
                if key is not None
                else "the database's own copy (not pinned)",
            )
        )
    return tuple(sources)


def discover_run_folder(*, database_url: str | None, audit_key: Path | None = None) -> Path | None:
    """Return the ``deploy local`` folder the ledger or the API's key lies in, if any."""
    candidates: list[Path] = []
    if database_url:
        url = make_url(database_url)
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            candidates.append(Path(str(url.database)).resolve().parent)
    if audit_key is not None and len(Path(audit_key).resolve().parents) > 2:
        candidates.append(Path(audit_key).resolve().parents[2])
    return next((c for c in candidates if (c / _MANIFEST).is_file()), None)


def _missing(source: PartySource, reason: str) -> PartyLog:
    return PartyLog(
        party=source.party,
        location=source.location,
        included=False,
        status="missing",
        reason=reason,
    )


def _open(source: PartySource) -> Engine | str:
    from privacy_ledger.db import create_ledger_engine

    url = make_url(source.url)
    if url.get_backend_name() == "sqlite":
        path = Path(str(url.database))
        if not path.is_file():
            return f"no audit database at {path}: the party never started, or its log was removed"
    try:
        return create_ledger_engine(source.url)
    except LedgerError as exc:
        return f"cannot open the audit database: {exc}"


def _verify(source: PartySource, engine: Session) -> PartyLog | tuple[PartyLog, int, int]:
    origin = f"secure-fed/{PARTIES[source.party]}"
    try:
        key = source.public_key or stored_public_key(engine)
        if key is None:
            return _missing(source, "the audit database holds no entry and no key")
        report = verify_log(engine, public_key=key)
    except LedgerError as exc:
        return PartyLog(
            party=source.party,
            location=source.location,
            included=False,
            status="unverified",
            reason=f"does not verify, so none of its entries is used: {exc}",
        )
    fails = None
    if report.origin != origin:
        fails = (
            f"its origin is {report.origin!r}, not the {PARTY_TITLES[source.party]}'s {origin!r}"
        )
    elif report.latest_head_size == 0:
        fails = "it has no signed tree head"
    log = PartyLog(
        party=source.party,
        location=source.location,
        included=fails is None,
        status="verified" if fails is None else "unverified",
        reason=fails
        or (
            f"{report.tree_size} entries and {report.heads_checked} signed heads verify; "
            f"{report.unsigned_entries} entries after the newest signed head"
        ),
        entries=report.tree_size,
        heads_checked=report.heads_checked,
        newest_head_size=report.latest_head_size,
        root=report.root_hash.hex(),
        key_fingerprint=report.key_fingerprint,
        key_from=source.key_from,
    )
    return log if fails is not None else (log, report.tree_size, report.latest_head_size)


def _requester(fields: dict[str, Any], party: str) -> str:
    for name in ("requester", "signer"):
        if isinstance(fields.get(name), str):
            return str(fields[name])
    if party == "helper":
        return "aggregator (the channel key's only other holder)"
    return NOT_RECORDED


class _Rows:
    """Turns one party's verified entries into report rows."""

    def __init__(self, party: str, read: PartyRead, scope: Scope, signed: int) -> None:
        self.party, self.read, self.signed = party, read, signed
        self.pending: dict[tuple[object, object, str], str] = {}
        self.deriver = Deriver(scope=scope, sink=self._sink)
        self.fields: dict[str, Any] = {}

    def _sink(self, section: str, row: dict[str, Any]) -> None:
        if section != "decryptions":
            return
        f = self.fields
        key = (row["round"], row["purpose"], json.dumps(f.get("participant_ids")))
        requester = _requester(f, self.party)
        if row["event"] == "decryption.requested":
            self.pending[key] = requester
        elif requester == NOT_RECORDED:
            requester = self.pending.get(key, NOT_RECORDED)
        if row["purpose"] == NOT_RECORDED and isinstance(f.get("op"), str):
            row = {**row, "purpose": f"op {f['op']}"}  # a refused plan, deal...
        self.read.decryptions.append(
            {
                **row,
                "source": f"{PARTY_TITLES[self.party]} audit log",
                "log": self.party,
                "requester": requester,
                "step": f.get("step", NOT_RECORDED),
                # under the party's newest signed head, or protected by the hash chain only
                "signed_head": int(row["entry"]) < self.signed,
            }
        )

    def feed(self, index: int, entry: dict[str, Any]) -> None:
        self.fields = entry["fields"] if isinstance(entry.get("fields"), dict) else {}
        self.deriver.feed(index, entry)
        if entry["event"] in CONTEXT_EVENTS and self.deriver.scope.in_period(entry["time"]):
            self.read.events.append(_context_row(self.party, index, entry, self.fields))


def _context_row(
    party: str, index: int, entry: dict[str, Any], f: dict[str, Any]
) -> dict[str, Any]:
    detail = {
        k: f[k]
        for k in ("policy_sm3", "version", "plan_sm3", "min_participants", "tls", "mode", "address")
        if k in f
    }
    return {
        "log": party,
        "source": f"{PARTY_TITLES[party]} audit log",
        "entry": index,
        "time": entry["time"],
        "event": entry["event"],
        "round": f.get("round_id", NOT_RECORDED),
        "detail": detail,
    }


def _scan(session: Session, size: int, rows: _Rows) -> None:
    result = session.execute(
        select(AuditEntryRow.entry_index, AuditEntryRow.entry)
        .where(AuditEntryRow.entry_index < size)
        .order_by(AuditEntryRow.entry_index)
        .execution_options(yield_per=2000)
    )
    for index, data in result:
        rows.feed(int(index), canonical.decode(data))


def read_party_logs(
    sources: Iterable[PartySource], *, scope: Scope | None = None, configured_from: str = "none"
) -> PartyRead:
    """Verify and read every party log of ``sources`` (see the module docstring).

    A log that is missing, unreadable or does not verify is listed with the
    reason and contributes no row; it never raises.
    """
    read = PartyRead(configured_from=configured_from)
    logs = []
    for source in sources:
        opened = _open(source)
        if isinstance(opened, str):
            logs.append(_missing(source, opened))
            continue
        try:
            with snapshot(opened) as session:  # verified and read in one snapshot
                checked = _verify(source, session)
                if isinstance(checked, tuple):
                    log, size, signed = checked
                    _scan(session, size, _Rows(source.party, read, scope or Scope(), signed))
                else:
                    log = checked
        except SQLAlchemyError as exc:
            log = _missing(source, f"cannot read the audit database: {type(exc).__name__}")
        finally:
            opened.dispose()
        logs.append(log)
    return PartyRead(
        logs=tuple(logs),
        decryptions=read.decryptions,
        events=read.events,
        configured_from=configured_from,
    )

"""Adapter from the secure-aggregation :class:`AuditSink` to the ledger's tamper-evident log.

The key authority, the helper, the outlier policy and the envelope gate write
their events (``decryption.*``, ``outlier.decision``, ``upload.rejected``,
``access.denied``, ``key.generated``) through the small
:class:`secure_fed.secure.scoring.outlier.AuditSink` protocol. :class:`LedgerAuditSink` appends
each one to :class:`privacy_ledger.audit.log.AuditLog` (canonical JSON, SM3 Merkle
tree in the style of RFC 6962, SM2-signed heads), one transaction per event.
Canonical JSON has no floats, so floats become their shortest ``repr`` string.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from privacy_ledger.audit.log import AuditLog

__all__ = ["LedgerAuditSink", "canonical_fields"]


def canonical_fields(details: Mapping[str, object]) -> dict[str, object]:
    """Make ``details`` canonical-JSON safe: floats to strings, tuples to lists."""
    return {str(k): _value(v) for k, v in details.items()}


def _value(value: object) -> object:
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if isinstance(value, Mapping):
        return canonical_fields(value)
    return str(value)


def _subject(details: Mapping[str, object]) -> str:
    pid = details.get("participant_id")
    if isinstance(pid, str) and pid:
        return f"participant:{pid}"
    rid = details.get("round_id")
    if isinstance(rid, int):
        return f"round:{rid}"
    return "secure_fed:aggregation"


class LedgerAuditSink:
    """Append every event to an :class:`AuditLog`, each in its own committed transaction.

    Parameters
    ----------
    engine
        The ledger database engine (migrated).
    log
        The audit log (holds the SM2 signing key of tree heads).
    """

    def __init__(self, *, engine: Engine, log: AuditLog) -> None:
        self.engine, self.log = engine, log

    def record(self, event: str, details: Mapping[str, object]) -> None:
        """Append one event; raises the log's errors (e.g. ``UnknownEventType``)."""
        with Session(self.engine) as session:
            self.log.append(session, event=event, subject=_subject(details),
                            fields=canonical_fields(details))  # fmt: skip
            self.log.checkpoint(session)
            session.commit()

"""Typed errors of the ``privacy_ledger`` package, each with a stable code.

Add narrow subclasses at the end of this file; give each a heading
``### CODE`` in ``docs/audit/errors-ledger.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import ClassVar

__all__ = ["LedgerError"]


class LedgerError(Exception):
    """Base of every error raised by the ``privacy_ledger`` package.

    Parameters
    ----------
    message
        Human-readable explanation naming what was wrong.
    """

    code: ClassVar[str] = "LEDGER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


# --- Audit log (privacy_ledger.audit.log, merkle, proofs, checkpoint, canonical, events) ---


class AuditParameterInvalid(LedgerError):
    """An audit-log constructor or call received an argument outside its documented range."""

    code = "LEDGER_AUDIT_PARAMETER_INVALID"


class CanonicalJSONInvalid(LedgerError):
    """A value cannot be encoded as, or bytes are not, canonical JSON (floats, NaN, bad keys)."""

    code = "LEDGER_CANONICAL_JSON_INVALID"


class UnknownEventType(LedgerError):
    """An audit event name is not in the event registry; the message lists allowed names."""

    code = "LEDGER_EVENT_UNKNOWN"


class ProofInvalid(LedgerError):
    """A Merkle inclusion or consistency proof does not verify (base of the proof errors)."""

    code = "LEDGER_PROOF_INVALID"


class ProofRangeInvalid(ProofInvalid):
    """Proof indexes or tree sizes are out of range (index >= size, size2 < size1, ...)."""

    code = "LEDGER_PROOF_RANGE_INVALID"


class ProofSizeInvalid(ProofInvalid):
    """A proof has the wrong number of hashes for the given index and tree sizes."""

    code = "LEDGER_PROOF_SIZE_INVALID"


class HashSizeInvalid(ProofInvalid):
    """A leaf, node or root hash does not have the hash function's digest size."""

    code = "LEDGER_HASH_SIZE_INVALID"


class RootMismatch(ProofInvalid):
    """The root recomputed from a proof differs from the expected root."""

    code = "LEDGER_ROOT_MISMATCH"

    def __init__(self, message: str, *, expected: bytes, calculated: bytes) -> None:
        super().__init__(message)
        self.expected = expected
        self.calculated = calculated


class CheckpointMalformed(LedgerError):
    """Checkpoint (signed tree head) bytes do not follow the C2SP checkpoint format."""

    code = "LEDGER_CHECKPOINT_MALFORMED"


class CheckpointSignatureInvalid(LedgerError):
    """A checkpoint's SM2 signature does not verify under the log's public key."""

    code = "LEDGER_CHECKPOINT_SIGNATURE_INVALID"


class LogTampered(LedgerError):
    """Verification found the audit log altered; ``entry_index`` names the first bad entry.

    Attributes
    ----------
    entry_index
        Index of the first entry found altered, missing or inserted (None when
        the fault is in a signed head only).
    tree_size
        Size of the signed head involved, if any.
    """

    code = "LEDGER_LOG_TAMPERED"

    def __init__(
        self, message: str, *, entry_index: int | None = None, tree_size: int | None = None
    ) -> None:
        super().__init__(message)
        self.entry_index = entry_index
        self.tree_size = tree_size


class HeadTampered(LogTampered):
    """A stored signed tree head was altered: bad signature, body or origin."""

    code = "LEDGER_HEAD_TAMPERED"


class HeadsInconsistent(LogTampered):
    """Two consecutive signed tree heads are not consistent (history was rewritten)."""

    code = "LEDGER_HEADS_INCONSISTENT"


class HeadSigningRefused(LedgerError):
    """The log refused to sign a tree head inconsistent with its last signed head."""

    code = "LEDGER_HEAD_SIGNING_REFUSED"


class LogKeyMismatch(LedgerError):
    """The signer, origin or pinned public key differs from the one recorded for the log."""

    code = "LEDGER_LOG_KEY_MISMATCH"


class LogNotInitialized(LedgerError):
    """The audit tables or the log's state row are missing (run the migrations, append once)."""

    code = "LEDGER_LOG_NOT_INITIALIZED"


class EvidenceUnavailable(LedgerError):
    """A sensitive evidence field is absent, or no evidence key was configured to seal it."""

    code = "LEDGER_EVIDENCE_UNAVAILABLE"


class EvidenceUnreadable(LedgerError):
    """A sensitive evidence field failed authenticated decryption (wrong key or tampering)."""

    code = "LEDGER_EVIDENCE_UNREADABLE"


# --- budgets and accounting (privacy_ledger.db, accountant, budgets, calibration, rounds) ---


class DatabaseUrlInvalid(LedgerError):
    """The ledger database URL is empty or names an unsupported backend."""

    code = "LEDGER_DATABASE_URL_INVALID"


class LedgerParameterInvalid(LedgerError):
    """A ledger call got an argument outside its documented range or set (named in the message)."""

    code = "LEDGER_PARAMETER_INVALID"


class AccountantNotAllowed(LedgerError):
    """The accountant is not registered for enforcement (GDP is refused: it can underestimate)."""

    code = "LEDGER_ACCOUNTANT_NOT_ALLOWED"


class ParticipantUnknown(LedgerError):
    """No participant with this id is registered."""

    code = "LEDGER_PARTICIPANT_UNKNOWN"


class ParticipantConflict(LedgerError):
    """A participant with this id is already registered with different attributes."""

    code = "LEDGER_PARTICIPANT_CONFLICT"


class ParticipantSuspended(LedgerError):
    """The participant is suspended: no new reservations are accepted."""

    code = "LEDGER_PARTICIPANT_SUSPENDED"


class AssetUnknown(LedgerError):
    """The participant has no data asset with this id."""

    code = "LEDGER_ASSET_UNKNOWN"


class BudgetNotSet(LedgerError):
    """No budget is set for this participant and asset, so nothing can be reserved."""

    code = "LEDGER_BUDGET_NOT_SET"


class BudgetExceeded(LedgerError):
    """The projected epsilon of a request exceeds the budget; nothing was recorded as spent.

    Parameters
    ----------
    message
        Human-readable explanation.
    limit, spent, reserved, requested
        Epsilon limit; epsilon of the committed history; extra epsilon held by
        active reservations; extra epsilon the refused request would add (all
        :class:`~decimal.Decimal`, rounded up to the ledger's quantum).
    """

    code = "LEDGER_BUDGET_EXCEEDED"

    def __init__(
        self,
        message: str,
        *,
        limit: Decimal,
        spent: Decimal,
        reserved: Decimal,
        requested: Decimal,
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.spent = spent
        self.reserved = reserved
        self.requested = requested


class ReservationUnknown(LedgerError):
    """No reservation with this id exists."""

    code = "LEDGER_RESERVATION_UNKNOWN"


class ReservationNotActive(LedgerError):
    """The reservation was already resolved in a way that forbids this call."""

    code = "LEDGER_RESERVATION_NOT_ACTIVE"


class ReservationExpired(LedgerError):
    """The reservation expired and its epsilon no longer fits: do not release anything."""

    code = "LEDGER_RESERVATION_EXPIRED"


class ReceiptInvalid(LedgerError):
    """A budget receipt is malformed, badly signed, expired or bound to something else."""

    code = "LEDGER_RECEIPT_INVALID"


class ReceiptUnavailable(LedgerError):
    """No committed reservation of that participant and round exists to issue a receipt for."""

    code = "LEDGER_RECEIPT_UNAVAILABLE"


class CalibrationImpossible(LedgerError):
    """No noise multiplier keeps the history plus the plan within the target epsilon."""

    code = "LEDGER_CALIBRATION_IMPOSSIBLE"


class RoundUnknown(LedgerError):
    """No round with this id is stored."""

    code = "LEDGER_ROUND_UNKNOWN"


class MechanismInvalid(LedgerParameterInvalid, ValueError):
    """A :class:`~privacy_ledger.MechanismEvent` field is out of range (also a ``ValueError``)."""

    code = "LEDGER_MECHANISM_INVALID"


class SchemaOutdated(LedgerError):
    """The database schema is missing or older than this code's migrations."""

    code = "LEDGER_SCHEMA_OUTDATED"


class ReservationConflict(LedgerError):
    """A reservation's request id was already used for another budget, round or mechanism."""

    code = "LEDGER_RESERVATION_CONFLICT"


class BudgetUnaudited(LedgerError):
    """A stored budget differs from what the audit log's ``budget.set`` entries record.

    Attributes
    ----------
    disagreements
        One :class:`~privacy_ledger.audit.verify.budgets.BudgetDisagreement` per item.
    """

    code = "LEDGER_BUDGET_UNAUDITED"

    def __init__(self, message: str, *, disagreements: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.disagreements = tuple(disagreements)


# --- Ledger seal and row log (privacy_ledger.audit.rows, audit.verify.rows) ---


class LedgerSealError(LedgerError):
    """Base of the ledger-seal findings: a covered row or ``log_state`` fails its seal.

    Attributes
    ----------
    table, row_key, column
        Where the fault is (``None`` when it is not about one row or column).
    """

    code = "LEDGER_SEAL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        row_key: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.table, self.row_key, self.column = table, row_key, column


class LedgerNotSealed(LedgerSealError):
    """The ledger was written before ledger seals and never sealed since: rows are not covered."""

    code = "LEDGER_NOT_SEALED"


class StateTampered(LedgerSealError):
    """``log_state`` differs from its SM2 seal (e.g. a truncated tail with edited counters)."""

    code = "LEDGER_STATE_TAMPERED"


class RowLogTampered(LedgerSealError):
    """A record of the row log is altered, missing or out of its SM3 chain."""

    code = "LEDGER_ROW_LOG_TAMPERED"


class RowAltered(LedgerSealError):
    """A stored column value differs from the digest the row log recorded for it."""

    code = "LEDGER_ROW_ALTERED"


class RowDeleted(LedgerSealError):
    """A row the row log records as present is missing from its table."""

    code = "LEDGER_ROW_DELETED"


class RowUnrecorded(LedgerSealError):
    """A row is stored that the row log never recorded (inserted outside the ledger)."""

    code = "LEDGER_ROW_UNRECORDED"

"""The tamper-evident audit log: canonical JSON entries in an SM3 Merkle tree, SM2-signed heads.

Design after Certificate Transparency (RFC 6962 / RFC 9162) and the C2SP
``tlog-checkpoint`` format: every entry is a Merkle leaf, the log signs tree
heads in batches (every ``checkpoint_every`` entries or ``checkpoint_seconds``),
and anyone holding the public key verifies the whole log (see
:mod:`privacy_ledger.audit.verify.log`). Entries also carry the previous leaf hash
(``prev``), so an altered, inserted or removed row is located precisely.

Sensitive evidence fields are sealed with SM4-GCM (RFC 8998) under a key
separate from the signing key, with associated data binding the origin, the
entry index and the field name; the leaf hashes the stored ciphertext, so
verification needs no decryption key.

Every transaction that appends or signs also renews the *ledger seal*, an SM2
signature over ``log_state`` and the row log of the covered tables
(:mod:`privacy_ledger.audit.rows`), so a tail removed together with consistent
``log_state`` edits, or a changed round, upload or budget row, is detected.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from crypto.sm import SM4GCM, SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.checkpoint import SignedTreeHead, check_origin
from privacy_ledger.audit.events import DEFAULT_REGISTRY, AuditEvent, EventRegistry
from privacy_ledger.audit.evidence import evidence_associated_data, seal, unseal
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.audit.models import LOG_STATE_ID, AuditEntryRow, LogStateRow
from privacy_ledger.audit.proofs import consistency_proof, inclusion_proof
from privacy_ledger.audit.rows import SEAL_KEY, Sealer, cover_engine, covering_log
from privacy_ledger.audit.signing import HeadSigner
from privacy_ledger.audit.store import (
    GENESIS_PREV,
    TAIL_KEY,
    AppendTail,
    TreeCache,
    claim_state,
    load_entry,
    lock_state,
)
from privacy_ledger.errors import (
    AuditParameterInvalid,
    CanonicalJSONInvalid,
    EvidenceUnavailable,
    ProofRangeInvalid,
)

__all__ = ["AuditLog", "ENTRY_VERSION", "GENESIS_PREV", "evidence_associated_data"]

logger = logging.getLogger(__name__)

#: Version of the entry format (the ``v`` field).
ENTRY_VERSION = 1


def _check_subject(subject: str) -> str:
    if not isinstance(subject, str) or not subject.strip() or len(subject) > 256:
        raise AuditParameterInvalid(f"subject: {subject!r} must be a non-empty string <= 256")
    return subject


def _timestamp(seconds: float) -> str:
    if not math.isfinite(seconds):
        raise AuditParameterInvalid(f"clock: returned non-finite time {seconds!r}")
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AuditLog:
    """Append-only audit log with batched SM2-signed tree heads.

    Parameters
    ----------
    signer
        SM2 key that signs tree heads; its public key is recorded in ``log_state``.
    origin
        Log identity, the first line of every checkpoint (e.g. ``"hospital-a.example/audit"``).
    evidence_key
        SM4-GCM key sealing ``sensitive`` fields; ``None`` refuses sensitive fields.
    checkpoint_every
        Sign a head once this many entries are unsigned (>= 1).
    checkpoint_seconds
        ... or once the last head is this old and entries are unsigned (> 0).
    clock
        Seconds since the epoch (UTC); injectable for tests.
    registry
        Event-type registry (default: :data:`privacy_ledger.audit.events.DEFAULT_REGISTRY`).

    Notes
    -----
    Use an engine from :func:`privacy_ledger.db.create_ledger_engine`: on
    SQLite its ``BEGIN IMMEDIATE`` serializes writers; on PostgreSQL appends
    lock the ``log_state`` row with ``SELECT ... FOR UPDATE``.
    """

    def __init__(
        self,
        *,
        signer: SM2PrivateKey,
        origin: str,
        evidence_key: SM4GCM | None = None,
        checkpoint_every: int = 256,
        checkpoint_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
        registry: EventRegistry = DEFAULT_REGISTRY,
    ) -> None:
        if not isinstance(signer, SM2PrivateKey):
            raise AuditParameterInvalid("signer: must be a crypto.sm.SM2PrivateKey")
        if evidence_key is not None and not isinstance(evidence_key, SM4GCM):
            raise AuditParameterInvalid("evidence_key: must be a crypto.sm.SM4GCM or None")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
            raise AuditParameterInvalid("checkpoint_every: must be an int")
        if checkpoint_every < 1:
            raise AuditParameterInvalid(f"checkpoint_every: {checkpoint_every} must be >= 1")
        seconds = float(checkpoint_seconds)
        if not (math.isfinite(seconds) and seconds > 0):
            raise AuditParameterInvalid(f"checkpoint_seconds: {checkpoint_seconds!r} must be > 0")
        if not callable(clock):
            raise AuditParameterInvalid("clock: must be callable")
        self.origin = check_origin(origin)
        self.public_key = signer.public_key
        self.key_fingerprint = signer.public_key.fingerprint()
        self.checkpoint_every = checkpoint_every
        self.checkpoint_seconds = seconds
        self.hasher = SM3_HASHER
        self._evidence_key = evidence_key
        self._clock = clock
        self._registry = registry
        self._cache = TreeCache(self.hasher)
        self._signer = HeadSigner(
            signer=signer, origin=self.origin, hasher=self.hasher, cache=self._cache
        )
        self._lock = threading.Lock()
        #: Records covered rows and signs ``log_state`` at each commit (:mod:`.rows`).
        self.sealer = Sealer(self, signer)

    def cover(self, engine: Engine) -> None:
        """Seal every covered row that sessions on ``engine`` write (see :mod:`.rows`)."""
        cover_engine(engine, self)

    def __repr__(self) -> str:
        return f"AuditLog(origin={self.origin!r}, key={self.key_fingerprint[:16]})"

    def __reduce__(self) -> Any:
        raise TypeError("AuditLog holds a signing key and cannot be pickled")

    # -- appending ---------------------------------------------------------------------

    def append(
        self,
        session: Session,
        *,
        event: str | AuditEvent,
        subject: str,
        fields: Mapping[str, object],
        sensitive: Mapping[str, object] | None = None,
    ) -> int:
        """Add one entry to ``session`` (not committed) and return its index.

        Parameters
        ----------
        session
            The caller's session: the entry commits or rolls back with the
            caller's own changes (e.g. a budget debit).
        event
            A registered event type name.
        subject
            What the entry is about (``participant:<id>``, ``round:<id>``...).
        fields
            Public evidence, canonical-JSON encodable (no floats).
        sensitive
            Evidence sealed with the evidence key (SM4-GCM); only key holders read it.

        Returns
        -------
        int
            The entry index (its Merkle leaf index); contiguous across writers.

        Raises
        ------
        UnknownEventType
            ``event`` is not registered.
        CanonicalJSONInvalid
            A field holds a float, NaN or another non-canonical value.
        EvidenceUnavailable
            ``sensitive`` is given but the log has no evidence key.
        LogKeyMismatch
            The database's log has another origin or signing key.
        LogNotInitialized
            The audit tables are missing (run the migrations).
        """
        name = self._registry.get(event).name
        _check_subject(subject)
        if not isinstance(fields, Mapping):
            raise AuditParameterInvalid("fields: must be a mapping")
        canonical.encode(dict(fields))  # validate before taking the lock
        sealed_values = dict(sensitive or {})
        if not all(isinstance(key, str) and key for key in sealed_values):
            raise CanonicalJSONInvalid("sensitive: field names must be non-empty strings")
        if sealed_values and self._evidence_key is None:
            raise EvidenceUnavailable("sensitive: this AuditLog was built without an evidence key")
        plaintexts = {key: canonical.encode(value) for key, value in sealed_values.items()}
        tail = self._tail(session)
        index, prev = tail.next_index, tail.last_leaf
        sealed = {key: self._seal(index, key, pt) for key, pt in plaintexts.items()}
        entry = {
            "event": name,
            "fields": fields,
            "index": index,
            "prev": prev.hex(),
            "sensitive": sealed,
            "subject": subject,
            "time": _timestamp(self._clock()),
            "v": ENTRY_VERSION,
        }
        data = canonical.encode(entry)
        leaf = self.hasher.hash_leaf(data)
        session.add(
            AuditEntryRow(
                entry_index=index, event=name, subject=subject, entry=data, leaf_hash=leaf
            )
        )
        tail.advance(leaf)
        self._seal_on_commit(session)
        return index

    def _tail(self, session: Session) -> AppendTail:
        tail = session.info.get(TAIL_KEY)
        if (
            isinstance(tail, AppendTail)
            and tail.transaction is session.get_transaction()
            and tail.owner == (self.origin, self.key_fingerprint)
        ):
            return tail
        state = lock_state(session)
        self._claim(session, state)
        tail = AppendTail(session, state, owner=(self.origin, self.key_fingerprint))
        session.info[TAIL_KEY] = tail
        return tail

    def _claim(self, session: Session, state: LogStateRow) -> None:
        claim_state(state, origin=self.origin, hash_name=self.hasher.name, key=self.public_key)

    def _seal(self, index: int, field: str, plaintext: bytes) -> str:
        if self._evidence_key is None:  # guarded in append; kept for type narrowing
            raise EvidenceUnavailable("sensitive: no evidence key")
        return seal(
            self._evidence_key, origin=self.origin, index=index, field=field, plaintext=plaintext
        )

    # -- signing -------------------------------------------------------------------------

    def checkpoint(self, session: Session, *, force: bool = False) -> SignedTreeHead | None:
        """Sign a tree head if one is due; add it to ``session`` (not committed).

        A head is due when ``checkpoint_every`` entries are unsigned, when
        the last head is older than ``checkpoint_seconds`` (or there is none)
        and entries are unsigned, or when ``force`` is true and entries are unsigned.

        Returns
        -------
        SignedTreeHead or None
            The new head, or ``None`` when none was due.

        Raises
        ------
        HeadSigningRefused
            When the stored entries do not extend the last signed head (the log
            never signs two inconsistent heads), or a stored row is altered.
        LogKeyMismatch
            When the database's log has another origin or signing key.
        """
        with self._lock:
            tail = session.info.get(TAIL_KEY)
            if isinstance(tail, AppendTail) and tail.transaction is session.get_transaction():
                state = tail.state  # already locked by an append of this transaction
            else:
                state = lock_state(session)
            if state.origin is not None:
                self._claim(session, state)  # another key or origin is refused even if idle
            unsigned = state.tree_size - state.last_head_size
            if unsigned <= 0:
                return None
            now = self._clock()
            age = math.inf if state.last_head_at is None else now - state.last_head_at
            if not (force or unsigned >= self.checkpoint_every or age >= self.checkpoint_seconds):
                return None
            head = self._signer.sign(session, state, now)
            self._seal_on_commit(session)
            return head

    def seal(self, session: Session) -> None:
        """Have ``session``'s commit renew the ledger seal (and record the covered rows).

        Appends and signed heads do this already; call it to seal a ledger written
        before ledger seals (``secure-fed ledger checkpoint``), whose first seal
        records every stored row as its baseline (:mod:`privacy_ledger.audit.rows`).
        """
        self._seal_on_commit(session)

    def _seal_on_commit(self, session: Session) -> None:
        """Mark ``session`` for sealing; from now on, seal every write on its engine too."""
        session.info[SEAL_KEY] = self.sealer
        bind = session.get_bind()
        if covering_log(bind) is not self:
            engine = getattr(bind, "engine", bind)
            if isinstance(engine, Engine):
                cover_engine(engine, self)

    # -- reading -------------------------------------------------------------------------

    def read_sensitive(
        self, session: Session, index: int, field: str, *, evidence_key: SM4GCM
    ) -> object:
        """Decrypt sensitive field ``field`` of entry ``index`` with ``evidence_key``.

        Raises
        ------
        EvidenceUnavailable
            The entry or the field does not exist.
        EvidenceUnreadable
            Authenticated decryption failed (wrong key, or altered ciphertext/binding).
        """
        if not isinstance(evidence_key, SM4GCM):
            raise AuditParameterInvalid("evidence_key: must be a crypto.sm.SM4GCM")
        row = load_entry(session, index)
        if row is None:
            raise EvidenceUnavailable(f"index: entry {index} does not exist")
        try:
            sealed = canonical.decode(row.entry)["sensitive"][field]
        except (KeyError, TypeError, CanonicalJSONInvalid):
            raise EvidenceUnavailable(f"field: entry {index} has no sensitive {field!r}") from None
        if not isinstance(sealed, str):
            raise EvidenceUnavailable(f"field: entry {index} has no sensitive {field!r}")
        return unseal(evidence_key, origin=self.origin, index=index, field=field, sealed=sealed)

    def inclusion_proof(self, session: Session, index: int, tree_size: int) -> list[bytes]:
        """Return the audit path of entry ``index`` in the tree of ``tree_size`` entries.

        Raises
        ------
        ProofRangeInvalid
            Unless ``0 <= index < tree_size <= size``.
        """
        self._check_size(session, tree_size)
        with self._lock:
            tree = self._cache.sync(session, tree_size)
            return inclusion_proof(tree, index, tree_size)

    def consistency_proof(self, session: Session, old_size: int, new_size: int) -> list[bytes]:
        """Return the consistency proof between the trees of ``old_size`` and ``new_size``.

        Raises
        ------
        ProofRangeInvalid
            Unless ``0 <= old_size <= new_size <= size``.
        """
        self._check_size(session, new_size)
        with self._lock:
            tree = self._cache.sync(session, new_size)
            return consistency_proof(tree, old_size, new_size)

    def _check_size(self, session: Session, tree_size: int) -> None:
        size = self.size(session)
        if not 0 <= tree_size <= size:
            raise ProofRangeInvalid(f"tree_size: {tree_size} not in [0, {size}] (log size)")

    def leaf_hash(self, session: Session, index: int) -> bytes:
        """Return the stored SM3 leaf hash of entry ``index``."""
        row = load_entry(session, index)
        if row is None:
            raise AuditParameterInvalid(f"index: entry {index} does not exist")
        return row.leaf_hash

    def size(self, session: Session) -> int:
        """Return the number of entries visible to ``session``."""
        value = session.scalar(select(LogStateRow.tree_size).where(LogStateRow.id == LOG_STATE_ID))
        return int(value or 0)

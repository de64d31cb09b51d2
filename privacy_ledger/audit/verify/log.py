"""Full verification of the audit log from its rows (RFC 9162 tree, C2SP checkpoints, SM2).

:func:`verify_log` needs only the database and the log's SM2 public key:

1. every signed tree head: DER SM2 signature over its checkpoint body, columns
   equal to the signed values, heads numbered without gaps, sizes increasing;
2. every entry, streamed in index order: canonical JSON, SM3 leaf hash equal
   to the stored one, its own index, the ``prev`` chain, and the ``event`` /
   ``subject`` columns (see :class:`~privacy_ledger.audit.verify.entries.EntryChecker`);
3. the Merkle root recomputed at each head's size equals the signed root, and
   consecutive heads are consistent (RFC 9162 section 2.1.4 proof, generated
   and verified);
4. the ledger seal (:mod:`privacy_ledger.audit.verify.rows`): ``log_state`` is
   what its SM2 seal signs and the row log replays to the sealed hash; with
   ``compare_rows``, every row of the covered tables (rounds, uploads, budgets,
   reservations...) equals its newest record.

The first failure raises a typed :class:`~privacy_ledger.errors.LogTampered`
whose ``entry_index`` names the first bad entry (or ``tree_size`` the bad head).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from crypto import CryptoError
from crypto.sm import SM2PublicKey
from privacy_ledger.audit.checkpoint import Checkpoint
from privacy_ledger.audit.merkle import SM3_HASHER, MerkleTree
from privacy_ledger.audit.models import LOG_STATE_ID, AuditEntryRow, LogStateRow, TreeHeadRow
from privacy_ledger.audit.verify.entries import EntryChecker
from privacy_ledger.audit.verify.heads import HeadWalker, check_heads, check_trusted
from privacy_ledger.audit.verify.rows import verify_seal
from privacy_ledger.errors import (
    AuditParameterInvalid,
    LogKeyMismatch,
    LogNotInitialized,
    LogTampered,
)

__all__ = ["VerificationReport", "verify_log", "stored_public_key"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class VerificationReport:
    """What :func:`verify_log` checked.

    Attributes
    ----------
    origin
        The log's origin (``None`` for a log that never had an entry).
    tree_size
        Number of entries verified.
    root_hash
        Merkle root of all entries.
    heads_checked
        Signed heads whose signature, root and consistency were checked.
    latest_head_size
        Size of the newest signed head (0 when none).
    unsigned_entries
        Entries after the newest signed head (protected by the chain only).
    key_fingerprint
        Fingerprint of the public key used.
    sealed
        Whether the ledger seal was present and verified (``False`` only with
        ``allow_unsealed``: then ``not_covered`` says what was not checked).
    row_records
        Records of the row log replayed.
    rows_checked
        Rows of the covered tables compared with their records.
    not_covered
        Lines naming what is not covered (a ledger written before ledger seals).
    """

    origin: str | None
    tree_size: int
    root_hash: bytes
    heads_checked: int
    latest_head_size: int
    unsigned_entries: int
    key_fingerprint: str
    sealed: bool = False
    row_records: int = 0
    rows_checked: int = 0
    not_covered: tuple[str, ...] = ()


@contextmanager
def _snapshot(bind: Engine | Session) -> Iterator[Session]:
    if isinstance(bind, Session):
        yield bind
        return
    if not isinstance(bind, Engine):
        raise AuditParameterInvalid("bind: must be a SQLAlchemy Engine or Session")
    options = {"isolation_level": "REPEATABLE READ"} if bind.dialect.name == "postgresql" else {}
    with bind.connect() as connection:
        with Session(bind=connection.execution_options(**options)) as session, session.begin():
            yield session


def _state(session: Session) -> LogStateRow:
    try:
        state = session.get(LogStateRow, LOG_STATE_ID)
    except (OperationalError, ProgrammingError):
        raise LogNotInitialized("log_state: audit tables missing; run the migrations") from None
    if state is None:
        raise LogNotInitialized("log_state: state row missing; run the migrations")
    return state


def stored_public_key(bind: Engine | Session) -> SM2PublicKey | None:
    """Return the public key recorded in ``log_state`` (``None`` before the first entry).

    Notes
    -----
    Whoever can write the database can replace this key: pin the key you got
    from the operator out of band (``secure-fed ledger verify --public-key``).
    """
    with _snapshot(bind) as session:
        state = _state(session)
        if state.public_key_pem is None:
            return None
        try:
            return SM2PublicKey.from_pem(state.public_key_pem)
        except CryptoError as exc:
            raise LogKeyMismatch(f"log_state: stored public key is unreadable ({exc})") from None


def verify_log(
    bind: Engine | Session,
    *,
    public_key: SM2PublicKey,
    chunk_size: int = 5000,
    progress: Callable[[int, int], None] | None = None,
    trusted: Checkpoint | None = None,
    allow_unsealed: bool = False,
    compare_rows: bool = False,
) -> VerificationReport:
    """Verify the whole audit log stored behind ``bind``.

    Parameters
    ----------
    bind
        Engine (verified in one read snapshot) or an open session.
    public_key
        The log's SM2 public key, ideally pinned out of band.
    chunk_size
        Entries fetched per query while streaming.
    progress
        Called as ``progress(done, total)`` after each chunk.
    trusted
        A head accepted earlier (e.g. exported by ``secure-fed ledger export-head``
        and checked with :func:`~privacy_ledger.audit.checkpoint.verify_head`): the log
        must still contain it. This catches a rollback of entries together
        with their heads and seal, which the database alone cannot reveal.
    allow_unsealed
        Accept a ledger written before ledger seals (migration ``0005``) and never
        sealed since; the report's ``not_covered`` then names what was not checked.
    compare_rows
        Also compare every row of the covered tables with its newest row record
        (``secure-fed ledger verify`` does, after its budget check). Off by default:
        the seal and the row log are always verified, and callers that report table
        disagreements themselves (the compliance export's budget cross-check) keep
        doing so; :func:`~privacy_ledger.audit.verify.rows.compare_rows` runs the
        comparison on its own.

    Returns
    -------
    VerificationReport
        Size, root and heads checked.

    Raises
    ------
    LogTampered
        (or its subclasses :class:`HeadTampered`, :class:`HeadsInconsistent`)
        naming the first bad entry or head.
    LogKeyMismatch
        When ``public_key`` is not the key recorded for the log.
    LogNotInitialized
        When the audit tables are missing.
    LedgerNotSealed, StateTampered, RowLogTampered, RowAltered, RowDeleted, RowUnrecorded
        The ledger seal's findings (:func:`~privacy_ledger.audit.verify.rows.verify_seal`).
    """
    if not isinstance(public_key, SM2PublicKey):
        raise AuditParameterInvalid("public_key: must be a crypto.sm.SM2PublicKey")
    if chunk_size < 1:
        raise AuditParameterInvalid(f"chunk_size: {chunk_size} must be >= 1")
    fingerprint = public_key.fingerprint()
    with _snapshot(bind) as session:
        state = _state(session)
        if state.key_fingerprint is not None and state.key_fingerprint != fingerprint:
            raise LogKeyMismatch(
                f"public_key: {fingerprint} is not the log's key {state.key_fingerprint}"
            )
        rows = list(session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq)))
        heads = check_heads(rows, state, public_key)
        walker = HeadWalker(heads)
        checker = EntryChecker(MerkleTree(hasher=SM3_HASHER))
        start = 0
        while True:
            chunk = session.execute(
                select(
                    AuditEntryRow.entry_index,
                    AuditEntryRow.event,
                    AuditEntryRow.subject,
                    AuditEntryRow.entry,
                    AuditEntryRow.leaf_hash,
                )
                .where(AuditEntryRow.entry_index >= start)
                .order_by(AuditEntryRow.entry_index)
                .limit(chunk_size)
            ).all()
            if not chunk:
                break
            for row in chunk:
                checker.feed(row.entry_index, row.event, row.subject, row.entry, row.leaf_hash)
                walker.check_upto(checker.tree, checker.settled)
            start = chunk[-1].entry_index + 1
            if progress is not None:
                progress(checker.tree.size, state.tree_size)
        checker.finish()
        size = checker.tree.size
        walker.check_upto(checker.tree, size)
        walker.finish(size)
        if state.tree_size != size:
            first = min(size, state.tree_size)
            raise LogTampered(
                f"log_state records {state.tree_size} entries, {size} are stored; "
                f"first bad entry: {first}",
                entry_index=first,
            )
        if trusted is not None:
            check_trusted(checker.tree, state.origin, trusted)
        seal = verify_seal(
            session,
            state,
            public_key,
            allow_unsealed=allow_unsealed,
            chunk_size=chunk_size,
            compare=compare_rows,
        )
        latest = heads[-1].tree_size if heads else 0
        logger.info("verified audit log: %d entries, %d heads", size, len(heads))
        return VerificationReport(
            origin=state.origin,
            tree_size=size,
            root_hash=checker.tree.root(),
            heads_checked=len(heads),
            latest_head_size=latest,
            unsigned_entries=size - latest,
            key_fingerprint=fingerprint,
            sealed=seal.sealed,
            row_records=seal.row_records,
            rows_checked=seal.rows_checked,
            not_covered=seal.not_covered,
        )

"""A gatekeeper's durable plan book: every installed plan and every release, replayed at start.

A gatekeeper (the key authority, the shares-mode helper) holds each round's release plan
as a state machine (:class:`~secure_fed.secure.release_plan.PlanTracker`). Kept in memory,
it died with the process: after a restart the aggregator could install the same round's
plan again with other content and publish that round again with other weights, and two
publications of one round subtract to a difference of single uploads. :class:`PlanJournal`
keeps, in an SQLite file the party owns (the standard of its nonce store: one
``BEGIN IMMEDIATE`` transaction per write, synchronous commits), every plan the gatekeeper
installed and, in order, every release its plan observed (the request as the gatekeeper
established it and the values it released). :class:`~secure_fed.secure.release_plan.PlanBook`
replays it when it starts, so a restarted gatekeeper is in exactly the state it was in after
its last acknowledged write: the same plan is resumed, another plan for that round is
refused, and a published round stays published for ever.

Each write happens before the gatekeeper answers (write-ahead): a crash between the write
and the answer counts the release as made, never the other way round.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from crypto.sm import sm3_digest
from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = ["PlanJournal"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS plans ("
    " round_id INTEGER PRIMARY KEY, plan BLOB NOT NULL, sm3 TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS releases ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, round_id INTEGER NOT NULL,"
    " request TEXT NOT NULL, arr TEXT)",
    "CREATE TABLE IF NOT EXISTS policy ("
    " version INTEGER PRIMARY KEY, sm3 TEXT NOT NULL, document BLOB NOT NULL)",
    # participants' signed upload notices (secure_fed.secure.upload_notices), one per round
    "CREATE TABLE IF NOT EXISTS notices ("
    " round_id INTEGER NOT NULL, participant_id TEXT NOT NULL, notice BLOB NOT NULL,"
    " PRIMARY KEY (round_id, participant_id))",
)


def _request_json(request: ReleaseRequest) -> str:
    return json.dumps(asdict(request), sort_keys=True, allow_nan=False)


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _request(text: str) -> ReleaseRequest:
    raw = json.loads(text)
    fields = {k: _tuples(v) for k, v in raw.items()}
    piece = raw.get("evidence")
    if piece is not None:
        fields["evidence"] = EvidenceSlice(rows=tuple(piece["rows"]), labels=tuple(piece["labels"]))
    return ReleaseRequest(**fields)


class PlanJournal:
    """Installed plans and observed releases of one gatekeeper, in an SQLite file.

    Parameters
    ----------
    path
        Database file (created if absent); ``":memory:"`` for a gatekeeper that never
        restarts (the demo's in-process parties).

    Raises
    ------
    ModeSetupInvalid
        If the file cannot be opened as an SQLite database, or holds a plan whose bytes
        no longer match their digest.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._db.execute("PRAGMA synchronous=FULL")
            for statement in _SCHEMA:
                self._db.execute(statement)
        except sqlite3.DatabaseError as exc:
            raise ModeSetupInvalid(f"plan journal {self.path} cannot be opened: {exc}") from exc

    def plans(self) -> list[tuple[int, bytes]]:
        """Every installed plan as ``(round id, plan bytes)``, by round.

        Raises
        ------
        ModeSetupInvalid
            A stored plan whose bytes do not match their stored SM3.
        """
        with self._lock:
            rows = self._db.execute("SELECT round_id, plan, sm3 FROM plans ORDER BY round_id")
            out = []
            for round_id, plan, digest in rows.fetchall():
                if not isinstance(plan, bytes) or sm3_digest(plan).hex() != digest:
                    raise ModeSetupInvalid(f"plan journal: round {round_id}'s plan was altered")
                out.append((int(round_id), bytes(plan)))
            return out

    def releases(self) -> Iterator[tuple[ReleaseRequest, np.ndarray | None]]:
        """Every observed release in the order it happened."""
        with self._lock:
            rows = self._db.execute("SELECT request, arr FROM releases ORDER BY seq").fetchall()
        for request, arr in rows:
            values = None if arr is None else np.asarray(json.loads(arr), dtype=np.float64)
            yield _request(request), values

    def record_plan(self, round_id: int, plan: bytes) -> None:
        """Store the plan installed for ``round_id`` (once; a second one is refused).

        Raises
        ------
        ModeSetupInvalid
            The round already has a stored plan.
        """
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(
                    "INSERT INTO plans (round_id, plan, sm3) VALUES (?, ?, ?)",
                    (round_id, plan, sm3_digest(plan).hex()),
                )
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                raise ModeSetupInvalid(f"round {round_id} already has a release plan") from None

    def record_release(self, request: ReleaseRequest, values: np.ndarray | None) -> None:
        """Append one observed release (the request and the values released, if any)."""
        arr = None if values is None else json.dumps(np.asarray(values, dtype=np.float64).tolist())
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO releases (round_id, request, arr) VALUES (?, ?, ?)",
                (request.round_id, _request_json(request), arr),
            )
            self._db.execute("COMMIT")

    def record_notice(self, round_id: int, participant_id: str, notice: bytes) -> bool:
        """Store a participant's verified upload notice; ``False`` if it already has one.

        The first notice of a participant and round stays; the signed bytes are kept, so
        a restarted gatekeeper verifies them again.
        """
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(
                    "INSERT INTO notices (round_id, participant_id, notice) VALUES (?, ?, ?)",
                    (round_id, participant_id, notice),
                )
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                return False
            return True

    def notices(self) -> list[bytes]:
        """Every stored upload notice (signed bytes), by round and participant.

        Raises
        ------
        ModeSetupInvalid
            A stored notice that is no longer bytes.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT notice FROM notices ORDER BY round_id, participant_id"
            ).fetchall()
        if not all(isinstance(row[0], bytes) for row in rows):
            raise ModeSetupInvalid("plan journal: a stored notice was altered (not bytes)")
        return [bytes(row[0]) for row in rows]

    def pinned_policy(self) -> tuple[int, str, bytes] | None:
        """Return the newest pinned policy as ``(version, sm3 hex, document)``, if any.

        Raises
        ------
        ModeSetupInvalid
            The stored document no longer matches its digest.
        """
        with self._lock:
            row = self._db.execute(
                "SELECT version, sm3, document FROM policy ORDER BY version DESC LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        version, digest, document = row
        if not isinstance(document, bytes) or sm3_digest(document).hex() != digest:
            raise ModeSetupInvalid(f"plan journal: policy version {version} was altered")
        return int(version), str(digest), bytes(document)

    def pin_policy(self, version: int, digest: str, document: bytes) -> None:
        """Record the consortium policy in force (a version is pinned once, never replaced).

        Raises
        ------
        ModeSetupInvalid
            Another document is already pinned under ``version``.
        """
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "SELECT sm3 FROM policy WHERE version = ?", (version,)
            ).fetchone()
            if row is not None and row[0] != digest:
                self._db.execute("ROLLBACK")
                raise ModeSetupInvalid(f"policy version {version} is already pinned to another")
            if row is None:
                self._db.execute(
                    "INSERT INTO policy (version, sm3, document) VALUES (?, ?, ?)",
                    (version, digest, document),
                )
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def __reduce__(self) -> Any:
        raise TypeError("PlanJournal cannot be pickled")

"""A gatekeeper's persisted freshness record: the request nonces and rounds it has served.

:class:`~secure_fed.secure.server_auth.RequestVerifier` refuses a request whose
nonce it has already seen, or (per channel) a round older than one it served. Kept
in memory, that record dies with the process, and a request captured on the wire
could be replayed to a restarted key authority or helper. :class:`NonceStore`
keeps it in an SQLite file the party owns, with the verifier's exact rules, in one
``BEGIN IMMEDIATE`` transaction per request (several threads or processes may share
the file): a restart refuses a captured request exactly as the running process would.

Each verifier of a party uses its own ``channel`` name (``"decrypt"``, ``"plan"``,
``"range"``...), so the channels keep separate round windows, as in memory.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from secure_fed.errors import ModeSetupInvalid, ServerRequestReplayed

__all__ = ["NonceStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS nonce_rounds (channel TEXT PRIMARY KEY, round_id INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nonces ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT NOT NULL, round_id INTEGER NOT NULL,"
    " nonce TEXT NOT NULL, UNIQUE (channel, nonce))",
)


class NonceStore:
    """Served nonces and newest rounds per channel, in an SQLite file.

    Parameters
    ----------
    path
        Database file (created if absent); ``":memory:"`` for tests that do not restart.

    Raises
    ------
    ModeSetupInvalid
        If the file cannot be opened as an SQLite database.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30.0
            )
            for statement in _SCHEMA:
                self._db.execute(statement)
        except sqlite3.DatabaseError as exc:
            raise ModeSetupInvalid(f"nonce store {self.path} cannot be opened: {exc}") from exc

    def claim(
        self, channel: str, round_id: int, nonce: str, *, any_round: bool, max_nonces: int
    ) -> None:
        """Record ``nonce`` of ``round_id`` on ``channel``, or refuse it as a replay.

        With ``any_round`` only the nonce is checked (the last ``max_nonces`` of the
        channel are remembered, oldest forgotten first); otherwise a round older
        than the channel's newest is refused, a newer round starts a fresh window,
        and a round that already holds ``max_nonces`` nonces is refused.

        Raises
        ------
        ServerRequestReplayed
            A nonce already served, or an older round than one served.
        """
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._claim(channel, round_id, nonce, any_round=any_round, max_nonces=max_nonces)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _claim(
        self, channel: str, round_id: int, nonce: str, *, any_round: bool, max_nonces: int
    ) -> None:
        db = self._db
        seen = db.execute(
            "SELECT round_id FROM nonces WHERE channel = ? AND nonce = ?", (channel, nonce)
        ).fetchone()
        if not any_round:
            row = db.execute(
                "SELECT round_id FROM nonce_rounds WHERE channel = ?", (channel,)
            ).fetchone()
            newest = -1 if row is None else int(row[0])
            if round_id < newest:
                raise ServerRequestReplayed(
                    f"request for round {round_id} after round {newest} was served"
                )
            if round_id > newest:
                db.execute(
                    "INSERT INTO nonce_rounds (channel, round_id) VALUES (?, ?) "
                    "ON CONFLICT (channel) DO UPDATE SET round_id = excluded.round_id",
                    (channel, round_id),
                )
                db.execute("DELETE FROM nonces WHERE channel = ?", (channel,))
                seen = None
        if seen is not None:
            where = "" if any_round else f" in round {round_id}"
            raise ServerRequestReplayed(f"nonce already used{where}")
        query = "SELECT COUNT(*) FROM nonces WHERE channel = ?"
        (count,) = db.execute(query, (channel,)).fetchone()
        if count >= max_nonces:
            if not any_round:
                raise ServerRequestReplayed(f"round {round_id} exceeded {max_nonces} requests")
            db.execute(
                "DELETE FROM nonces WHERE seq IN (SELECT seq FROM nonces WHERE channel = ? "
                "ORDER BY seq LIMIT ?)",
                (channel, count - max_nonces + 1),
            )
        db.execute(
            "INSERT INTO nonces (channel, round_id, nonce) VALUES (?, ?, ?)",
            (channel, round_id, nonce),
        )

    def close(self) -> None:
        """Close the database."""
        self._db.close()

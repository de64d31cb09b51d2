"""The helper's own persistent registry: used Beaver-triple labels and upload rounds.

Reusing a Beaver triple breaks its mask: two openings ``x - a`` and ``x' - a``
under the same triple give ``x - x'``, so an aggregator that replays a triple
blob (say once with ``W = I``, then with ``W = 0``) learns the inputs. The
helper therefore accepts each label ``(round, tensor)`` once, ever, and it
binds each upload id to the first round that opens anything from it, so old
uploads cannot be replayed into another round's publication to difference the
two. The registry is an SQLite database the helper owns (a file in a
deployment, so it survives a restart; in memory for tests that do not restart).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

__all__ = ["HelperRegistry"]

_log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS triple_labels ("
    " round_id INTEGER NOT NULL, tensor TEXT NOT NULL, PRIMARY KEY (round_id, tensor))",
    "CREATE TABLE IF NOT EXISTS upload_rounds ("
    " upload_id TEXT PRIMARY KEY, round_id INTEGER NOT NULL)",
)


class HelperRegistry:
    """Used triple labels and upload-to-round bindings (SQLite).

    Parameters
    ----------
    path
        Database file, or ``":memory:"`` (default; lost on restart).
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        for statement in _SCHEMA:
            self._db.execute(statement)

    def claim_triple(self, round_id: int, tensor: str) -> bool:
        """Record the use of label ``(round_id, tensor)``; False if it was used before."""
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO triple_labels (round_id, tensor) VALUES (?, ?)",
                (round_id, tensor),
            )
        fresh = cursor.rowcount == 1
        if not fresh:
            _log.warning("Beaver triple label (%d, %s) replayed", round_id, tensor)
        return fresh

    def bind_upload(self, upload_id: str, round_id: int) -> bool:
        """Bind ``upload_id`` to ``round_id``; False if it belongs to another round."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO upload_rounds (upload_id, round_id) VALUES (?, ?)",
                (upload_id, round_id),
            )
            row = self._db.execute(
                "SELECT round_id FROM upload_rounds WHERE upload_id = ?", (upload_id,)
            ).fetchone()
        return bool(row is not None and row[0] == round_id)

    def close(self) -> None:
        """Close the database."""
        self._db.close()

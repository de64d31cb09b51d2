"""Disk spools: report rows and cited entries kept in temporary files, not in memory.

An export of a large ledger streams its rows into one spool file per
section (canonical JSON lines) and reads them back once per output, so its
memory does not grow with the number of rows.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from privacy_ledger.audit import canonical

__all__ = ["Spools"]


class Spools:
    """Named append-only files of canonical JSON lines in a private temporary folder."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="secure-fed-report-")
        self._handles: dict[str, IO[bytes]] = {}
        self.counts: dict[str, int] = {}

    def _path(self, name: str) -> Path:
        return Path(self._dir.name) / f"{name}.jsonl"

    def add(self, name: str, row: dict[str, Any]) -> None:
        """Append one row to spool ``name``."""
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = self._path(name).open("ab")
        handle.write(canonical.encode(row) + b"\n")
        self.counts[name] = self.counts.get(name, 0) + 1

    def rows(self, name: str) -> Iterator[dict[str, Any]]:
        """Yield the rows of spool ``name`` in the order they were added."""
        handle = self._handles.get(name)
        if handle is None:
            return
        handle.flush()
        with self._path(name).open("rb") as reader:
            for line in reader:
                yield canonical.decode(line.rstrip(b"\n"))

    def count(self, name: str) -> int:
        """Return the number of rows in spool ``name``."""
        return self.counts.get(name, 0)

    def close(self) -> None:
        """Delete every spool file."""
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._dir.cleanup()

"""Typed errors of the ``privacy_ledger`` package, each with a stable code.

Add narrow subclasses at the end of this file; give each a heading
``### CODE`` in ``docs/audit/errors-ledger.md``.
"""

from __future__ import annotations

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

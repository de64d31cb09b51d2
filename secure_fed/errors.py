"""Typed errors of the ``secure_fed`` package, each with a stable code.

Add narrow subclasses at the end of this file; give each a heading
``### CODE`` in ``docs/audit/errors-secure-fed.md``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["SecureFedError"]


class SecureFedError(Exception):
    """Base of every error raised by the ``secure_fed`` package.

    Parameters
    ----------
    message
        Human-readable explanation naming what was wrong.
    """

    code: ClassVar[str] = "SECURE_FED_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

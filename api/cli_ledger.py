"""``secure-fed ledger`` and ``secure-fed budget``: privacy-ledger commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the ledger and budget command groups to ``app``."""

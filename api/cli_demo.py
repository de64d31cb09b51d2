"""``secure-fed demo``: a whole federation on embedded defaults."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``demo`` command to ``app``."""

"""``secure-fed keys``: SM2 key management for operators."""

from __future__ import annotations

import typer

keys_app = typer.Typer(help="Generate SM2 keys and sign files.", no_args_is_help=True)

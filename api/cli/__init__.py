"""The ``secure-fed`` command line: the composition root of the project.

Each command group lives in its own module (``cli_keys``, ``cli_ledger``,
``cli_demo``); this module only assembles them.
"""

from __future__ import annotations

import typer

from api.cli.budget import register as _register_ledger
from api.cli.demo import register as _register_demo
from api.cli.keys import keys_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="secure-fed",
    help="Privacy-first secure aggregation for heterogeneous federated distillation.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(keys_app, name="keys")
_register_ledger(app)
_register_demo(app)


def main() -> None:
    """Run the ``secure-fed`` command line."""
    app()

"""The ``secure-fed`` command line: the composition root of the project.

Each command group lives in its own module (``keys``, ``budget``, ``ledger``,
``demo``). They are registered by name in ``COMMANDS`` and imported only when
they run (:class:`api.cli.core.LazyGroup`), so ``secure-fed --help`` and the
operator commands start without loading torch, Opacus or TenSEAL. To add a
group, add one line to ``COMMANDS``: ``"name": LazyCommand("api.cli.mod:mod_app",
"One-line help.")``. A group added eagerly with ``app.add_typer(...)`` also
works, at the cost of importing its module at every start.

Failures print ``error: [CODE] message`` and ``hint: ...`` (codes in
``docs/audit/errors-cli.md`` and the other ``errors-*.md`` pages); the global
``--debug`` option shows the traceback instead.
"""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.core import LazyCommand, lazy_group

__all__ = ["app", "main", "COMMANDS"]

#: Command groups by name, imported on first use; the help is shown by ``secure-fed --help``.
COMMANDS = {
    "demo": LazyCommand(
        "api.cli.demo:demo",
        "Run a complete federation (all parties in one process) and show per-round tables.",
    ),
    "keys": LazyCommand("api.cli.keys:keys_app", "Generate SM2 keys and sign files."),
    "budget": LazyCommand("api.cli.budget:budget_app", "Show and set epsilon budgets."),
    "ledger": LazyCommand(
        "api.cli.ledger:ledger_app",
        "Verify the audit log (verify, head, export-head) and sign new heads (checkpoint).",
    ),
    "audit": LazyCommand(
        "api.cli.audit:audit_app",
        "Export audit reports (json bundle, html, pdf), verify bundles offline, run the "
        "pre-launch checklist.",
    ),
    "api": LazyCommand(
        "api.cli.api:api_app",
        "Serve the REST API (budgets, audit log, reports, rounds) and manage its tokens.",
    ),
    "deploy": LazyCommand(
        "api.cli.deploy:deploy_app",
        "Run the key ceremony, or a whole federation of real processes on 127.0.0.1.",
    ),
    "keyauthority": LazyCommand(
        "api.cli.parties:keyauthority_app", "Run the key authority service (mutual TLS)."
    ),
    "helper": LazyCommand("api.cli.parties:helper_app", "Run the helper service (mutual TLS)."),
    "verifier": LazyCommand(
        "api.cli.verifier:verifier_app", "Run the verifier service (ckks mode, mutual TLS)."
    ),
}

app = typer.Typer(
    name="secure-fed",
    help="Privacy-first secure aggregation for heterogeneous federated distillation.",
    cls=lazy_group(COMMANDS),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # --debug tracebacks must not print passphrases
)


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Show the Python traceback of a failure instead of one error line."
        ),
    ] = False,
) -> None:
    """Privacy-first secure aggregation for heterogeneous federated distillation."""
    del debug  # read by LazyGroup.invoke from the root context


def main() -> None:
    """Run the ``secure-fed`` command line."""
    app()

"""``secure-fed verifier serve``: the ckks mode's verifier service (mutual TLS).

It loads the verifier's key directory (from the key ceremony: its SM2 attestation key,
the public contexts, the participants' keys), keeps its audit ledger under ``--state``
(``<state>/audit.db``, heads signed with its ``audit.key.pem``) and serves only the
aggregator's client certificate (``--client-name``), as the key authority does
(:mod:`api.cli.parties`). See ``docs/deploy.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from api.cli.core import CliCommand, CliGroup
from api.cli.parties import (
    AuditDbOption,
    CertOption,
    ClientCaOption,
    ClientNameOption,
    HostOption,
    InsecureOption,
    KeyOption,
    KeysOption,
    MaxBodyOption,
    StateOption,
    _tls,
)

__all__ = ["verifier_app"]

verifier_app = typer.Typer(
    help="Run the verifier service (ckks mode, mutual TLS).",
    cls=CliGroup,
    no_args_is_help=True,
)


@verifier_app.command("serve", cls=CliCommand)
def verifier_serve(
    keys: KeysOption,
    state: StateOption,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8445,
    tls_cert: CertOption = None,
    tls_key: KeyOption = None,
    client_ca: ClientCaOption = None,
    client_name: ClientNameOption = "aggregator",
    insecure_dev: InsecureOption = False,
    audit_db: AuditDbOption = None,
    max_body: MaxBodyOption = 64 << 20,
) -> None:
    """Serve the verifier (forwarded uploads, attestations, healthz)."""
    from api.cli.common import check_database_url, ensure_port_free
    from api.services.run import party_audit, record_started, serve_app
    from api.services.verifier import create_verifier_app
    from secure_fed.deploy.tls import private_dir
    from secure_fed.deploy.verifier_party import load_verifier

    tls = _tls(tls_cert, tls_key, client_ca, insecure_dev, client_name, host)
    if audit_db is not None:
        check_database_url(audit_db)
    ensure_port_free(host, port)  # before service.started is recorded
    audit = party_audit(keys, private_dir(Path(state)), party="verifier", database_url=audit_db)
    party = load_verifier(keys, audit=audit)
    client = None if tls is None else tls.client_name
    app = create_verifier_app(
        party, max_body=max_body, hsts=tls is not None, client_name=client, audit=audit
    )
    record_started(audit, party="verifier", manifest=party.manifest, host=host, port=port, tls=tls)
    serve_app(app, host=host, port=port, tls=tls, insecure_dev=insecure_dev)

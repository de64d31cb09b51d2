"""``secure-fed keyauthority serve``, ``secure-fed helper serve`` and ``deploy keys``.

Each service loads its own key directory (from the key ceremony,
:func:`secure_fed.deploy.keys.create_keys`), keeps its nonce record, triple
registry and audit ledger under ``--state``, and serves over TLS requiring the
aggregator's client certificate (mutual TLS). ``--insecure-dev`` serves plain
HTTP on a development machine and says so in the log and the audit log. See
``docs/deploy.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.core import CliCommand, CliGroup
from api.cli.errors import OptionInvalid

if TYPE_CHECKING:
    from secure_fed.deploy.tls import ServerTLS

__all__ = ["deploy_keys", "helper_app", "keyauthority_app"]

keyauthority_app = typer.Typer(
    help="Run the key authority service (mutual TLS).",
    cls=CliGroup,
    no_args_is_help=True,
)
helper_app = typer.Typer(
    help="Run the helper service (mutual TLS).",
    cls=CliGroup,
    no_args_is_help=True,
)

KeysOption = Annotated[
    Path, typer.Option("--keys", metavar="DIR", help="This party's key directory.")
]
StateOption = Annotated[
    Path,
    typer.Option("--state", metavar="DIR", help="Nonce record, registry and audit log."),
]
HostOption = Annotated[str, typer.Option(help="Listen address.")]
CertOption = Annotated[
    Path | None, typer.Option("--tls-cert", metavar="FILE", help="Server certificate (PEM).")
]
KeyOption = Annotated[
    Path | None, typer.Option("--tls-key", metavar="FILE", help="Server private key (PEM).")
]
ClientCaOption = Annotated[
    Path | None,
    typer.Option(
        "--client-ca", metavar="FILE", help="CA of the aggregator's client certificate (mTLS)."
    ),
]
InsecureOption = Annotated[
    bool,
    typer.Option("--insecure-dev", help="Serve plain HTTP without client certificates (dev only)."),
]
AuditDbOption = Annotated[
    str | None,
    typer.Option("--audit-db", metavar="URL", help="Audit ledger URL (default <state>/audit.db)."),
]
MaxBodyOption = Annotated[int, typer.Option(help="Largest request body in bytes.")]


def _tls(
    cert: Path | None, key: Path | None, client_ca: Path | None, insecure_dev: bool
) -> ServerTLS | None:
    from secure_fed.deploy.tls import ServerTLS

    given = [v is not None for v in (cert, key, client_ca)]
    if insecure_dev:
        if any(given):
            raise OptionInvalid("--insecure-dev serves plain HTTP: drop --tls-cert/--tls-key")
        return None
    if not all(given):
        raise OptionInvalid(
            "--tls-cert, --tls-key and --client-ca are required (or --insecure-dev)"
        )
    assert cert is not None and key is not None
    return ServerTLS(cert=cert, key=key, client_ca=client_ca)


@keyauthority_app.command("serve", cls=CliCommand)
def keyauthority_serve(
    keys: KeysOption,
    state: StateOption,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8443,
    tls_cert: CertOption = None,
    tls_key: KeyOption = None,
    client_ca: ClientCaOption = None,
    insecure_dev: InsecureOption = False,
    audit_db: AuditDbOption = None,
    max_body: MaxBodyOption = 64 << 20,
) -> None:
    """Serve the key authority (decrypt, plan, deal, deal-range, contexts, healthz)."""
    from api.services.apps import create_keyauthority_app
    from api.services.run import party_audit, record_started, serve_app
    from secure_fed.deploy.keys import load_key_authority
    from secure_fed.deploy.tls import private_dir

    tls = _tls(tls_cert, tls_key, client_ca, insecure_dev)
    audit = party_audit(keys, private_dir(state), party="keyauthority", database_url=audit_db)
    party = load_key_authority(keys, audit=audit, state_dir=state)
    record_started(
        audit, party="keyauthority", manifest=party.manifest, host=host, port=port, tls=tls
    )
    app = create_keyauthority_app(party, max_body=max_body, hsts=tls is not None)
    serve_app(app, host=host, port=port, tls=tls, insecure_dev=insecure_dev)


@helper_app.command("serve", cls=CliCommand)
def helper_serve(
    keys: KeysOption,
    state: StateOption,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8444,
    tls_cert: CertOption = None,
    tls_key: KeyOption = None,
    client_ca: ClientCaOption = None,
    insecure_dev: InsecureOption = False,
    audit_db: AuditDbOption = None,
    max_body: MaxBodyOption = 64 << 20,
) -> None:
    """Serve the shares-mode helper (helper requests, healthz)."""
    from api.services.apps import create_helper_app
    from api.services.run import party_audit, record_started, serve_app
    from secure_fed.deploy.keys import load_helper, read_manifest
    from secure_fed.deploy.tls import private_dir

    tls = _tls(tls_cert, tls_key, client_ca, insecure_dev)
    audit = party_audit(keys, private_dir(state), party="helper", database_url=audit_db)
    helper = load_helper(keys, audit=audit, state_dir=state)
    manifest = read_manifest(keys, role="helper")
    record_started(audit, party="helper", manifest=manifest, host=host, port=port, tls=tls)
    app = create_helper_app(helper, max_body=max_body, hsts=tls is not None)
    serve_app(app, host=host, port=port, tls=tls, insecure_dev=insecure_dev)


def deploy_keys(
    mode: Annotated[str, typer.Option(help="ckks or shares.")],
    participants: Annotated[
        str, typer.Option(metavar="ID,ID,...", help="Comma-separated participant ids.")
    ],
    shape: Annotated[str, typer.Option(metavar="N,C", help="Public-set rows and classes.")],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Empty output directory.")],
    min_participants: Annotated[int, typer.Option(help="Round quorum (>= 2).")] = 2,
    no_publication_epoch: Annotated[
        bool,
        typer.Option(
            "--no-publication-epoch", help="ckks: no separate publication epoch (weaker)."
        ),
    ] = False,
) -> None:
    """Run the try-out key ceremony: one directory per party under --out (files 0600)."""
    from secure_fed.deploy.keys import create_keys

    ids = [p.strip() for p in participants.split(",") if p.strip()]
    try:
        rows, classes = (int(v) for v in shape.split(","))
    except ValueError:
        raise OptionInvalid(f"--shape must be N,C (two integers), got {shape!r}") from None
    create_keys(
        out,
        mode=mode,
        participant_ids=ids,
        shape=(rows, classes),
        min_participants=min_participants,
        publication_preset=None if no_publication_epoch else "CKKS_PUBLICATION",
    )
    typer.echo(f"wrote {mode} keys for {len(ids)} participants under {out}")

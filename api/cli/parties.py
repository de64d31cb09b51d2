"""``secure-fed keyauthority serve``, ``secure-fed helper serve`` and ``deploy keys``.

Each service loads its own key directory (from the key ceremony,
:func:`secure_fed.deploy.keys.create_keys`), keeps its nonce record, triple
registry and audit ledger under ``--state``, and serves over TLS requiring the
aggregator's client certificate (mutual TLS: the deployment's CA, and the name
``--client-name``, ``aggregator`` as the ceremony issues it; a certificate of the
same CA with another name is refused with 403 and an audit event).
``--insecure-dev`` serves plain HTTP on a development machine, bound to loopback
only, and says so in the log and the audit log. See ``docs/deploy.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.core import CliCommand, CliGroup
from api.cli.errors import OptionInvalid

if TYPE_CHECKING:
    from fastapi import FastAPI

    from secure_fed.deploy.keys import KeyManifest
    from secure_fed.deploy.tls import ServerTLS
    from secure_fed.secure.audit import AuditSink

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
ClientNameOption = Annotated[
    str,
    typer.Option(
        "--client-name",
        metavar="NAME",
        help="The only client served: the name in the aggregator's certificate (SAN or CN).",
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


@dataclass(frozen=True, kw_only=True)
class _ServeOptions:
    """The options ``keyauthority serve`` and ``helper serve`` share."""

    host: str
    port: int
    tls_cert: Path | None
    tls_key: Path | None
    client_ca: Path | None
    client_name: str
    insecure_dev: bool
    audit_db: str | None
    max_body: int


def _tls(
    cert: Path | None,
    key: Path | None,
    client_ca: Path | None,
    insecure_dev: bool,
    client_name: str,
    host: str,
) -> ServerTLS | None:
    from secure_fed.deploy.tls import ServerTLS

    given = [v is not None for v in (cert, key, client_ca)]
    if insecure_dev:
        if any(given):
            raise OptionInvalid("--insecure-dev serves plain HTTP: drop --tls-cert/--tls-key")
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise OptionInvalid(f"--insecure-dev serves on loopback only, not --host {host}")
        return None
    if not all(given):
        raise OptionInvalid(
            "--tls-cert, --tls-key and --client-ca are required (or --insecure-dev)"
        )
    assert cert is not None and key is not None
    return ServerTLS(cert=cert, key=key, client_ca=client_ca, client_name=client_name)


def _party_app(
    party: str, keys: Path, state: Path, o: _ServeOptions, tls: ServerTLS | None, audit: AuditSink
) -> tuple[FastAPI, KeyManifest]:
    """Load ``party``'s keys and build its application (served to ``tls.client_name`` only)."""
    from api.services.apps import create_helper_app, create_keyauthority_app
    from secure_fed.deploy.keys import load_helper, load_key_authority, read_manifest

    hsts, client = tls is not None, None if tls is None else tls.client_name
    if party == "keyauthority":
        authority = load_key_authority(keys, audit=audit, state_dir=state)
        app = create_keyauthority_app(
            authority, max_body=o.max_body, hsts=hsts, client_name=client, audit=audit
        )
        return app, authority.manifest
    helper = load_helper(keys, audit=audit, state_dir=state)
    app = create_helper_app(helper, max_body=o.max_body, hsts=hsts, client_name=client, audit=audit)
    return app, read_manifest(keys, role="helper")


def _serve(party: str, keys: Path, state: Path, o: _ServeOptions) -> None:
    """Open ``party``'s audit log, build its app, record the start, serve until stopped."""
    from api.cli.common import check_database_url, ensure_port_free
    from api.services.run import party_audit, record_started, serve_app
    from secure_fed.deploy.tls import private_dir

    tls = _tls(o.tls_cert, o.tls_key, o.client_ca, o.insecure_dev, o.client_name, o.host)
    if o.audit_db is not None:
        check_database_url(o.audit_db)
    ensure_port_free(o.host, o.port)  # before service.started is recorded
    audit = party_audit(keys, private_dir(state), party=party, database_url=o.audit_db)
    app, manifest = _party_app(party, keys, state, o, tls, audit)
    record_started(audit, party=party, manifest=manifest, host=o.host, port=o.port, tls=tls)
    serve_app(app, host=o.host, port=o.port, tls=tls, insecure_dev=o.insecure_dev)


@keyauthority_app.command("serve", cls=CliCommand)
def keyauthority_serve(
    keys: KeysOption,
    state: StateOption,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8443,
    tls_cert: CertOption = None,
    tls_key: KeyOption = None,
    client_ca: ClientCaOption = None,
    client_name: ClientNameOption = "aggregator",
    insecure_dev: InsecureOption = False,
    audit_db: AuditDbOption = None,
    max_body: MaxBodyOption = 64 << 20,
) -> None:
    """Serve the key authority (decrypt, plan, the three deal routes, contexts, healthz)."""
    options = _ServeOptions(**{k: v for k, v in locals().items() if k not in ("keys", "state")})
    _serve("keyauthority", keys, state, options)


@helper_app.command("serve", cls=CliCommand)
def helper_serve(
    keys: KeysOption,
    state: StateOption,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8444,
    tls_cert: CertOption = None,
    tls_key: KeyOption = None,
    client_ca: ClientCaOption = None,
    client_name: ClientNameOption = "aggregator",
    insecure_dev: InsecureOption = False,
    audit_db: AuditDbOption = None,
    max_body: MaxBodyOption = 64 << 20,
) -> None:
    """Serve the shares-mode helper (helper requests, healthz)."""
    options = _ServeOptions(**{k: v for k, v in locals().items() if k not in ("keys", "state")})
    _serve("helper", keys, state, options)


def deploy_keys(
    mode: Annotated[str, typer.Option(help="ckks or shares.")],
    participants: Annotated[
        str, typer.Option(metavar="ID,ID,...", help="Comma-separated participant ids.")
    ],
    shape: Annotated[str, typer.Option(metavar="N,C", help="Public-set rows and classes.")],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Empty output directory.")],
    min_participants: Annotated[int, typer.Option(help="Round quorum (>= 2).")] = 2,
    isolation: Annotated[
        int,
        typer.Option(
            help="Consortium policy: no combination of publications may single out fewer "
            "than this many participants (1: no multi-round rule; at most the quorum)."
        ),
    ] = 1,
    max_flagged: Annotated[
        int | None,
        typer.Option(
            help="Consortium policy: the most participants one round may exclude or "
            "down-weight as outliers (the outlier budget; server.toml's [federation] "
            "max_flagged must not exceed it). Unset: no budget."
        ),
    ] = None,
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
        isolation=isolation,
        max_flagged=max_flagged,
    )
    typer.echo(f"wrote {mode} keys for {len(ids)} participants under {out}")

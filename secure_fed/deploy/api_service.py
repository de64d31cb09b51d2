"""The REST API (``secure-fed api``) as a supervised process of a local federation.

:func:`write_api_config` writes the API's settings file (``api.toml``, 0600)
for one ledger database, TLS certificate and keys; :func:`api_spec` is the
:class:`~secure_fed.deploy.supervisor.ProcessSpec` that runs ``secure-fed api
--config api.toml`` and is ready when ``/readyz`` answers 200 over TLS checked
against the run's CA. The API serves the participants' budgets
(:mod:`secure_fed.deploy.remote_budget`), the audit log and the console.

The command is started as ``python -c "from api.cli import main; main()"``
with the caller's interpreter, so the child runs the same installation as the
parent (and this library imports nothing of :mod:`api`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from secure_fed.deploy.supervisor import ProcessSpec, http_ready

__all__ = ["ApiEndpoint", "CLI", "api_spec", "write_api_config"]

#: How a child runs the ``secure-fed`` command with a given interpreter.
CLI = ("-c", "from api.cli import main; main()")


@dataclass(frozen=True, kw_only=True)
class ApiEndpoint:
    """Where the API listens and how its certificate is checked.

    Attributes
    ----------
    url
        ``https://127.0.0.1:<port>`` (``http://`` when served without TLS).
    ca_file
        The CA that signed the API's certificate (``None`` without TLS).
    config
        Its settings file.
    """

    url: str
    ca_file: Path | None
    config: Path


def _toml_str(value: str | Path) -> str:
    text = str(value)
    if any(c in text for c in '"\\\n'):
        raise ValueError(f"path or URL not representable in the settings file: {text!r}")
    return f'"{text}"'


def write_api_config(
    directory: Path,
    *,
    database_url: str,
    port: int,
    audit_key: Path,
    receipt_key: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    ca_file: Path | None,
    host: str = "127.0.0.1",
) -> ApiEndpoint:
    """Write ``directory/api.toml`` (0600) and return where the API will listen.

    A random session secret is written into the file (the console's cookies).
    Without ``tls_cert`` the API serves plain HTTP (loopback try-outs only).

    Raises
    ------
    ValueError
        A path or URL that cannot be written into TOML, or half a TLS pair.
    """
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("tls_cert and tls_key go together: give both or neither")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = [
        f"database_url = {_toml_str(database_url)}",
        f"api_host = {_toml_str(host)}",
        f"api_port = {int(port)}",
        "api_workers = 1",
        f"api_audit_key_file = {_toml_str(audit_key)}",
        f"api_session_secret = {_toml_str(secrets.token_urlsafe(32))}",
        'api_audit_origin = "secure-fed/local"',
    ]
    if receipt_key is not None:
        lines.append(f"api_receipt_key_file = {_toml_str(receipt_key)}")
    if tls_cert is not None and tls_key is not None:
        lines += [
            f"api_tls_certfile = {_toml_str(tls_cert)}",
            f"api_tls_keyfile = {_toml_str(tls_key)}",
        ]
    config = directory / "api.toml"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    scheme = "https" if tls_cert is not None else "http"
    return ApiEndpoint(
        url=f"{scheme}://{host}:{port}",
        ca_file=ca_file if tls_cert is not None else None,
        config=config,
    )


def api_spec(
    endpoint: ApiEndpoint, *, python: str, env: Mapping[str, str], ready_timeout: float = 90.0
) -> ProcessSpec:
    """Return the process running ``secure-fed api --config <endpoint.config>``.

    ``SECURE_FED_*`` variables are removed from ``env`` so that the settings
    file alone configures the child.
    """
    clean = {k: v for k, v in env.items() if not k.startswith("SECURE_FED_")}
    return ProcessSpec(
        name="api",
        argv=[python, *CLI, "api", "--config", str(endpoint.config)],
        env=clean,
        ready=http_ready(endpoint.url + "/readyz", ca_file=endpoint.ca_file),
        ready_timeout=ready_timeout,
    )

r"""secure-fed over Flower's deployment engine: the ServerApp, the ClientApp and the app folder.

The only code of ``secure_fed`` that imports ``flwr``. A federation of real
processes (development, on one machine; ``docs/deploy.md`` for TLS and node
authentication)::

    flower-superlink --insecure --disable-runtime-dependency-installation \
        --host 127.0.0.1 --port 9093 --database superlink.db
    flower-supernode --insecure --superlink 127.0.0.1:9093 --port 9101 \
        --node-config 'participant-config="/srv/hospital-1/participant.toml"'
    # ... one SuperNode per participant, each its own --port and participant.toml
    APP=$(python -c 'import secure_fed.deploy.flower as f; print(f.app_dir())')
    FLWR_HOME=/srv/flwr flwr run "$APP" local-dev \
        --run-config 'server-config="/srv/server/server.toml"' --stream

with ``/srv/flwr/config.toml`` naming the SuperLink connection::

    [superlink]
    default = "local-dev"
    [superlink.local-dev]
    address = "127.0.0.1:9093"
    insecure = true

``participant.toml`` is described in :mod:`secure_fed.deploy.participant_config`,
``server.toml`` in :mod:`secure_fed.deploy.server_config`, the messages in
:mod:`secure_fed.deploy.flower.messages`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["app_dir"]


def app_dir() -> Path:
    """Return the installed Flower app folder (``flwr run <app_dir> <connection>``)."""
    return Path(__file__).resolve().parent / "app"

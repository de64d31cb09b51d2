"""The same ServerApp and ClientApp under Flower's simulation runtime (Ray), for scale runs.

:func:`run_simulated_federation` runs ``server.toml``'s federation with one
virtual SuperNode per participant: virtual node ``k`` (Flower's
``partition-id``) reads ``<nodes_dir>/node-<k>/participant.toml``. Nothing
else differs from a deployment -- the same apps, handlers, ledger, state
directories and messages -- so a 50-participant run on one machine
exercises the deployed code paths::

    from secure_fed.deploy.flower.simulation import run_simulated_federation
    run_simulated_federation(server_toml, nodes_dir, num_supernodes=50, num_cpus=2)
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.simulation import run_simulation

from secure_fed.deploy.config_errors import ParticipantConfigInvalid
from secure_fed.deploy.flower.client_app import make_client_app
from secure_fed.deploy.flower.server_app import make_server_app

__all__ = ["node_file", "run_simulated_federation"]


def node_file(nodes_dir: Path, context: Context) -> Path:
    """Return virtual node ``partition-id``'s ``participant.toml`` under ``nodes_dir``.

    Raises
    ------
    ParticipantConfigInvalid
        If the context carries no partition id (not a simulation node).
    """
    k = context.node_config.get("partition-id")
    if isinstance(k, bool) or not isinstance(k, int):
        raise ParticipantConfigInvalid(
            "a simulated node needs Flower's partition-id in its node config",
            field="partition-id",
        )
    return nodes_dir / f"node-{k}" / "participant.toml"


def run_simulated_federation(
    server_toml: Path,
    nodes_dir: Path,
    *,
    num_supernodes: int,
    num_cpus: int = 2,
    cpus_per_node: float = 1.0,
) -> None:
    """Run the federation of ``server_toml`` with ``num_supernodes`` virtual nodes (blocks).

    ``num_cpus`` bounds Ray's whole pool; each node's ClientApp takes
    ``cpus_per_node`` of it, so at most ``num_cpus / cpus_per_node`` train at once.
    """
    folder = Path(nodes_dir)
    run_simulation(
        server_app=make_server_app(lambda _context: Path(server_toml)),
        client_app=make_client_app(lambda context: node_file(folder, context)),
        num_supernodes=num_supernodes,
        backend_config={
            "client_resources": {"num_cpus": cpus_per_node, "num_gpus": 0.0},
            "init_args": {"num_cpus": num_cpus, "include_dashboard": False},
        },
    )

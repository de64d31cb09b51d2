"""SuperNode authentication: one node key pair per participant, registered at the SuperLink.

Flower's TLS proves the SuperLink to the nodes, not the nodes to the SuperLink.
With ``flower-superlink --enable-supernode-auth`` a SuperNode must sign every
Fleet request with a key whose public half the SuperLink operator registered
beforehand (``flwr supernode register <key>.pub <connection>``, over the
SuperLink's Control API); a node that self-registers is refused
(``FLEET_SUPERNODE_REGISTRATION_DISABLED``) and a node key nobody registered
cannot activate (``FLEET_NODE_ACTIVATION_FAILED``): either SuperNode exits.

The key ceremony (:func:`secure_fed.deploy.ceremony.create_keys`) calls
:func:`write_node_keys`: an ECDSA P-384 key pair per participant (Flower's
recommended curve), the private key in OpenSSH format in the participant's
directory (``node.key``, 0600, what ``flower-supernode
--auth-supernode-private-key`` reads) beside its public half (``node.pub``), and
every public key for the SuperLink operator in ``root/superlink/nodes/<id>.pub``.

Public API::

    NODE_KEY, NODE_PUB, NODE_DIR
    generate_node_key() -> (private_openssh, public_openssh)
    write_node_keys(root, participant_ids) -> None
    node_public_keys(root) -> dict[participant id, Path]
    register_argv(flwr, public_key, *, connection, name) -> list[str]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.tls import write_private

__all__ = [
    "NODE_DIR",
    "NODE_KEY",
    "NODE_PUB",
    "generate_node_key",
    "node_public_keys",
    "register_argv",
    "write_node_keys",
]

#: A participant's node private key (OpenSSH, 0600) in its key directory.
NODE_KEY = "node.key"
#: Its public half, beside it (what the participant sends to the SuperLink operator).
NODE_PUB = "node.pub"
#: Under the ceremony's root: the public node key of every participant, ``<id>.pub``.
NODE_DIR = Path("superlink") / "nodes"


def generate_node_key() -> tuple[bytes, bytes]:
    """Return a fresh ECDSA P-384 node key pair: (OpenSSH private key, OpenSSH public key)."""
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public + b"\n"


def write_node_keys(root: Path, participant_ids: Sequence[str]) -> None:
    """Write each participant's node key pair and the operator's list of public keys.

    ``root/participants/<id>/node.key`` and ``node.pub``;
    ``root/superlink/nodes/<id>.pub``. Every file 0600, directories 0700.
    """
    for pid in participant_ids:
        private, public = generate_node_key()
        own = Path(root) / "participants" / pid
        write_private(own / NODE_KEY, private)
        write_private(own / NODE_PUB, public)
        write_private(Path(root) / NODE_DIR / f"{pid}.pub", public)


def node_public_keys(root: Path) -> dict[str, Path]:
    """Return the ceremony's public node key files by participant id.

    Raises
    ------
    KeyDirectoryInvalid
        If ``root/superlink/nodes`` holds no key.
    """
    found = {p.stem: p for p in sorted((Path(root) / NODE_DIR).glob("*.pub"))}
    if not found:
        raise KeyDirectoryInvalid(f"no node public keys under {Path(root) / NODE_DIR}")
    return found


def register_argv(flwr: str, public_key: Path, *, connection: str, name: str) -> list[str]:
    """``flwr supernode register`` of one public key at the SuperLink ``connection``.

    ``connection`` names a SuperLink in ``$FLWR_HOME/config.toml``; the reply names the
    node id (needed to unregister it). Not ``--format json``: with it Flower 1.42 exits 0
    even when the SuperLink refuses the key, so only the plain form fails by exit status.
    """
    return [flwr, "supernode", "register", str(public_key), connection, "--name", name]

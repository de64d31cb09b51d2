"""Write a try-out federation's files for the tests: keys, participant.toml, server.toml."""

from __future__ import annotations

from pathlib import Path

from crypto.sm import SM2PrivateKey
from secure_fed.federation.participant import public_set_digest
from secure_fed.learning.data import load_task

ARCHITECTURES = ("mlp", "logreg")


def builtin_public_sm3(name: str, *, seed: int) -> str:
    """SM3 of the public set a built-in task gives every node (each round's slice is in it)."""
    return public_set_digest(load_task(name, seed=seed).public_x)


def write_keys(root: Path, ids: list[str]) -> None:
    """Plaintext-mode keys: participants' SM2 signing keys, their public halves for the server."""
    (root / "aggregator" / "participants").mkdir(parents=True, exist_ok=True)
    for pid in ids:
        key = SM2PrivateKey.generate()
        folder = root / "participants" / pid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "signing-key.pem").write_bytes(key.to_pem_unencrypted_insecure())
        (folder / "signing-key.pem").chmod(0o600)
        (root / "aggregator" / "participants" / f"{pid}.pub.pem").write_bytes(
            key.public_key.to_pem()
        )
    log_key = SM2PrivateKey.generate()
    (root / "aggregator" / "log-signing-key.pem").write_bytes(log_key.to_pem_unencrypted_insecure())


def write_federation(
    root: Path,
    *,
    ids: list[str],
    rounds: int = 2,
    mode: str = "plaintext",
    builtin: str = "digits",
    seed: int = 0,
    evidence_rows: int = 100,
    min_participants: int = 2,
    reply_timeout: float = 600.0,
    extra: str = "",
    by_partition: bool = False,
    insecure_noise: bool = False,
) -> tuple[Path, list[Path]]:
    """Write keys, ``server.toml`` and one ``participant.toml`` per id; return their paths.

    Node folders are ``nodes/<id>``, or ``nodes/node-<k>`` (``by_partition``: the
    simulation runtime's virtual node ``k``).
    """
    write_keys(root / "keys", ids)
    sm3 = builtin_public_sm3(builtin, seed=seed)
    entries = "".join(
        f'\n[[participants]]\nid = "{pid}"\narchitecture = "{ARCHITECTURES[k % 2]}"\n'
        for k, pid in enumerate(ids)
    )
    server = root / "server" / "server.toml"
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text(
        f"""[server]
namespace = "tryout"
ledger_url = "sqlite:///{root / "server" / "ledger.db"}"
log_signing_key = "{root / "keys" / "aggregator" / "log-signing-key.pem"}"
key_dir = "{root / "keys" / "aggregator"}"
reply_timeout = {reply_timeout}
publication_timeout = 300
join_timeout = 120

[federation]
mode = "{mode}"
rounds = {rounds}
seed = {seed}
min_participants = {min_participants}
builtin = "{builtin}"
epochs_per_round = 1
batch_size = 64
evidence_rows = {evidence_rows}
insecure_seeded_slice = {str(insecure_noise).lower()}
{extra}
[public]
sm3 = "{sm3}"
{entries}""",
        encoding="utf-8",
    )
    paths = []
    for k, pid in enumerate(ids):
        folder = root / "nodes" / (f"node-{k}" if by_partition else pid)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "participant.toml"
        path.write_text(
            f"""[participant]
id = "{pid}"
architecture = "{ARCHITECTURES[k % 2]}"
state_dir = "state"

[data]
builtin = "{builtin}"

[public]
builtin = true
sm3 = "{sm3}"

[dp]
epsilon = 8.0
delta = 1e-5
rounds = {rounds}
insecure_seeded_noise = {str(insecure_noise).lower()}

[keys]
dir = "{root / "keys" / "participants" / pid}"

[budget]
ledger_url = "sqlite:///{folder / "own-ledger.db"}"
""",
            encoding="utf-8",
        )
        paths.append(path)
    return server, paths

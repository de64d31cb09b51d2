"""SuperNode authentication with real ``flower-superlink`` / ``flower-supernode`` processes.

The SuperLink of ``secure-fed deploy local`` runs with ``--enable-supernode-auth``
and knows the node public keys of the key ceremony (registered by
:meth:`LocalFederation.register_nodes`). A ceremony node connects; a node with a
key of its own making, or with no key, is refused and exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from secure_fed.deploy.local import SUPERLINK, LocalFederation
from secure_fed.deploy.local_files import LocalLayout, LocalOptions
from secure_fed.deploy.node_auth import NODE_KEY, generate_node_key, register_argv
from secure_fed.deploy.supervisor import ProcessFailed, ProcessSpec, free_port
from secure_fed.deploy.tls import write_private

pytestmark = pytest.mark.slow

WAIT_SECONDS = 90.0


def _bin(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def _flwr(
    fed: LocalFederation, *args: str, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    assert fed.layout is not None
    env = {**os.environ, "FLWR_HOME": str(fed.layout.flwr_home)}
    return subprocess.run(
        [_bin("flwr"), *args], env=env, capture_output=True, check=check, timeout=60
    )


def _nodes(fed: LocalFederation, *extra: str) -> list[dict[str, str]]:
    out = _flwr(fed, "supernode", "ls", "local", "--format", "json", *extra).stdout
    return list(json.loads(out[out.index(b"{") :])["nodes"])


def _register_again(layout: LocalLayout) -> list[str]:
    public = layout.keys / "superlink" / "nodes" / "hospital-1.pub"
    return register_argv("flwr", public, connection="local", name="hospital-1")[1:]


def _wait_online(fed: LocalFederation) -> list[dict[str, str]]:
    deadline = time.monotonic() + WAIT_SECONDS
    nodes = _nodes(fed)
    while not any(n["status"] == "online" for n in nodes) and time.monotonic() < deadline:
        time.sleep(1.0)
        nodes = _nodes(fed)
    return nodes


def _as_job(spec: ProcessSpec, name: str, argv: list[str]) -> ProcessSpec:
    return replace(spec, name=name, argv=argv, expect_exit=True)


def _without(argv: list[str], flag: str) -> list[str]:
    at = argv.index(flag)
    return argv[:at] + argv[at + 2 :]


def test_only_the_ceremony_s_registered_node_keys_connect(tmp_path: Path) -> None:
    options = LocalOptions(participants=2, mode="ckks", rounds=1, run_dir=tmp_path / "run")
    fed = LocalFederation(options=options, python=sys.executable, env=dict(os.environ))
    layout = fed.prepare()
    specs = {spec.name: spec for spec in fed.services()}
    supervisor = fed.supervisor
    assert supervisor is not None
    try:
        supervisor.start(specs[SUPERLINK])
        fed.register_nodes()
        registered = _nodes(fed)
        assert len(registered) == 2 and {n["status"] for n in registered} == {"registered"}
        with pytest.raises(ProcessFailed, match="Public key already in use"):
            fed.register_nodes()  # a refused registration fails the start, it is not skipped

        honest = specs["supernode-hospital-1"]
        assert str(layout.keys / "participants" / "hospital-1" / NODE_KEY) in honest.argv
        supervisor.start(honest)
        nodes = _wait_online(fed)
        assert sorted(n["status"] for n in nodes) == ["online", "registered"]

        # an intruder: the bank's command line, a key the ceremony never made
        intruder_key = tmp_path / "intruder" / NODE_KEY
        write_private(intruder_key, generate_node_key()[0])
        argv = list(specs["supernode-bank-1"].argv)
        argv[argv.index("--auth-supernode-private-key") + 1] = str(intruder_key)
        supervisor.start(_as_job(specs["supernode-bank-1"], "intruder", argv))
        assert supervisor.wait("intruder", timeout=WAIT_SECONDS) != 0
        log = supervisor.children["intruder"].log_tail()
        assert "Failed to initialize the connection to the SuperLink" in log, log
        assert "Failed to activate SuperNode" in log, log

        # no key at all: the node tries to register itself, which node auth forbids
        keyless = _without(list(specs["supernode-bank-1"].argv), "--auth-supernode-private-key")
        supervisor.start(_as_job(specs["supernode-bank-1"], "keyless", keyless))
        assert supervisor.wait("keyless", timeout=WAIT_SECONDS) != 0
        log = supervisor.children["keyless"].log_tail()
        assert "All SuperNodes must be registered via the CLI" in log, log

        supervisor.check()  # the SuperLink and the honest node still run
        assert sorted(n["status"] for n in _nodes(fed)) == ["online", "registered"]

        # revoked: the operator unregisters the honest node; its next request is refused
        online = next(n for n in _nodes(fed) if n["status"] == "online")
        _flwr(fed, "supernode", "unregister", online["node-id"], "local")
        revoked = supervisor.children[honest.name]
        revoked.stopped = True  # its exit is what the test expects, not a failure
        revoked.process.wait(timeout=WAIT_SECONDS)  # it stops: its requests are refused
        statuses = {n["node-id"]: n["status"] for n in _nodes(fed, "--verbose")}
        assert statuses[online["node-id"]] == "unregistered"
        again = _flwr(fed, *_register_again(layout), check=False)
        assert again.returncode != 0  # a revoked key cannot come back under a new node id
        assert b"Public key already in use" in again.stdout + again.stderr
    finally:
        fed.stop()


def test_node_authentication_refuses_an_insecure_superlink(tmp_path: Path) -> None:
    port = str(free_port())
    result = subprocess.run(
        [_bin("flower-superlink"), "--insecure", "--enable-supernode-auth", "--port", port],
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert b"requires encrypted TLS" in result.stdout + result.stderr

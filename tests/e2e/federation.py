"""A federation of real processes on 127.0.0.1 over PostgreSQL: build, fault, inspect.

Shared by the two end-to-end federation modules (one per secure mode, so the
two federations can run on the suite's two workers at once). The federation is
built by :class:`secure_fed.deploy.local.LocalFederation` (what ``secure-fed
deploy local`` runs); the checks read the ledger and each node's own records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import text

from privacy_ledger import PrivacyLedger
from privacy_ledger.audit import canonical
from secure_fed.deploy.local import SUPERLINK, LocalFederation
from secure_fed.deploy.local_files import LocalOptions
from secure_fed.federation.config import ASSET_ID

CLI = [sys.executable, "-c", "from api.cli import main; main()"]


def federation(tmp_path: Path, url: str, *, mode: str, **kw: object) -> LocalFederation:
    """A prepared ``deploy local`` run; a round a stopped party aborts is retried after 0.5 s."""
    kw.setdefault("retry_delay", 0.5)  # the default 5 s doubles to 35 s of waiting per outage
    options = LocalOptions(run_dir=tmp_path / "run", mode=mode, database_url=url, **kw)  # type: ignore[arg-type]
    return LocalFederation(options=options, python=sys.executable, env=dict(os.environ))


def logs(fed: LocalFederation) -> str:
    assert fed.layout is not None
    folder = fed.layout.run_dir / "logs"
    return "\n".join(
        f"==== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in folder.iterdir()
    )


def verify(url: str) -> None:
    done = subprocess.run(
        [*CLI, "ledger", "verify", "--db", url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK")


def audit_entries(url: str, event: str) -> list[dict[str, Any]]:
    ledger = PrivacyLedger.from_url(url, create=False)
    try:
        with ledger.engine.connect() as conn:
            query = text("SELECT entry FROM audit_entries WHERE event = :e ORDER BY entry_index")
            return [canonical.decode(bytes(row[0])) for row in conn.execute(query, {"e": event})]
    finally:
        ledger.engine.dispose()


def charges(url: str, ids: tuple[str, ...]) -> dict[str, list[tuple[str | None, str]]]:
    ledger = PrivacyLedger.from_url(url, create=False)
    try:
        return {pid: [(r.round_id, r.state) for r in ledger.events(pid, ASSET_ID)] for pid in ids}
    finally:
        ledger.engine.dispose()


def kill_after_round(fed: LocalFederation, name: str, *, published: int) -> None:
    """Run the federation; SIGKILL service ``name`` once ``published`` rounds are published."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        done = pool.submit(fed.run, timeout=1500)
        while not done.done():
            stages = fed.round_stages().values()
            if sum(stage == "published" for stage in stages) >= published:
                assert fed.supervisor is not None
                fed.supervisor.kill(name)
                break
            time.sleep(0.5)
        assert done.result() == 0, logs(fed)


def restart_superlink_in_round(fed: LocalFederation, *, round_id: int) -> None:
    """SIGKILL the SuperLink (and the ServerApp it runs) while ``round_id`` collects; restart.

    The SuperNodes keep running and reconnect; a SuperLink whose state is in
    memory gets the node keys registered again; ``flwr run`` starts anew.
    """
    assert fed.supervisor is not None
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(fed.run, timeout=1500)
        while not first.done():
            stages = list(fed.round_stages().values())
            if len(stages) >= round_id and stages[round_id - 1] == "collecting":
                time.sleep(2.0)  # the round message is out; nodes are training
                fed.supervisor.kill(SUPERLINK)
                break
            time.sleep(0.5)
        first.exception()  # the first run ends with the SuperLink, however it ends
    spec = next(spec for spec in fed.services() if spec.name == SUPERLINK)
    fed.supervisor.start(spec)
    if not fed.options.superlink_database:
        fed.register_nodes()
    assert fed.run(timeout=1500) == 0, logs(fed)


def party_down_then_back(fed: LocalFederation, party: str) -> None:
    """Run with ``party`` stopped: the round aborts, nothing published; then restart it."""
    assert fed.supervisor is not None
    fed.supervisor.stop(party)
    fed.run(timeout=900)
    assert "published" not in fed.round_stages().values(), logs(fed)
    assert "DEPLOY_PARTY_UNAVAILABLE" in logs(fed)
    fed.supervisor.start(next(spec for spec in fed.services() if spec.name == party))


def check_node_records(node: Path, *, rounds: int) -> None:
    """A node's own record: every round trained, charged, uploaded and distilled; a model."""
    for rid in range(1, rounds + 1):
        record = json.loads((node / "state" / "rounds" / f"r{rid:08d}.json").read_text())
        assert record["trained"] is True, (rid, record)
        committed = [r for r in record["resolved"] if r["state"] == "committed"]
        assert len(committed) == len(record["reservations"]) >= 1, (rid, record)
        assert len(record["envelope_sm3"]) == 64
        # round r's publication came with round r+1's message, the last on its own
        assert record["distilled"] is True, (rid, record)
    assert (node / "state" / "model.pt").is_file()


def committed(events: list[tuple[str | None, str]]) -> list[str]:
    """The round labels a participant was charged for (its label prior left out)."""
    return [str(r) for r, s in events if s == "committed" and not str(r).endswith("prior")]

"""A federation of real processes on 127.0.0.1, over PostgreSQL, in each secure mode; faults.

Built by :class:`secure_fed.deploy.local.LocalFederation` (what ``secure-fed
deploy local`` runs): key authority, helper (shares), API, SuperLink over TLS
with node authentication, one SuperNode per participant (hospitals and banks on
alternating architectures), each its own process; every participant charges its
budget through the API with its own token. Checked after each run: the rounds'
stages, each participant charged at most once per round (nothing charged twice),
the audit log verifies (``secure-fed ledger verify``).

Faults, several per run so that every federation started proves them: first
the key authority (ckks) or the helper (shares) is down: the run's first round
aborts with the typed error and nothing is published; the party is restarted
and the federation goes on. CKKS, three rounds: the SuperLink and its ServerApp
are SIGKILLed while round 2 collects and restarted: round 2 is aborted, rounds 1
and 3 publish. Shares, three rounds: one participant's SuperNode is SIGKILLed
once round 2 is published: round 3 publishes without it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from privacy_ledger import PrivacyLedger
from privacy_ledger.audit import canonical
from secure_fed.deploy.local import SUPERLINK, LocalFederation
from secure_fed.deploy.local_files import LocalOptions
from secure_fed.federation.config import ASSET_ID
from tests.privacy_ledger.conftest import _admin, pg_schema_url

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
CLI = [sys.executable, "-c", "from api.cli import main; main()"]


@pytest.fixture
def pg_ledger() -> Iterator[str]:
    schema = "e2e_" + secrets.token_hex(6)
    _admin(f"CREATE SCHEMA {schema}")
    try:
        yield pg_schema_url(schema)
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _federation(tmp_path: Path, url: str, *, mode: str, **kw: object) -> LocalFederation:
    options = LocalOptions(run_dir=tmp_path / "run", mode=mode, database_url=url, **kw)  # type: ignore[arg-type]
    return LocalFederation(options=options, python=sys.executable, env=dict(os.environ))


def _logs(fed: LocalFederation) -> str:
    assert fed.layout is not None
    folder = fed.layout.run_dir / "logs"
    return "\n".join(
        f"==== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in folder.iterdir()
    )


def _verify(url: str) -> None:
    done = subprocess.run(
        [*CLI, "ledger", "verify", "--db", url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK")


def _audit_entries(url: str, event: str) -> list[dict[str, Any]]:
    ledger = PrivacyLedger.from_url(url, create=False)
    try:
        with ledger.engine.connect() as conn:
            query = text("SELECT entry FROM audit_entries WHERE event = :e ORDER BY entry_index")
            return [canonical.decode(bytes(row[0])) for row in conn.execute(query, {"e": event})]
    finally:
        ledger.engine.dispose()


def _charges(url: str, ids: tuple[str, ...]) -> dict[str, list[tuple[str | None, str]]]:
    ledger = PrivacyLedger.from_url(url, create=False)
    try:
        return {pid: [(r.round_id, r.state) for r in ledger.events(pid, ASSET_ID)] for pid in ids}
    finally:
        ledger.engine.dispose()


def _kill_after_round(fed: LocalFederation, name: str, *, published: int) -> None:
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
        assert done.result() == 0, _logs(fed)


def _restart_superlink_in_round(fed: LocalFederation, *, round_id: int) -> None:
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
    assert fed.run(timeout=1500) == 0, _logs(fed)


def _party_down_then_back(fed: LocalFederation, party: str) -> None:
    """Run with ``party`` stopped: the round aborts, nothing published; then restart it."""
    assert fed.supervisor is not None
    fed.supervisor.stop(party)
    fed.run(timeout=900)
    assert "published" not in fed.round_stages().values(), _logs(fed)
    assert "DEPLOY_PARTY_UNAVAILABLE" in _logs(fed)
    fed.supervisor.start(next(spec for spec in fed.services() if spec.name == party))


def _check_node_records(node: Path, *, rounds: int) -> None:
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


def _committed(events: list[tuple[str | None, str]]) -> list[str]:
    """The round labels a participant was charged for (its label prior left out)."""
    return [str(r) for r, s in events if s == "committed" and not str(r).endswith("prior")]


def test_ckks_four_participants_and_the_superlink_killed_mid_round(
    tmp_path: Path, pg_ledger: str
) -> None:
    """Three rounds in CKKS mode; the SuperLink (with the ServerApp) dies in round 2, restarts.

    Round 2 is aborted by the next ServerApp ("nothing was released"), rounds 1
    and 3 publish; nobody is charged twice for a round; participants carry on.
    """
    fed = _federation(tmp_path, pg_ledger, mode="ckks", participants=4, rounds=3)
    try:
        fed.start()
        _party_down_then_back(fed, "keyauthority")
        _restart_superlink_in_round(fed, round_id=2)
        stages = fed.round_stages()
    finally:
        fed.stop()
    assert list(stages.values()) == ["published", "aborted", "published"], (
        stages,
        _logs(fed),
    )
    assert fed.layout is not None
    for pid, events in _charges(pg_ledger, fed.layout.ids).items():
        rounds = _committed(events)
        assert rounds[0] == "r1" and rounds[-1] == "r3", (pid, events)
        assert len(rounds) == len(set(rounds)), (pid, events)  # nothing charged twice
    aborted = [e["fields"] for e in _audit_entries(pg_ledger, "round.aborted")]
    # round 1 with the key authority down (never opened), round 2 with the SuperLink killed
    assert [(a["round"], a["stage"]) for a in aborted] == [(1, "unopened"), (2, "collecting")], (
        aborted
    )
    _verify(pg_ledger)


def test_shares_four_participants_and_one_killed_after_round_two(
    tmp_path: Path, pg_ledger: str
) -> None:
    """Three rounds in shares mode; one participant's SuperNode is SIGKILLed after round 2.

    Round 3 publishes without it and records it as dropped; it was charged for
    the rounds it trained only (round 3 at most reserved, never committed twice).
    """
    killed = "hospital-2"
    fed = _federation(
        tmp_path, pg_ledger, mode="shares", participants=4, rounds=3, reply_timeout=120.0
    )
    try:
        fed.start()
        _party_down_then_back(fed, "helper")
        _kill_after_round(fed, f"supernode-{killed}", published=2)
        stages = fed.round_stages()
    finally:
        fed.stop()
    assert list(stages.values()) == ["published"] * 3, (stages, _logs(fed))
    assert fed.layout is not None
    for pid, events in _charges(pg_ledger, fed.layout.ids).items():
        rounds = _committed(events)
        if pid == killed:
            assert rounds[:2] == ["r1", "r2"] and len(rounds) == len(set(rounds)), events
            continue
        assert rounds == ["r1", "r2", "r3"], (pid, events)
        assert all(state == "committed" for _, state in events), (pid, events)
        _check_node_records(fed.layout.run_dir / "nodes" / pid, rounds=3)
    dropped = [e["fields"] for e in _audit_entries(pg_ledger, "participant.dropped")]
    assert {"round": 3, "participant": killed} in [
        {k: f[k] for k in ("round", "participant")} for f in dropped
    ], dropped
    _verify(pg_ledger)

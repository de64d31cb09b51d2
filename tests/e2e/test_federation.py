"""A federation of real processes on 127.0.0.1, over PostgreSQL, in each secure mode; faults.

Built by :class:`secure_fed.deploy.local.LocalFederation` (what ``secure-fed
deploy local`` runs): key authority, helper (shares), API, SuperLink over TLS,
one SuperNode per participant (hospitals and banks on alternating
architectures), each its own process; every participant charges its budget
through the API with its own token. Checked after the run: every round
published, each participant charged once per round it trained (nothing left
held), the audit log verifies. Faults: a participant killed (SIGKILL) before
the run: the rounds complete without it; the helper down: every round aborts
with the typed error and nothing is published; the same for the key
authority in ckks mode.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from privacy_ledger import PrivacyLedger
from secure_fed.deploy.local import LocalFederation
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


def _charges(url: str, ids: tuple[str, ...]) -> dict[str, list[tuple[str | None, str]]]:
    ledger = PrivacyLedger.from_url(url, create=False)
    try:
        return {pid: [(r.round_id, r.state) for r in ledger.events(pid, ASSET_ID)] for pid in ids}
    finally:
        ledger.engine.dispose()


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_four_participants_three_rounds_over_real_processes(
    tmp_path: Path, pg_ledger: str, mode: str
) -> None:
    fed = _federation(tmp_path, pg_ledger, mode=mode, participants=4, rounds=3)
    try:
        fed.start()
        assert fed.run(timeout=1500) == 0, _logs(fed)
        stages = fed.round_stages()
    finally:
        fed.stop()
    assert list(stages.values()) == ["published"] * 3, (stages, _logs(fed))
    assert fed.layout is not None
    charges = _charges(pg_ledger, fed.layout.ids)
    for pid, events in charges.items():
        trained = [r for r, s in events if s == "committed" and not str(r).endswith("prior")]
        assert trained == ["r1", "r2", "r3"], (pid, events)
        assert all(state == "committed" for _, state in events), (pid, events)
    _verify(pg_ledger)


def test_a_killed_participant_is_a_dropout_and_the_rounds_complete(
    tmp_path: Path, pg_ledger: str
) -> None:
    fed = _federation(
        tmp_path, pg_ledger, mode="shares", participants=3, rounds=1, reply_timeout=60.0
    )
    try:
        fed.start()
        assert fed.supervisor is not None
        fed.supervisor.kill("supernode-hospital-2")
        assert fed.run(timeout=900) == 0, _logs(fed)
        stages = fed.round_stages()
    finally:
        fed.stop()
    assert list(stages.values()) == ["published"], (stages, _logs(fed))
    charges = _charges(pg_ledger, ("hospital-1", "bank-1", "hospital-2"))
    assert charges["hospital-2"] == []  # it never trained: nothing reserved, nothing charged
    assert ("r1", "committed") in charges["hospital-1"]
    _verify(pg_ledger)


@pytest.mark.parametrize(("mode", "party"), [("shares", "helper"), ("ckks", "keyauthority")])
def test_a_party_down_aborts_the_round_and_nothing_is_published(
    tmp_path: Path, pg_ledger: str, mode: str, party: str
) -> None:
    fed = _federation(tmp_path, pg_ledger, mode=mode, participants=2, rounds=1)
    try:
        fed.start()
        assert fed.supervisor is not None
        fed.supervisor.stop(party)
        fed.run(timeout=900)
        stages = fed.round_stages()
        logs = _logs(fed)
    finally:
        fed.stop()
    assert "published" not in stages.values(), (stages, logs)
    assert "DEPLOY_PARTY_UNAVAILABLE" in logs
    _verify(pg_ledger)

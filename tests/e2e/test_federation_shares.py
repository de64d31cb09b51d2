"""Shares federation of real processes: the helper down, then a participant killed.

Key authority, helper, API, SuperLink over TLS with node authentication, four
SuperNodes, each its own process over PostgreSQL. First the helper is down: the
run's first round cannot open, nothing is published (typed error); it is
restarted. Then one participant's SuperNode is SIGKILLed once round 2 is
published: round 3 publishes without it (recorded as dropped); it is charged
for the rounds it trained only; every other node's own records show each round
trained, charged, uploaded and distilled; the audit log verifies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.federation import (
    audit_entries,
    charges,
    check_node_records,
    committed,
    federation,
    kill_after_round,
    logs,
    party_down_then_back,
    verify,
)

# the suite's 600 s default is below the federation's own waits (each run up to 1500 s):
# on a shared machine the whole test took over 600 s and was stopped mid-round
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(1800)]


def test_shares_four_participants_and_one_killed_after_round_two(
    tmp_path: Path, pg_ledger: str
) -> None:
    """Three rounds in shares mode; one participant's SuperNode is SIGKILLed after round 2.

    Round 3 publishes without it and records it as dropped; it was charged for
    the rounds it trained only (round 3 at most reserved, never committed twice).
    """
    killed = "hospital-2"
    fed = federation(
        tmp_path, pg_ledger, mode="shares", participants=4, rounds=3, reply_timeout=120.0
    )
    try:
        fed.start()
        party_down_then_back(fed, "helper")
        kill_after_round(fed, f"supernode-{killed}", published=2)
        stages = fed.round_stages()
    finally:
        fed.stop()
    assert list(stages.values()) == ["published"] * 3, (stages, logs(fed))
    assert fed.layout is not None
    for pid, events in charges(pg_ledger, fed.layout.ids).items():
        rounds = committed(events)
        if pid == killed:
            assert rounds[:2] == ["r1", "r2"] and len(rounds) == len(set(rounds)), events
            continue
        assert rounds == ["r1", "r2", "r3"], (pid, events)
        assert all(state == "committed" for _, state in events), (pid, events)
        check_node_records(fed.layout.run_dir / "nodes" / pid, rounds=3)
    dropped = [e["fields"] for e in audit_entries(pg_ledger, "participant.dropped")]
    assert {"round": 3, "participant": killed} in [
        {k: f[k] for k in ("round", "participant")} for f in dropped
    ], dropped
    verify(pg_ledger)

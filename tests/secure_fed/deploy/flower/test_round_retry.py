"""Rounds lost to an infrastructure failure are run again; a security refusal never is.

Driven through :func:`run_federation` on a :class:`LoopbackGrid` (the real
ClientApp answers in this process). The infrastructure failure is real: the
participants charge a real ``secure-fed api`` process that is not started, so
each node gives up with ``DEPLOY_BUDGET_SERVICE_UNAVAILABLE`` after its
``budget.retry_seconds`` (1 s). The ServerApp's wait before a retry is the
test's ``sleep``: it starts the API there (or not), and nothing is timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message
from pydantic import SecretStr
from sqlalchemy import create_engine, text

from api.rest import ApiSettings
from api.rest.context import build_context
from privacy_ledger import PrivacyLedger
from secure_fed.deploy.aggregator_node import AggregatorNode, is_infrastructure_failure
from secure_fed.deploy.config_errors import ServerConfigInvalid
from secure_fed.deploy.flower.messages import ROUND, pack
from secure_fed.deploy.flower.server_app import RoundsNotPublished, run_federation
from secure_fed.deploy.server_config import load_server_config
from secure_fed.deploy.supervisor import free_port
from secure_fed.deploy.transport import remote_helper
from secure_fed.federation.config import ASSET_ID
from tests.secure_fed.deploy.budget_api import PARTICIPANTS, BudgetApi, charge_through, running_api
from tests.secure_fed.deploy.flower.loopback import LoopbackGrid, Sent
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NODES = (101, 102)


# -- the classification -------------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "retried"),
    [
        (["DEPLOY_PARTY_UNAVAILABLE"], True),  # key authority / helper / verifier down
        (["DEPLOY_BUDGET_SERVICE_UNAVAILABLE"] * 2, True),  # the nodes' budget API down
        (["DEPLOY_BUDGET_SERVICE_UNAVAILABLE", None], True),  # and one node silent
        ([None, None], False),  # uploads merely did not come: no known cause
        ([], False),
        (["DEPLOY_PARTY_REPLY_INVALID"], False),  # a party answering nonsense
        (["KEY_AUTHORITY_PLAN_REFUSED"], False),  # a refused plan
        (["SERVER_REQUEST_REPLAYED"], False),  # a security refusal
        (["UPLOAD_SIGNATURE_INVALID", "DEPLOY_BUDGET_SERVICE_UNAVAILABLE"], False),  # forged
        (["SHARES_MAC_INVALID"], False),
        (["POLICY_VIOLATION", None], False),
    ],
)
def test_only_an_infrastructure_failure_is_retried(codes: list[str | None], retried: bool) -> None:
    assert is_infrastructure_failure(codes) is retried


# -- the configuration --------------------------------------------------------------


def _config(tmp_path: Path, extra: str = "") -> Any:
    server, _ = write_federation(tmp_path, ids=list(PARTICIPANTS), evidence_rows=0, extra=extra)
    return load_server_config(server)


def test_max_retries_defaults_to_3_and_0_disables(tmp_path: Path) -> None:
    config = _config(tmp_path / "a")
    assert (config.max_retries, config.retry_delay) == (3, 5.0)
    assert _config(tmp_path / "b", "max_retries = 0\n").max_retries == 0


@pytest.mark.parametrize(
    "extra",
    ["max_retries = -1\n", "max_retries = 101\n", 'max_retries = "3"\n', "max_retries = true\n"]
    + ["max_retries = 1.5\n", "retry_delay = 0\n", "retry_delay = -2\n", 'retry_delay = "5"\n'],
)
def test_a_bad_retry_setting_is_a_typed_config_error(tmp_path: Path, extra: str) -> None:
    with pytest.raises(ServerConfigInvalid) as bad:
        _config(tmp_path, extra)
    assert bad.value.code == "SERVER_CONFIG_INVALID"
    assert bad.value.field == f"federation.{extra.split(' ')[0]}"


# -- over the real ClientApp --------------------------------------------------------


def _federation(tmp_path: Path, api: BudgetApi, *, rounds: int, extra: str) -> Path:
    """Participants charging ``api`` (1 s of budget retries); return ``server.toml``."""
    ctx = build_context(
        ApiSettings(
            database_url=api.db_url,
            api_audit_key_file=api.folder / "audit.key.pem",
            api_session_secret=SecretStr("s" * 40),
        )
    )
    try:
        for pid in PARTICIPANTS:
            ctx.ledger.register_asset(pid, ASSET_ID)
            ctx.ledger.set_budget(pid, ASSET_ID, epsilon="8", delta=1e-5)
    finally:
        ctx.close()
    server, participants = write_federation(
        tmp_path / "fed", ids=list(PARTICIPANTS), rounds=rounds, evidence_rows=0, extra=extra
    )
    for pid, toml in zip(PARTICIPANTS, participants, strict=True):
        charge_through(toml, api, pid, "retry_seconds = 1\n")
    return server


def _grid(server: Path, cls: type[LoopbackGrid] = LoopbackGrid) -> LoopbackGrid:
    nodes = sorted((server.parent.parent / "nodes").glob("*/participant.toml"))
    return cls(dict(zip(NODES, nodes, strict=True)))


def _run(server: Path, grid: LoopbackGrid, sleep: Any) -> dict[int, str]:
    node = AggregatorNode.open(load_server_config(server))
    try:
        with grid.serving():
            return run_federation(grid, node, sleep=sleep)
    finally:
        node.audit.engine.dispose()  # type: ignore[attr-defined]


def _events(server: Path, event: str) -> list[dict[str, Any]]:
    engine = create_engine(f"sqlite:///{server.parent / 'ledger.db'}")
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT entry FROM audit_entries WHERE event = :e"), {"e": event}
            )
            return [json.loads(bytes(row[0]))["fields"] for row in rows]
    finally:
        engine.dispose()


def _stages(server: Path) -> dict[int, str]:
    node = AggregatorNode.open(load_server_config(server))
    try:
        store = node.engine.store
        return {
            rid: state.stage.value
            for rid in range(1, (store.last_round_id() or 0) + 1)
            if (state := store.load(rid)) is not None
        }
    finally:
        node.audit.engine.dispose()  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_round_lost_to_the_budget_api_is_retried_as_the_next_round(tmp_path: Path) -> None:
    """Round 1 aborts (every node's budget API is down), the API comes up, round 2 publishes."""
    with running_api(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, start=False) as api:
        server = _federation(tmp_path, api, rounds=1, extra="retry_delay = 0.5\n")
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            api.supervisor.start(api.spec)  # the failure clears while the ServerApp waits

        grid = _grid(server)
        outcomes = _run(server, grid, sleep)
        ledger = PrivacyLedger.from_url(api.db_url, create=False)
        try:
            charged = {
                (str(r.round_id), r.state)
                for pid in PARTICIPANTS
                for r in ledger.events(pid, ASSET_ID)
            }
        finally:
            ledger.engine.dispose()

    assert list(outcomes) == [1, 2]
    assert outcomes[1].startswith("aborted: ") and "budget API unavailable" in outcomes[1]
    assert outcomes[2] == "published"
    assert _stages(server) == {1: "aborted", 2: "published"}  # round 1 stays aborted
    assert waits == [0.5]
    (retried,) = _events(server, "round.retried")
    assert {k: retried[k] for k in ("round", "retries", "attempt")} == {
        "round": 2,
        "retries": 1,
        "attempt": 1,
    }
    assert "DEPLOY_BUDGET_SERVICE_UNAVAILABLE" in retried["reason"]
    assert {s.group_id for s in grid.of_type(ROUND)} == {"1", "2"}
    assert ("r2", "committed") in charged and not any(rid == "r1" for rid, _ in charged)


def test_retries_exhausted_end_the_run_with_a_typed_error_and_nothing_more_runs(
    tmp_path: Path,
) -> None:
    """The API never comes up: rounds 1 and 2 (its one retry) abort, then the run stops."""
    with running_api(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, start=False) as api:
        server = _federation(tmp_path, api, rounds=2, extra="max_retries = 1\nretry_delay = 0.25\n")
        waits: list[float] = []
        grid = _grid(server)
        with pytest.raises(RoundsNotPublished) as short:
            _run(server, grid, waits.append)

    error = short.value
    assert (error.code, error.published, error.wanted) == ("DEPLOY_ROUNDS_NOT_PUBLISHED", 0, 2)
    assert list(error.outcomes) == [1, 2]
    assert "retries used" in str(error)
    assert {s.group_id for s in grid.of_type(ROUND)} == {"1", "2"}  # no round 3
    assert _stages(server) == {1: "aborted", 2: "aborted"}
    assert [e["round"] for e in _events(server, "round.retried")] == [2]
    assert waits == [0.25]


class _ForgingGrid(LoopbackGrid):
    """Every node's round reply carries a forged upload instead of its own."""

    def push_messages(self, messages: Any) -> Any:
        batch = list(messages)
        if not any(m.metadata.message_type == ROUND for m in batch):
            return super().push_messages(batch)
        ids = []
        for message in batch:
            message.metadata.__dict__["_message_id"] = f"forged-{len(self.replies)}-{id(message)}"
            reply = Message(pack({}, b"\x00forged upload\x00" * 8), reply_to=message)
            self.replies[message.metadata.message_id] = reply
            ids.append(message.metadata.message_id)
            self.sent.append(Sent(ROUND, message.metadata.group_id, 0, {}, None))
        return ids


def test_a_round_lost_to_forged_uploads_is_not_retried(tmp_path: Path) -> None:
    server, _ = write_federation(
        tmp_path, ids=list(PARTICIPANTS), rounds=1, evidence_rows=0, extra="retry_delay = 0.25\n"
    )
    waits: list[float] = []
    grid = _grid(server, _ForgingGrid)
    with pytest.raises(RoundsNotPublished) as short:
        _run(server, grid, waits.append)

    assert list(short.value.outcomes) == [1]
    assert {s.group_id for s in grid.of_type(ROUND)} == {"1"}
    assert _stages(server) == {1: "aborted"}
    assert _events(server, "round.retried") == [] and waits == []


def test_a_round_that_cannot_open_for_a_down_helper_is_retried_after_its_health_check(
    tmp_path: Path,
) -> None:
    """The helper nobody serves fails every round at open (a real request to a closed port).

    Attempt 1's wait ends with the helper's ``/healthz`` not answering: nothing opens;
    attempt 2's (the wait doubled) with it answering: round 2 runs, fails alike, and
    the two attempts configured are used: the run stops with the typed error. No round
    message ever goes out."""
    down = f"http://127.0.0.1:{free_port()}"
    server, _ = write_federation(
        tmp_path,
        ids=list(PARTICIPANTS),
        rounds=1,
        evidence_rows=0,
        extra=f'max_retries = 2\nretry_delay = 0.5\n\n[parties]\nhelper_url = "{down}"\n',
    )
    node = AggregatorNode.open(load_server_config(server))
    helper = remote_helper(down, tls=None, timeout=5)

    def open_round(config: Any) -> Any:
        helper(b"plan")  # raises PartyUnavailable naming the helper's URL
        raise AssertionError("the helper answered")

    node.handler._inner.open_round = open_round
    waits: list[float] = []
    probed: list[str] = []

    def probe(url: str) -> bool:
        probed.append(url)
        return len(probed) > 1  # the first health check fails, the second passes

    grid = _grid(server)
    try:
        with grid.serving(), pytest.raises(RoundsNotPublished) as short:
            run_federation(
                grid,
                node,
                sleep=waits.append,
                probe=probe,
            )
    finally:
        node.audit.engine.dispose()  # type: ignore[attr-defined]
    assert list(short.value.outcomes) == [1, 2]
    assert waits == [0.5, 1.0] and probed == [down, down]  # doubled while /healthz failed
    assert grid.of_type(ROUND) == []
    (retried,) = _events(server, "round.retried")
    assert (retried["round"], retried["retries"], retried["attempt"]) == (2, 1, 2)
    assert "DEPLOY_PARTY_UNAVAILABLE" in retried["reason"] and down in retried["reason"]
    aborted = _events(server, "round.aborted")
    assert [(e["round"], e["stage"]) for e in aborted] == [(1, "unopened"), (2, "unopened")]
    assert all(
        e["reason"].startswith("helper unavailable: DEPLOY_PARTY_UNAVAILABLE") for e in aborted
    )

    # restarted, the helper still down: ids 1 and 2 are not used again, and the one
    # attempt left of the two is all it gets
    again = AggregatorNode.open(load_server_config(server))
    again.handler._inner.open_round = open_round
    try:
        with grid.serving(), pytest.raises(RoundsNotPublished) as restarted:
            run_federation(grid, again, sleep=waits.append, probe=lambda url: True)
    finally:
        again.audit.engine.dispose()  # type: ignore[attr-defined]
    assert list(restarted.value.outcomes) == [3, 4]
    assert [(e["round"], e["attempt"]) for e in _events(server, "round.retried")] == [
        (2, 2),
        (4, 2),
    ]

"""The result ``secure-fed deploy local`` prints: rounds, parties, next commands, 100 columns.

The rounds come from a real SQLite ledger with round rows as the aggregator stores them
(a published round and an aborted one); the layout is the one :func:`prepare` describes.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
from sqlalchemy import insert

from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.models import RoundRow
from secure_fed.deploy.api_service import ApiEndpoint
from secure_fed.deploy.local_files import LocalLayout, participant_ids
from secure_fed.deploy.local_report import WIDTH, RoundsLost, render, run_report
from secure_fed.deploy.supervisor import RESTARTS_FILE, Restart

IDS = participant_ids(12)


def _layout(run: Path, url: str) -> LocalLayout:
    keys = run / "keys"
    (keys / "aggregator").mkdir(parents=True)
    for role in ("scoring", "publication"):
        (keys / "aggregator" / f"{role}.context").write_bytes(b"public")
    api = ApiEndpoint(url="https://127.0.0.1:8443", ca_file=keys / "tls" / "ca.pem",
                      config=run / "api" / "api.toml")  # fmt: skip
    return LocalLayout(
        run_dir=run, keys=keys, ids=tuple(IDS), database_url=url, api=api,
        server_toml=run / "server" / "server.toml",
        participant_tomls={p: run / "nodes" / p / "participant.toml" for p in IDS},
        flwr_home=run / "flwr", superlink_port=1, authority_port=2, helper_port=3,
    )  # fmt: skip


def _rounds(url: str) -> None:
    engine = create_ledger_engine(url)
    upgrade(engine)
    published = {"uploads": {p: {} for p in IDS}, "excluded": ["bank-6"],
                 "publication_sm3": "ab" * 32, "reason": None}  # fmt: skip
    aborted = {"uploads": {"hospital-1": {}}, "excluded": [], "publication_sm3": None,
               "reason": "too few uploads: 1 of the 2 the round needs"}  # fmt: skip
    rows = [
        {"id": "local:1", "stage": "published", "state": published},
        {"id": "local:2", "stage": "aborted", "state": aborted},
        {"id": "other:1", "stage": "published", "state": published},
    ]
    with engine.begin() as conn:
        conn.execute(insert(RoundRow), [{**r, "created_at": 0.0, "updated_at": 0.0} for r in rows])
    engine.dispose()


def _published(url: str, round_id: int) -> None:
    engine = create_ledger_engine(url)
    state = {"uploads": {p: {} for p in IDS}, "excluded": [], "publication_sm3": "cd" * 32,
             "reason": None}  # fmt: skip
    row = {"id": f"local:{round_id}", "stage": "published", "state": state}
    with engine.begin() as conn:
        conn.execute(insert(RoundRow), [{**row, "created_at": 0.0, "updated_at": 0.0}])
    engine.dispose()


def test_the_result_names_rounds_parties_and_commands_within_100_columns(tmp_path: Path) -> None:
    run = tmp_path / "run"
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    _rounds(url)
    text = render(run_report(_layout(run, url), mode="ckks", rounds_wanted=3))
    lines = text.splitlines()
    assert max(map(len, lines)) <= WIDTH, text
    assert lines[:2] == ["1 of 3 rounds published", f"run folder: {run}"]
    row = lines.index("Rounds") + 2
    assert lines[row].startswith("1      published   published abababababababab...; uploaded: ")
    assert "excluded: bank-6" in " ".join(lines[row : row + 4])
    aborted = next(k for k, line in enumerate(lines) if line.startswith("2      aborted"))
    assert "too few uploads: 1 of the 2" in " ".join(lines[aborted : aborted + 3]), text
    assert "other" not in text  # another federation's rounds are not this run's
    assert "keyauthority     log   logs/keyauthority.log" in lines
    assert "node hospital-1  log   logs/supernode-hospital-1.log" in lines
    assert "helper" not in text  # ckks runs no helper
    for label in ("recompute every scoring decryption", "recompute every publication decryption"):
        start = lines.index(f"{label}:") + 1
        words: list[str] = []
        for line in lines[start:]:
            words += [w.replace("$RUN", str(run)) for w in shlex.split(line.removesuffix(" \\"))]
            if not line.endswith(" \\"):
                break
        role = label.split()[2]
        context = run / "keys" / "aggregator" / f"{role}.context"
        assert words == ["secure-fed", "ledger", "verify", "--db", url, "--recompute",
                         "--public-context", str(context)]  # fmt: skip
    assert "secure-fed audit export --db" in text and "secure-fed api token create" in text
    assert f"    RUN={run}" in lines  # the commands' $RUN, set first


def test_a_shares_run_lists_its_helper_and_no_recompute(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    _rounds(url)
    text = render(run_report(_layout(tmp_path / "run", url), mode="shares", rounds_wanted=2))
    assert "helper           log   logs/helper.log" in text.splitlines()
    assert "recompute" not in text


def test_a_long_run_folder_never_splits_the_outcome(tmp_path: Path) -> None:
    """The first line is the outcome, whole, however long the folder (scripts grep for it)."""
    run = tmp_path / ("a-long-folder-name-" * 6) / "run"
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    _rounds(url)
    lines = render(run_report(_layout(run, url), mode="ckks", rounds_wanted=3)).splitlines()
    assert len(str(run)) > WIDTH
    assert lines[:2] == ["1 of 3 rounds published", f"run folder: {run}"]


def test_a_run_with_rounds_not_published_is_a_coded_error_naming_each(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    _rounds(url)  # round 1 published, round 2 aborted
    layout = _layout(tmp_path / "run", url)
    run_report(layout, mode="ckks", rounds_wanted=1).check()  # every configured round published
    with pytest.raises(RoundsLost) as lost:
        run_report(layout, mode="ckks", rounds_wanted=3).check()
    assert lost.value.code == "DEPLOY_ROUNDS_LOST"
    assert (lost.value.published, lost.value.wanted) == (1, 3)
    assert lost.value.lost == (
        "round 2: aborted: too few uploads: 1 of the 2 the round needs",
        "round 3: never opened",
    )
    assert lost.value.message.startswith("1 of 3 configured rounds published; round 2: aborted")


def test_the_result_names_each_restarted_process_from_the_supervisors_record(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    _rounds(url)
    layout = _layout(run, url)
    assert "Restarts: none" in render(run_report(layout, mode="shares", rounds_wanted=2))
    records = [
        Restart(process="helper", status=-9, exit="killed by SIGKILL", attempt=1, delay=0.5,
                time=1.0),
        Restart(process="supernode-bank-1", status=1, exit="exited with 1", attempt=1,
                delay=0.5, time=2.0),
        Restart(process="supernode-bank-1", status=1, exit="exited with 1", attempt=1,
                delay=10.0, time=3.0, busy=True),
    ]  # fmt: skip
    (run / RESTARTS_FILE).write_text(
        "".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in records)
    )
    lines = render(run_report(layout, mode="shares", rounds_wanted=2)).splitlines()
    start = lines.index("Restarts (the supervisor's record: supervisor.jsonl)")
    assert lines[start + 1 : start + 3] == [
        "helper restarted once (killed by SIGKILL)",
        "supernode-bank-1 restarted twice "
        "(exited with 1, exited with 1 while its place was still held)",
    ]


def test_a_round_run_again_after_a_failed_service_loses_nothing_once_enough_published(
    tmp_path: Path,
) -> None:
    """Round 2 aborted and retried as round 3: two published of two wanted is no loss."""
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    _rounds(url)  # round 1 published, round 2 aborted
    _published(url, 3)
    layout = _layout(tmp_path / "run", url)
    run_report(layout, mode="ckks", rounds_wanted=2).check()  # 2 of 2: the retry made it up
    with pytest.raises(RoundsLost) as lost:
        run_report(layout, mode="ckks", rounds_wanted=3).check()
    assert (lost.value.published, lost.value.wanted) == (2, 3)
    assert lost.value.lost == ("round 2: aborted: too few uploads: 1 of the 2 the round needs",)

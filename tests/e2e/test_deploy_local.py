"""``secure-fed deploy local`` as a user runs it: Ctrl-C stops every process; a run's result.

The command starts the key ceremony, the key authority, the helper (shares
mode), the API, the SuperLink and the SuperNodes, then the run; a ``SIGINT``
sent as soon as the services are up must stop all of them -- every process
that descended from the command, including Flower's own sub-processes --
and the command must exit 130. A ckks run shows the key authority's decryptions in the
console and the report while its services are up, prints its result on standard
output, and the recomputation it names passes on the run folder. The ckks run has its
verifier (a process of its own): every decryption request the key authority served was
attested first, in the verifier's own audit log. The round's gatekeeper (the helper in
shares mode, the key authority in ckks mode) killed outright mid-run is restarted by the
supervisor and the run goes on to publish every configured round.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from api.cli import app
from privacy_ledger import create_ledger_engine
from privacy_ledger.api_tokens import ApiTokenStore
from tests.api.cli.test_ledger_recompute import _alter_decryption, _alter_upload
from tests.api.rest.console.pages import parse
from tests.e2e.procs import descendants, survivors, wait_for_text

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
runner = CliRunner()
ROUND = "local:00000001"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_process_of_the_federation(tmp_path: Path, signum: int) -> None:
    err = tmp_path / "stderr.txt"
    run_dir = tmp_path / "run"
    with err.open("wb") as sink:
        command = subprocess.Popen(
            [*CLI, "deploy", "local", "--participants", "2", "--mode", "shares",
             "--rounds", "1", "--run-dir", str(run_dir)],
            env=ENV, stdout=sink, stderr=sink, cwd=tmp_path,
        )  # fmt: skip
        try:
            wait_for_text(err, "services up", timeout=300, proc=command)
            tree = descendants(command.pid)
            logs = {p.name for p in (run_dir / "logs").iterdir()}
            assert {"keyauthority.log", "helper.log", "api.log", "superlink.log"} <= logs
            assert {"supernode-hospital-1.log", "supernode-bank-1.log"} <= logs
            assert len(tree) >= 6, tree
            command.send_signal(signum)
            status = command.wait(timeout=120)
        finally:
            if command.poll() is None:
                command.kill()
    assert status == (130 if signum == signal.SIGINT else 143), err.read_text()
    assert not survivors(tree), (survivors(tree), err.read_text())
    assert "stopping every process" in err.read_text()


def _printed_command(stdout: str, label: str, run: Path) -> list[str]:
    """The command printed under ``label:`` in the result, continuations joined, ``$RUN`` set."""
    lines = stdout.splitlines()
    start = lines.index(f"{label}:") + 1
    words: list[str] = []
    for line in lines[start:]:
        words += [w.replace("$RUN", str(run)) for w in shlex.split(line.removesuffix(" \\"))]
        if not line.endswith(" \\"):
            break
    assert words[0] == "secure-fed", words
    return words[1:]


def _officer(run: Path) -> str:
    engine = create_ledger_engine(f"sqlite:///{run / 'ledger.db'}")
    try:
        return ApiTokenStore(engine).create(name="e2e officer", role="officer").secret
    finally:
        engine.dispose()


def _check_console(api: str, run: Path) -> None:
    headers = {"Authorization": f"Bearer {_officer(run)}"}
    with httpx.Client(verify=str(run / "keys" / "tls" / "ca.pem"), timeout=120.0) as client:
        page = parse(client.get(f"{api}/console/rounds/{ROUND}", headers=headers).text)
        rows = page.body_rows("Decryptions and refusals of this round recorded by the key")
        released = [r for r in rows if r[3] == "decryption.released"]
        assert released, page.html
        assert all(r[2] == "key authority" for r in rows)
        assert {r[6] for r in released} >= {"score", "aggregate"}
        assert any(r[5] == "aggregator" for r in released)
        assert "verified" in " ".join(page.texts["party-status"])
        report = client.get(f"{api}/v1/reports/export?format=html", headers=headers)
        assert report.status_code == 200, report.text
        assert "key authority (own log)" in report.text
        assert "decryption.released" in report.text


def _fields(audit_db: Path, *events: str) -> list[dict[str, object]]:
    """The fields of every entry of ``events`` in a party's own audit log, in order."""
    marks = ", ".join("?" * len(events))
    with sqlite3.connect(audit_db) as db:
        rows = db.execute(
            f"SELECT event, entry FROM audit_entries WHERE event IN ({marks}) ORDER BY entry_index",
            events,
        ).fetchall()
    return [{**json.loads(bytes(r[1]))["fields"], "event": r[0]} for r in rows]


def _check_verified_release(run: Path) -> None:
    """The verifier held both uploads and attested every request before its release.

    And the key authority holds both participants' signed upload notices, so the
    round's roster could not have left either out.
    """
    verifier, authority = run / "verifier" / "audit.db", run / "keyauthority" / "audit.db"
    with sqlite3.connect(verifier) as db:
        size, signed = db.execute("SELECT tree_size, last_head_size FROM log_state").fetchone()
    assert signed == size  # the verifier stopped cleanly too
    held = _fields(verifier, "verifier.upload_held")
    assert {(e["round_id"], e["participant_id"]) for e in held} == {
        (1, "bank-1"),
        (1, "hospital-1"),
    }
    attested = {e["request_sm3"] for e in _fields(verifier, "verifier.attested")}
    served = _fields(authority, "decryption.requested", "decryption.released")
    asked: list[object] = []
    for entry in served:  # each release follows its request, which the verifier attested
        if entry["event"] == "decryption.requested":
            asked.append(entry["request_sm3"])
        else:
            assert asked and asked[-1] in attested, (entry, asked, attested)
    assert asked and set(asked) <= attested, (asked, attested)
    released = [e for e in served if e["event"] == "decryption.released"]
    assert {"aggregate", "score"} <= {str(e["purpose"]) for e in released}
    denied = _fields(authority, "access.denied") + _fields(verifier, "access.denied")
    assert not denied, denied  # an honest run: nothing refused by either
    noticed = _fields(authority, "upload.noticed")  # each participant's, before its upload
    assert {(e["round_id"], e["participant_id"]) for e in noticed} == {
        (1, "bank-1"),
        (1, "hospital-1"),
    }


def _check_export(run: Path, out: Path) -> None:
    export = subprocess.run(
        [*CLI, "audit", "export", "--db", f"sqlite:///{run / 'ledger.db'}",
         "--format", "html", "--out", str(out)],
        env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert export.returncode == 0, export.stdout + export.stderr
    assert "party audit logs included: key_authority" in export.stdout
    assert "key authority (own log)" in out.read_text()


@pytest.mark.timeout(1800)
def test_a_ckks_run_shows_its_decryptions_prints_its_result_and_recomputes(tmp_path: Path) -> None:
    """One real ckks run, as a user runs it, checked as the officer and the auditor would.

    While the services are up, the console's round page and the run's report export
    (HTTPS over loopback, the run's CA) show the decryptions the key authority recorded
    in its own audit log, and so does ``secure-fed audit export`` with no flag beyond
    ``--db``: both find the party logs in the run folder. After Ctrl-C: the result was
    on stdout (100 columns), progress on stderr; the printed recompute passes and names
    an altered upload; an altered decryption record fails the authority's log.
    """
    run_dir = tmp_path / "run"
    out_file, err_file = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out_file.open("wb") as out_sink, err_file.open("wb") as err_sink:
        command = subprocess.Popen(
            [*CLI, "deploy", "local", "--participants", "2", "--mode", "ckks",
             "--rounds", "1", "--run-dir", str(run_dir)],
            env=ENV, stdout=out_sink, stderr=err_sink, cwd=tmp_path,
        )  # fmt: skip
        try:
            wait_for_text(out_file, "rounds published", timeout=1200, proc=command)
            found = re.search(
                r"API (https://127\.0\.0\.1:\d+)", out_file.read_text() + err_file.read_text()
            )
            assert found, (out_file.read_text(), err_file.read_text()[-6000:])
            _check_console(found.group(1), run_dir)
            _check_export(run_dir, tmp_path / "report.html")
            command.send_signal(signal.SIGINT)
            assert command.wait(timeout=120) == 130, err_file.read_text()[-6000:]
        finally:
            if command.poll() is None:
                command.kill()
                command.wait()
    with sqlite3.connect(run_dir / "keyauthority" / "audit.db") as db:
        size, signed = db.execute("SELECT tree_size, last_head_size FROM log_state").fetchone()
    assert signed == size  # stopped cleanly: its last decryptions are under a signed head
    out = out_file.read_text()
    assert out.startswith(f"1 of 1 rounds published\nrun folder: {run_dir}\n"), out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert re.search(
        r"^1 +published +published [0-9a-f]{16}\.\.\.; uploaded: bank-1, hospital-1;", out, re.M
    ), out
    assert re.search(r"^keyauthority +log   logs/keyauthority\.log$", out, re.M), out
    assert re.search(r"^verifier +log   logs/verifier\.log$", out, re.M), out
    _check_verified_release(run_dir)
    assert "services up" in err_file.read_text() and "services up" not in out
    assert f"    RUN={run_dir}" in out.splitlines(), out
    assert "{" not in out, out  # no Python dict any more
    for label in ("recompute every scoring decryption", "recompute every publication decryption"):
        result = runner.invoke(app, _printed_command(out, label, run_dir))
        assert result.exit_code == 0 and "all match" in result.output, result.output
        assert "the key authority's audit log: sqlite:///" in result.output
    scoring = _printed_command(out, "recompute every scoring decryption", run_dir)
    url = scoring[scoring.index("--db") + 1]
    _alter_upload(url)
    result = runner.invoke(app, scoring)
    assert result.exit_code == 1, result.output
    assert "MISMATCH: round 1, purpose " in result.output, result.output
    assert "CLI_RECOMPUTE_MISMATCH" in result.output
    index = _alter_decryption(f"sqlite:///{run_dir / 'keyauthority' / 'audit.db'}")
    publication = _printed_command(out, "recompute every publication decryption", run_dir)
    result = runner.invoke(app, publication)
    assert result.exit_code == 1, result.output
    assert f"first bad entry: {index}" in result.output, result.output


def _pid_of(tree: set[int], *words: str) -> int:
    for pid in sorted(tree):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(w.encode() in argv for w in words):
            return pid
    raise AssertionError(f"no process {words} in {tree}")


@pytest.mark.parametrize(("mode", "gatekeeper"), [("shares", "helper"), ("ckks", "keyauthority")])
def test_a_gatekeeper_killed_mid_run_is_restarted_and_the_run_goes_on_to_publish(
    tmp_path: Path, mode: str, gatekeeper: str
) -> None:
    """The round's gatekeeper is killed outright while round 1 collects; it is restarted.

    The supervisor restarts it on its state directory (its plan book, nonces and
    notices) and the federation keeps running: the killed round publishes or aborts,
    nothing in between; an aborted one is run again under the next id, and the
    participants' DP plans have the room for it, so every configured round publishes.
    Standard error says the restart, the result names it, ``supervisor.jsonl`` holds
    it, and nothing is left running after ``--exit``.
    """
    out, err, run_dir = tmp_path / "stdout.txt", tmp_path / "stderr.txt", tmp_path / "run"
    with out.open("wb") as out_sink, err.open("wb") as sink:
        command = subprocess.Popen(
            [*CLI, "deploy", "local", "--participants", "2", "--mode", mode,
             "--rounds", "2", "--exit", "--run-dir", str(run_dir)],
            env=ENV, stdout=out_sink, stderr=sink, cwd=tmp_path,
        )  # fmt: skip
        try:
            wait_for_text(err, "services up", timeout=300, proc=command)
            # round 1 is open: the ServerApp sent the gatekeeper its first request
            log = run_dir / "logs" / f"{gatekeeper}.log"
            wait_for_text(log, "POST /v1/", timeout=600, proc=command)
            tree = descendants(command.pid)
            os.kill(_pid_of(tree, gatekeeper, "serve"), signal.SIGKILL)
            status = command.wait(timeout=900)
            tree |= descendants(command.pid) if command.poll() is None else set()
        finally:
            if command.poll() is None:
                command.kill()
    text, result = err.read_text(), out.read_text()
    assert f"{gatekeeper} killed by SIGKILL: restarting it in 0.5 s (restart 1;" in text, text
    assert "DEPLOY_PROCESS_FAILED" not in text, text
    records = [json.loads(line) for line in (run_dir / "supervisor.jsonl").read_text().splitlines()]
    assert [(r["process"], r["exit"], r["attempt"]) for r in records] == [
        (gatekeeper, "killed by SIGKILL", 1)
    ], records
    assert f"{gatekeeper} restarted once (killed by SIGKILL)" in result.splitlines(), result
    stages = re.findall(r"^(\d+) {2,}(\w+) ", result, re.M)  # the rows of Rounds
    assert ("2", "published") in stages, result  # the run went on past the killed round
    assert dict(stages).get("1") in ("published", "aborted"), result
    if dict(stages)["1"] == "aborted":  # run again under the next id, and published
        assert ("3", "published") in stages, result
    # every configured round published: an aborted round's retry found the participants
    # with a DP round left ([dp] rounds = rounds + max_retries)
    assert status == 0 and result.startswith("2 of 2 rounds published"), (status, text, result)
    assert not survivors(tree), (survivors(tree), text)

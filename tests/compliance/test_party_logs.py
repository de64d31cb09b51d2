"""Every party's audit log in the report and checklist: verified, cross-checked, or why not.

The deployment folder is written by the project's own parties
(:mod:`tests.compliance.parties_builder`): a real key authority on its own SQLite
audit log serves a real CKKS round and refuses a second plan for it.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from compliance import BundleInvalid, export_report, verify_bundle
from compliance.bundle import PARTY_SECTIONS
from compliance.checklist import load_config, run_checklist
from compliance.parties import discover_run_folder, read_party_logs, run_folder_sources
from compliance.party_check import cross_check_parties, ledger_rounds
from crypto.sm import SM2PrivateKey
from privacy_ledger import RoundStore, create_ledger_engine
from privacy_ledger.audit import canonical
from tests.compliance.mutate import resign
from tests.compliance.parties_builder import Deployment, build_deployment

REFUSAL = "round 1 already has a release plan"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return build_deployment(tmp_path_factory.mktemp("deploy") / "run")


@pytest.fixture
def copy(deployment: Deployment, tmp_path: Path) -> Deployment:
    """A private copy of the deployment folder that a test may tamper with."""
    target = tmp_path / "run"
    shutil.copytree(deployment.run, target)
    return Deployment(run=target)


def _export(dep: Deployment, out: Path, fmt: str = "json", key: SM2PrivateKey | None = None):  # type: ignore[no-untyped-def]
    engine = create_ledger_engine(dep.ledger_url)
    try:
        return export_report(
            engine,
            fmt=fmt,
            out=out,
            signing_key=key,
            produced_by="test",
            party_logs=run_folder_sources(dep.run),
            party_logs_from=f"--party-logs {dep.run}",
        )
    finally:
        engine.dispose()


def _party_check(dep: Deployment) -> dict[str, object]:
    engine = create_ledger_engine(dep.ledger_url)
    try:
        result = run_checklist(load_config(None), engine)
    finally:
        engine.dispose()
    entry = next(e for e in result.entries if e.id == "parties.audit_logs")
    return {"status": entry.status, "reason": entry.reason, "ok": result.ok}


def test_the_run_folder_is_found_from_its_ledger(deployment: Deployment) -> None:
    assert discover_run_folder(database_url=deployment.ledger_url) == deployment.run.resolve()
    key = deployment.run / "keys" / "api" / "audit.key.pem"
    assert discover_run_folder(database_url="postgresql://db/x", audit_key=key) == (
        deployment.run.resolve()
    )
    [source] = run_folder_sources(deployment.run)  # ckks: the key authority only
    assert source.party == "key_authority" and source.public_key is not None


def test_the_report_includes_the_key_authority_s_decryptions(
    deployment: Deployment, tmp_path: Path
) -> None:
    read = read_party_logs(run_folder_sources(deployment.run))
    released = [r for r in read.decryptions if r["event"] == "decryption.released"]
    asked = [r for r in released if r["step"] == "not recorded"]  # copies counts: no request
    assert asked and all(r["requester"] == "aggregator" for r in asked), asked
    assert {r["purpose"] for r in released} >= {"score", "aggregate"}
    key = SM2PrivateKey.generate()
    result = _export(deployment, tmp_path / "bundle.json", key=key)
    assert result.party_disagreements == () and result.disagreements == ()
    parties = result.meta["federation"]["party_logs"]
    assert parties["included"] == ["key_authority"] and parties["not_included"] == {}
    assert result.meta["counts"]["party_decryptions"] == len(read.decryptions)
    verify_bundle(tmp_path / "bundle.json", public_key=key.public_key)  # still verifies offline
    _export(deployment, tmp_path / "report.html", fmt="html")
    html = (tmp_path / "report.html").read_text()
    assert "key authority (own log)" in html and REFUSAL in html
    unsigned = [r for r in read.decryptions if not r["signed_head"]]  # after the newest head
    assert ("after its newest signed head" in html) == bool(unsigned)
    assert "Party audit logs included" in html and "verified" in html
    _export(deployment, tmp_path / "report.pdf", fmt="pdf")
    assert (tmp_path / "report.pdf").read_bytes().startswith(b"%PDF")
    assert _party_check(deployment)["status"] == "pass"


def test_a_tampered_party_log_is_not_included_and_fails(copy: Deployment, tmp_path: Path) -> None:
    with sqlite3.connect(copy.authority_db) as db:
        index, entry = db.execute(
            "SELECT entry_index, entry FROM audit_entries WHERE event = 'decryption.released'"
        ).fetchone()
        forged = bytes(entry).replace(b'"contributors":', b'"contributors":1', 1)
        db.execute("UPDATE audit_entries SET entry = ? WHERE entry_index = ?", (forged, index))
    result = _export(copy, tmp_path / "report.html", fmt="html")
    [log] = result.meta["federation"]["party_logs"]["not_included"].items()
    assert log[0] == "key_authority" and log[1].startswith("unverified: does not verify")
    [row] = result.party_disagreements
    assert row["rule"] == "party log included" and "does not verify" in row["detail"]
    assert "does not verify" in (tmp_path / "report.html").read_text()
    check = _party_check(copy)
    assert check["status"] == "fail" and "does not verify" in str(check["reason"])
    assert not check["ok"]


def test_a_missing_party_log_is_stated_never_passed(copy: Deployment, tmp_path: Path) -> None:
    copy.authority_db.unlink()
    result = _export(copy, tmp_path / "report.html", fmt="html")
    [row] = result.party_disagreements
    assert row["rule"] == "party log included" and "no audit database at" in row["detail"]
    check = _party_check(copy)
    assert check["status"] == "fail" and "missing" in str(check["reason"])


def test_a_published_round_without_its_release_disagrees(copy: Deployment) -> None:
    engine = create_ledger_engine(copy.ledger_url)
    try:
        RoundStore(engine).save(
            "local:00000002", stage="published", state={"config": {"round_id": 2}}
        )
        RoundStore(engine).record_decryption(
            "local:00000001", requester="aggregator", kind="ckks", what="x", aggregate_size=3
        )
        rows = cross_check_parties(
            read_party_logs(run_folder_sources(copy.run)), ledger_rounds(engine)
        )
    finally:
        engine.dispose()
    bad = {r["round"]: r["detail"] for r in rows if not r["agree"]}
    assert set(bad) == {"local:00000002"}, rows
    assert "no party log records a release" in bad["local:00000002"]
    check = _party_check(copy)
    assert check["status"] == "fail" and "local:00000002" in str(check["reason"])


def test_audit_export_finds_the_party_logs_and_refuses_a_disagreement(
    deployment: Deployment, copy: Deployment, tmp_path: Path
) -> None:
    runner = CliRunner()
    args = ["audit", "export", "--format", "html", "--out", str(tmp_path / "r.html")]
    good = runner.invoke(app, [*args, "--db", deployment.ledger_url])
    assert good.exit_code == 0, good.output
    assert "party audit logs included: key_authority" in good.output
    copy.authority_db.unlink()
    bad = runner.invoke(app, [*args, "--db", copy.ledger_url])
    assert bad.exit_code == 1, bad.output
    assert "CLI_CROSS_CHECK_MISMATCH" in bad.output and "no audit database at" in bad.output
    off = runner.invoke(app, [*args, "--db", copy.ledger_url, "--no-party-logs"])
    assert off.exit_code == 0, off.output


def test_a_bundle_exported_before_the_party_sections_still_verifies(
    deployment: Deployment, tmp_path: Path
) -> None:
    key = SM2PrivateKey.generate()
    path = tmp_path / "bundle.json"
    _export(deployment, path, key=key)
    lines = path.read_bytes().splitlines(keepends=True)
    kept, skipping = [], False
    for line in lines:
        if any(line.startswith(f'"{name}":['.encode()) for name in PARTY_SECTIONS):
            skipping = not line.endswith(b"[],\n")
            continue
        if skipping:
            skipping = line != b"],\n"
            continue
        kept.append(line)
    meta = canonical.decode(kept[1].removeprefix(b'"meta":').removesuffix(b",\n"))
    for name in PARTY_SECTIONS:
        del meta["counts"][name]
    del meta["federation"]["party_logs"]
    kept[1] = b'"meta":' + canonical.encode(meta) + b",\n"
    path.write_bytes(resign(b"".join(kept), key))
    report = verify_bundle(path, public_key=key.public_key)
    assert "party_logs" not in report.meta["counts"]
    kept[1] = b'"meta":' + canonical.encode({**meta, "counts": {**meta["counts"], "party_logs": 1}})
    kept[1] += b",\n"
    path.write_bytes(resign(b"".join(kept), key))
    with pytest.raises(BundleInvalid):  # a stated party section that is not there
        verify_bundle(path, public_key=key.public_key)


def test_a_shares_deployment_reads_the_helper_s_log_too(tmp_path: Path) -> None:
    shares = build_deployment(tmp_path / "run", mode="shares")
    sources = run_folder_sources(shares.run)
    assert [s.party for s in sources] == ["key_authority", "helper"]
    result = _export(shares, tmp_path / "report.html", fmt="html")
    assert result.meta["federation"]["party_logs"]["included"] == ["key_authority", "helper"]
    assert result.party_disagreements == ()
    assert "helper (own log)" in (tmp_path / "report.html").read_text()
    (shares.run / "helper" / "audit.db").unlink()  # the helper's log is expected in shares mode
    rows = _export(shares, tmp_path / "again.html", fmt="html").party_disagreements
    assert rows[0]["rule"] == "party log included" and "helper" in rows[0]["detail"]
    assert "no audit database at" in rows[0]["detail"]

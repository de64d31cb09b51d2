"""Export a signed bundle from a real ledger and verify it offline; figures match the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from compliance import NOT_RECORDED, Scope, export_report, parse_bound, verify_bundle
from compliance.errors import (
    BundleKeyMismatch,
    LedgerUnverified,
    NoSignedHead,
    ReportFormatUnknown,
    ReportParameterInvalid,
    SigningKeyRequired,
)
from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger, create_ledger_engine, upgrade
from tests.compliance.builder import ASSET, Built
from tests.compliance.conftest import Exporter


def sections(path: Path) -> dict[str, object]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_bundle_verifies_and_dp_filing_equals_the_ledger(
    export: Exporter, built: Built, report_key: SM2PrivateKey
) -> None:
    result = export("json")
    report = verify_bundle(
        result.path, public_key=report_key.public_key, log_public_key=built.log_key.public_key
    )
    assert report.warnings == []
    bundle = sections(result.path)
    ledger = PrivacyLedger.from_url(built.url, create=False)
    try:
        for row in bundle["dp_filing"]:
            status = ledger.budget_status(row["participant"], row["asset"])
            assert row["epsilon_spent"] == str(status.spent)
            assert row["epsilon_limit"] == "10"
            assert row["committed_events"] == 3
            assert row["secure_rng"] == "off"
            assert row["privacy_unit"] == NOT_RECORDED
            assert row["refusals"] == (1 if row["participant"] == "bank-b" else 0)
            series = next(
                s for s in bundle["epsilon_series"] if s["participant"] == row["participant"]
            )
            assert [e for _, e in series["points"]] == [str(eps) for _, eps in status.per_round]
    finally:
        ledger.engine.dispose()
    assert all(r["agree"] for r in bundle["cross_check"])
    assert report.meta["cited"]["complete"] is True
    assert report.cited_head_size == report.newest_head_size == report.entries


def test_bundle_sections_say_what_the_ledger_recorded(export: Exporter, built: Built) -> None:
    bundle = sections(export("json").path)
    egress = {(r["round"], r["participant"]): r for r in bundle["egress"]}
    assert {k: r["digest"] for k, r in egress.items()} == built.digests
    assert all(r["bytes"] > 0 and r["shape"] == [120, 10] for r in egress.values())
    outliers = {(r["round"], r["participant"]): r for r in bundle["outlier_decisions"]}
    assert {k: r["score"] for k, r in outliers.items()} == built.scores
    weights = {p: r["applied_weight"] for (_, p), r in outliers.items()}
    assert weights == {"hospital-a": NOT_RECORDED, "bank-b": "0.25"}
    openings = [r for r in bundle["decryptions"] if r["event"] != "access.denied"]
    assert len(openings) == 6 and all(r["contributors"] == 2 for r in openings)
    assert all(r["requester"] == NOT_RECORDED for r in openings)
    denied = [r for r in bundle["decryptions"] if r["event"] == "access.denied"]
    assert [r["party"] for r in denied] == ["key_authority"]
    assert [r["requester"] for r in denied] == [NOT_RECORDED]
    keys = {r["participant"]: r["key_fingerprint"] for r in bundle["participants"]}
    assert keys == {
        "hospital-a": built.participant_keys["hospital-a"].public_key.fingerprint(),
        "bank-b": NOT_RECORDED,
    }
    assert [r["event"] for r in bundle["refusals"]] == ["budget.refused"]
    assert len(bundle["uploads"]) == 6


def test_participant_report_holds_only_that_participant(
    export: Exporter, report_key: SM2PrivateKey
) -> None:
    result = export("json", scope=Scope(participant="bank-b"))
    report = verify_bundle(result.path, public_key=report_key.public_key)
    bundle = sections(result.path)
    assert report.meta["cited"]["complete"] is False and report.runs > 1
    for name in ("outlier_decisions", "egress", "uploads", "dp_filing", "participants"):
        assert {r["participant"] for r in bundle[name]} == {"bank-b"}, name
    assert all("bank-b" in r["participants"] for r in bundle["decryptions"])


def test_period_report_cites_a_complete_range_with_boundaries(export: Exporter) -> None:
    day = parse_bound("2026-01-20", name="--from", end=False)
    scope = Scope(start=day, end=parse_bound("2026-01-20", name="--to", end=True))
    result = export("json", scope=scope)
    report = verify_bundle(result.path)
    bundle = sections(result.path)
    assert {r["round"] for r in bundle["outlier_decisions"]} == {2}
    assert {r["round"] for r in bundle["egress"]} == {2}
    first, end = (report.meta["cited"]["range"][k] for k in ("first", "end"))
    cited = [e["index"] for e in bundle["entries"]]
    assert set(range(first - 1, end + 1)) <= set(cited)
    assert report.cited_head_size < report.newest_head_size  # a real consistency proof
    assert bundle["heads"]["consistency"]
    # the DP filing is as of the end of the period: two committed rounds, not three
    assert {r["committed_events"] for r in bundle["dp_filing"]} == {2}


def test_empty_period_still_proves_its_boundary(export: Exporter) -> None:
    scope = Scope(start=parse_bound("2027-01-01", name="--from", end=False))
    result = export("json", scope=scope)
    report = verify_bundle(result.path)
    assert report.meta["cited"]["range"]["first"] == report.meta["cited"]["range"]["end"]
    assert sections(result.path)["outlier_decisions"] == []


def test_tampered_ledger_is_never_reported_on(
    ledger_copy: Engine, report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    with ledger_copy.begin() as conn:
        conn.execute(
            text(
                "UPDATE audit_entries SET entry = CAST(replace(entry, 'keep', 'kept') AS BLOB) "
                "WHERE event = 'outlier.decision'"
            )
        )
    with pytest.raises(LedgerUnverified, match="does not verify"):
        export_report(
            ledger_copy,
            fmt="json",
            out=tmp_path / "b.json",
            signing_key=report_key,
            produced_by="x",
        )
    assert not (tmp_path / "b.json").exists()


def test_bad_options_are_refused_before_reading(engine: Engine, tmp_path: Path) -> None:
    out = tmp_path / "r"
    with pytest.raises(ReportFormatUnknown, match="registered: html, json, pdf"):
        export_report(engine, fmt="docx", out=out, produced_by="x")
    with pytest.raises(SigningKeyRequired):
        export_report(engine, fmt="json", out=out, produced_by="x")
    with pytest.raises(ReportParameterInvalid, match="max_rows"):
        export_report(engine, fmt="html", out=out, produced_by="x", max_rows=0)
    with pytest.raises(ReportParameterInvalid, match="--from"):
        parse_bound("20 Jan", name="--from", end=False)
    with pytest.raises(ReportParameterInvalid, match="time zone"):
        parse_bound("2026-01-20T10:00:00", name="--to", end=True)
    with pytest.raises(ReportParameterInvalid, match="period"):
        Scope(start="2026-01-21T00:00:00.000000Z", end="2026-01-20T00:00:00.000000Z")
    with pytest.raises(ReportParameterInvalid, match="participant"):
        Scope(participant="no spaces")


def test_a_log_without_signed_head_cannot_be_reported(
    tmp_path: Path, report_key: SM2PrivateKey
) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    upgrade(engine)
    try:
        with pytest.raises(NoSignedHead):
            export_report(
                engine,
                fmt="json",
                out=tmp_path / "b.json",
                signing_key=report_key,
                produced_by="x",
                log_public_key=report_key.public_key,
            )
    finally:
        engine.dispose()


def test_pinned_keys_must_match(export: Exporter, built: Built) -> None:
    path = export("json").path
    stranger = SM2PrivateKey.generate().public_key
    with pytest.raises(BundleKeyMismatch) as caught:
        verify_bundle(path, public_key=stranger)
    assert "pinned" in caught.value.failures[0].message
    with pytest.raises(BundleKeyMismatch):
        verify_bundle(path, log_public_key=stranger)
    verify_bundle(path, log_public_key=built.log_key.public_key)


@pytest.mark.postgres
def test_export_on_postgresql(tmp_path: Path, report_key: SM2PrivateKey) -> None:
    from tests.compliance.builder import build_ledger
    from tests.privacy_ledger.conftest import pg_schema

    with pg_schema("cmp_") as url:
        built = build_ledger(url, rounds=2)
        engine = create_ledger_engine(built.url)
        try:
            result = export_report(
                engine, fmt="json", out=tmp_path / "b.json", signing_key=report_key, produced_by="x"
            )
        finally:
            engine.dispose()
        report = verify_bundle(result.path, log_public_key=built.log_key.public_key)
        assert report.meta["counts"]["outlier_decisions"] == 4
        assert {r["asset"] for r in sections(result.path)["dp_filing"]} == {ASSET}

"""The compliance report (JSON, HTML, PDF) shows each empirical lower bound the ledger records.

Audits are recorded with the ledger's own writer into a copy of the session
ledger; the bundle must verify offline (the bound re-derived beside the epsilon
the cited entries give over its rounds), and a re-signed bundle that hides an
audit or lowers a bound is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from pypdf import PdfReader
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from compliance import export_report, verify_bundle
from compliance.errors import BundleInvalid
from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog, PrivacyLedger
from privacy_ledger.audit import canonical
from privacy_ledger.budget.empirical import EmpiricalAudit
from tests.compliance.builder import ASSET, PARTICIPANTS, Built
from tests.compliance.mutate import resign
from tests.empirical_helpers import record_audit

LABEL = "empirical lower bound (95%, 1000 canaries)"


@pytest.fixture
def audited(
    ledger_copy: Engine, built: Built
) -> Iterator[tuple[Engine, dict[str, EmpiricalAudit]]]:
    log = AuditLog(signer=built.log_key, origin="test.example/audit")
    ledger = PrivacyLedger.from_url(str(ledger_copy.url), audit=log)
    try:
        audits = {
            PARTICIPANTS[0]: record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r3")),
            PARTICIPANTS[1]: record_audit(ledger, PARTICIPANTS[1], ASSET, ("r1", "r2"), above=True),
        }
        with Session(ledger.engine) as session:
            log.checkpoint(session, force=True)
            session.commit()
    finally:
        ledger.engine.dispose()
    yield ledger_copy, audits


def _export(engine: Engine, fmt: str, out: Path, key: SM2PrivateKey | None, built: Built) -> Path:
    export_report(
        engine,
        fmt=fmt,
        out=out,
        signing_key=key,
        log_public_key=built.log_key.public_key,
        produced_by="officer@test",
    )
    return out


def _filing(path: Path) -> dict[str, dict[str, object]]:
    rows: dict[str, dict[str, object]] = {}
    lines = path.read_bytes().splitlines(keepends=True)
    start = lines.index(b'"dp_filing":[\n')
    for line in lines[start + 1 :]:
        if line.startswith(b"]"):
            break
        row = canonical.decode(line.rstrip(b",\n"))
        rows[str(row["participant"])] = row
    return rows


def test_bundle_carries_and_verifies_the_bounds(
    audited: tuple[Engine, dict[str, EmpiricalAudit]],
    built: Built,
    report_key: SM2PrivateKey,
    tmp_path: Path,
) -> None:
    engine, audits = audited
    out = _export(engine, "json", tmp_path / "bundle.json", report_key, built)
    report = verify_bundle(
        out, public_key=report_key.public_key, log_public_key=built.log_key.public_key
    )
    assert report.entries > 0
    filing = _filing(out)
    for pid, audit in audits.items():
        shown = filing[pid]["empirical_audit"]
        assert isinstance(shown, dict)
        assert shown["epsilon_lower_bound"] == str(audit.epsilon_lower_bound)
        assert shown["label"] == LABEL and shown["audits"] == 1
        assert Decimal(str(shown["epsilon_accounted"])) == audit.epsilon_accounted
    assert filing[PARTICIPANTS[0]]["empirical_audit"]["exceeds_accounted"] is False  # type: ignore[index]
    assert filing[PARTICIPANTS[1]]["empirical_audit"]["exceeds_accounted"] is True  # type: ignore[index]


@pytest.mark.parametrize("forgery", ["hide", "lower"])
def test_a_resigned_bundle_cannot_hide_or_lower_a_bound(
    audited: tuple[Engine, dict[str, EmpiricalAudit]],
    built: Built,
    report_key: SM2PrivateKey,
    tmp_path: Path,
    forgery: str,
) -> None:
    engine, audits = audited
    out = _export(engine, "json", tmp_path / "bundle.json", report_key, built)
    data = out.read_bytes()
    bound = str(audits[PARTICIPANTS[1]].epsilon_lower_bound).encode()
    lines = data.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(b'{"accountant"') and PARTICIPANTS[1].encode() in line:
            row = canonical.decode(line.rstrip(b",\n"))
            if forgery == "hide":
                row["empirical_audit"] = "not audited"
            else:
                row["empirical_audit"]["exceeds_accounted"] = False
                row["empirical_audit"]["epsilon_lower_bound"] = "0.001"
            tail = b",\n" if line.endswith(b",\n") else b"\n"
            lines[i] = canonical.encode(row) + tail
            assert bound in line
            break
    else:
        raise AssertionError("no filing row of the audited participant")
    forged = tmp_path / "forged.json"
    forged.write_bytes(resign(b"".join(lines), report_key))
    with pytest.raises(BundleInvalid) as raised:
        verify_bundle(
            forged, public_key=report_key.public_key, log_public_key=built.log_key.public_key
        )
    assert "dp_filing" in str(raised.value)


def test_html_and_pdf_show_the_bounds(
    audited: tuple[Engine, dict[str, EmpiricalAudit]], built: Built, tmp_path: Path
) -> None:
    engine, audits = audited
    html = _export(engine, "html", tmp_path / "report.html", None, built).read_text()
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    reader = PdfReader(_export(engine, "pdf", tmp_path / "report.pdf", None, built))
    pdf = re.sub(r"\s+", " ", " ".join(p.extract_text() for p in reader.pages))
    for text in (page, pdf):
        assert "empirical privacy audits" in text
        for audit in audits.values():
            assert str(audit.epsilon_lower_bound) in text
        assert "EXCEEDS the accounted epsilon" in text
        assert "within the accounted epsilon" in text
    assert f"{audits[PARTICIPANTS[0]].epsilon_lower_bound} ({LABEL})" in page


def test_an_unaudited_ledger_says_not_audited(export: object) -> None:
    result = export("html")  # type: ignore[operator]
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", result.path.read_text()))
    section = page.split("empirical privacy audits")[1]
    assert section.count("not audited") == len(PARTICIPANTS)


def test_a_bundle_from_before_audits_were_reported_still_verifies(
    export: object, built: Built, report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    out = export("json").path  # type: ignore[operator]
    data = out.read_bytes()
    assert data.count(b',"empirical_audit":"not audited"') == len(PARTICIPANTS)
    older = tmp_path / "older.json"
    older.write_bytes(resign(data.replace(b',"empirical_audit":"not audited"', b""), report_key))
    verify_bundle(older, public_key=report_key.public_key, log_public_key=built.log_key.public_key)


def test_a_participant_report_cites_and_verifies_its_audit(
    audited: tuple[Engine, dict[str, EmpiricalAudit]],
    built: Built,
    report_key: SM2PrivateKey,
    tmp_path: Path,
) -> None:
    from compliance import Scope

    engine, audits = audited
    out = tmp_path / "one.json"
    export_report(
        engine,
        fmt="json",
        out=out,
        scope=Scope(participant=PARTICIPANTS[1]),
        signing_key=report_key,
        log_public_key=built.log_key.public_key,
        produced_by="officer@test",
    )
    verify_bundle(out, public_key=report_key.public_key, log_public_key=built.log_key.public_key)
    filing = _filing(out)
    assert list(filing) == [PARTICIPANTS[1]]
    shown = filing[PARTICIPANTS[1]]["empirical_audit"]
    assert isinstance(shown, dict) and shown["exceeds_accounted"] is True
    assert shown["epsilon_lower_bound"] == str(audits[PARTICIPANTS[1]].epsilon_lower_bound)

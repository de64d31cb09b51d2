"""HTML and PDF reports: key figures equal the ledger, pages fit A4, images are present."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pypdf import PdfReader
from sqlalchemy import Engine

from compliance import NOT_RECORDED, Scope, export_report
from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger
from tests.compliance.builder import ASSET, PARTICIPANTS, Built
from tests.compliance.chromium import A4_WIDTH_PX, render
from tests.compliance.conftest import Exporter

A4_POINTS = (595.27, 841.89)


def _spent(built: Built) -> dict[str, str]:
    ledger = PrivacyLedger.from_url(built.url, create=False)
    try:
        return {p: str(ledger.budget_status(p, ASSET).spent) for p in PARTICIPANTS}
    finally:
        ledger.engine.dispose()


def _pdf_text(path: Path) -> tuple[PdfReader, str]:
    reader = PdfReader(path)
    text = "\n".join(page.extract_text() for page in reader.pages)
    return reader, re.sub(r"\s+", " ", text)


def test_pdf_states_the_ledger_figures_on_a4(export: Exporter, built: Built) -> None:
    reader, text = _pdf_text(export("pdf").path)
    for page in reader.pages:
        assert (float(page.mediabox.width), float(page.mediabox.height)) == pytest.approx(
            A4_POINTS, abs=0.5
        )
    for participant, spent in _spent(built).items():
        assert participant in text
        assert spent in text, f"epsilon spent {spent} of {participant} missing"
    for (r, p), digest in built.digests.items():
        assert digest[:16] in text, f"digest of {p} round {r}"
    for score in built.scores.values():
        assert score in text
    assert NOT_RECORDED in text and "Chain verification" in text
    assert "verified" in text
    images = [img for page in reader.pages for img in page.images]
    assert len(images) == 1 and images[0].image.width > 500  # the epsilon chart


def test_pdf_cut_tables_say_so(export: Exporter) -> None:
    _, text = _pdf_text(export("pdf", max_rows=2).path)
    assert "Showing the first 2 of 6 rows" in text


def test_html_fits_a4_width_and_shows_its_chart(
    export: Exporter, built: Built, tmp_path: Path
) -> None:
    html = export("html").path
    page = html.read_text(encoding="utf-8")
    for participant, spent in _spent(built).items():
        assert spent in page and participant in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    shot = tmp_path / "report.png"
    measured = render(html, shot)
    assert shot.stat().st_size > 20_000
    assert measured["innerWidth"] == A4_WIDTH_PX
    assert measured["scrollWidth"] <= measured["innerWidth"], measured
    assert measured["tables"] and max(measured["tables"]) <= measured["innerWidth"], measured
    assert measured["images"] and all(
        i["complete"] and i["width"] > 500 for i in measured["images"]
    ), measured["images"]


def test_html_of_a_participant_in_a_narrow_window_does_not_overflow(
    export: Exporter, tmp_path: Path
) -> None:
    html = export("html", scope=Scope(participant="hospital-a")).path
    measured = render(html, tmp_path / "narrow.png", width=640)
    assert measured["scrollWidth"] <= measured["innerWidth"], measured
    assert "bank-b" not in html.read_text(encoding="utf-8").split("Decryption and opening")[0]


def test_unsigned_report_says_so_in_whole_words(
    engine: Engine, built: Built, tmp_path: Path
) -> None:
    """Only hex strings are cut into groups of 16 to wrap; the unsigned note is words."""
    for fmt in ("html", "pdf"):
        out = tmp_path / f"unsigned.{fmt}"
        export_report(
            engine,
            fmt=fmt,
            out=out,
            signing_key=None,
            log_public_key=built.log_key.public_key,
            produced_by="officer@test",
        )
        text = _pdf_text(out)[1] if fmt == "pdf" else re.sub(r"\s+", " ", out.read_text())
        assert "none (this document is not signed)" in text, fmt
        assert "docum ent" not in text


def test_signed_report_groups_its_key_fingerprint(
    export: Exporter, report_key: SM2PrivateKey
) -> None:
    fingerprint = report_key.public_key.fingerprint()
    html = export("html").path.read_text()
    assert " ".join(fingerprint[i : i + 16] for i in range(0, len(fingerprint), 16)) in html

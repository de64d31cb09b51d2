"""The console end to end in headless Chromium against a real ``secure-fed api`` process.

An officer logs in through the form, reads a budget, and exports a PDF (the
downloaded file is checked); every page is rendered at 375 and 1280 CSS px
and must not scroll sideways (measured in the page and by the DevTools
protocol's layout metrics, and by the width of a full-page screenshot);
axe-core (npm, installed by ``scripts/ensure-axe``) is injected into every
page and must report no violation of serious or critical impact; the
keyboard reaches the skip link, the form and the navigation with a visible
focus. Screenshots go to ``$SECURE_FED_CONSOLE_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.rest.console.render import rounded
from tests.api.rest.console.live import Live, live_service
from tests.api.rest.console.pages import PAGES
from tests.api.rest.console.webdriver import Browser
from tests.api.rest.helpers import ASSET, PARTICIPANTS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
WIDTHS = (375, 1280)
ALL_PAGES = ("/console/login", *PAGES)


@pytest.fixture(scope="module")
def axe_source() -> str:
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-axe")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"scripts/ensure-axe failed: {done.stderr[-1000:]}")
        pytest.skip(f"axe-core unavailable (scripts/ensure-axe): {done.stderr[-300:]}")
    return Path(done.stdout.strip().splitlines()[-1]).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def live_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("console-live")
    with live_service(f"sqlite:///{folder / 'ledger.db'}", folder) as live:
        yield live


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def any_live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    if request.param == "sqlite":
        yield request.getfixturevalue("live_sqlite")
        return
    folder = tmp_path_factory.mktemp("console-live-pg")
    with live_service(request.getfixturevalue("pg_module_url"), folder) as live:
        yield live


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads: Path) -> Iterator[Browser]:
    chrome = Browser(downloads=downloads)
    try:
        yield chrome
    finally:
        chrome.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("SECURE_FED_CONSOLE_SCREENSHOTS")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("screenshots")


def log_in(browser: Browser, live: Live) -> None:
    browser.go(f"{live.base}/console/login")
    browser.clear_cookies()
    browser.go(f"{live.base}/console/budgets")
    assert browser.url == f"{live.base}/console/login"  # no cookie for this server yet
    browser.type("#token", live.officer)
    browser.click("form.login button[type=submit]")
    home = f"{live.base}/console/"
    assert browser.wait_url(home) == home


def _downloaded(folder: Path, name: str, seconds: float = 60.0) -> bytes:
    deadline = time.monotonic() + seconds
    target = folder / name
    while time.monotonic() < deadline:
        if target.is_file() and not list(folder.glob("*.crdownload")):
            return target.read_bytes()
        time.sleep(0.2)
    raise AssertionError(f"{name} was not downloaded; folder holds {sorted(folder.iterdir())}")


def test_officer_logs_in_reads_a_budget_and_exports_a_pdf(
    any_live: Live, browser: Browser, downloads: Path
) -> None:
    log_in(browser, any_live)
    browser.go(f"{any_live.base}/console/budgets")
    # people read the number rounded; the exact recorded value stays in <data value>
    exact = browser.run(
        "return Array.from(document.querySelectorAll('td.remaining data'), e => e.value)"
    )
    shown = browser.run(
        "return Array.from(document.querySelectorAll('td.remaining'), e => e.textContent.trim())"
    )
    ledger = any_live.ctx.ledger
    remaining = [ledger.budget_status(p, ASSET).remaining for p in PARTICIPANTS]
    assert exact == [str(r) for r in remaining]
    assert shown == [rounded(r) for r in remaining] and shown != exact
    header = browser.run(
        "return getComputedStyle(document.querySelector('.site-header')).backgroundColor"
    )
    assert header == "rgb(17, 24, 39)"  # the stylesheet loaded under the CSP
    for old in downloads.iterdir():
        old.unlink()
    browser.go(f"{any_live.base}/console/")
    browser.click("a.button[href='/v1/reports/export?format=pdf']")
    pdf = _downloaded(downloads, "secure-fed-report.pdf")
    assert pdf.startswith(b"%PDF-") and b"%%EOF" in pdf[-1024:]
    from pypdf import PdfReader

    text = PdfReader(downloads / "secure-fed-report.pdf").pages[0].extract_text()
    assert text.strip()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_pages_do_not_overflow_narrow_or_wide_screens(
    live_sqlite: Live, browser: Browser, shots: Path
) -> None:
    log_in(browser, live_sqlite)
    browser.console_log()
    for width in WIDTHS:
        browser.viewport(width, 800)
        for path in ALL_PAGES:
            browser.go(f"{live_sqlite.base}{path}")
            measured = browser.run(
                "return [document.documentElement.scrollWidth, window.innerWidth]"
            )
            assert measured[0] <= measured[1] == width, (path, width, measured)
            metrics = browser.cdp("Page.getLayoutMetrics")
            assert metrics["cssContentSize"]["width"] <= width, (path, width)
            name = path.strip("/").replace("/", "-") or "console"
            png = browser.screenshot(shots / f"console-{width}-{name}.png")
            assert _png_size(png)[0] == width, (path, width)
    problems = [m for m in browser.console_log() if "Content Security Policy" in m]
    assert problems == []


_AXE_RUN = """
var done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']}).then(function (r) {
  done(r.violations.map(function (v) {
    return {id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(function (n) {
      return n.target.join(' '); })};
  }));
}).catch(function (e) { done([{id: 'axe-error', impact: 'critical', nodes: [String(e)]}]); });
"""


def test_axe_finds_no_serious_or_critical_violation(
    live_sqlite: Live, browser: Browser, axe_source: str
) -> None:
    log_in(browser, live_sqlite)
    for width in WIDTHS:
        browser.viewport(width, 800)
        for path in (*ALL_PAGES, "/console/login?failed=1"):
            browser.go(f"{live_sqlite.base}{path}")
            browser.run(axe_source + "\nreturn typeof axe;")
            violations = browser.run_async(_AXE_RUN)
            serious = [v for v in violations if v["impact"] in ("serious", "critical")]
            assert serious == [], (path, width, serious)


def _active(browser: Browser) -> dict[str, str]:
    result: dict[str, str] = browser.run(
        "var a = document.activeElement, s = getComputedStyle(a);"
        "return {tag: a.tagName, id: a.id, cls: a.className, text: a.textContent.trim(),"
        " outline: s.outlineStyle + ' ' + s.outlineWidth, href: a.getAttribute('href') || ''};"
    )
    return result


def test_keyboard_alone_logs_in_and_navigates(live_sqlite: Live, browser: Browser) -> None:
    browser.viewport(1280, 800)
    browser.go(f"{live_sqlite.base}/console/login")
    browser.keys("tab")
    first = _active(browser)
    assert first["cls"] == "skip-link" and first["outline"] == "solid 3px"
    browser.keys("tab", "tab")
    assert _active(browser)["id"] == "token"
    browser.type("#token", live_sqlite.officer)
    browser.keys("enter")
    home = f"{live_sqlite.base}/console/"
    assert browser.wait_url(home) == home
    browser.keys("tab", "enter")
    assert browser.url.endswith("#main") and _active(browser)["id"] == "main"
    browser.go(f"{live_sqlite.base}/console/")
    seen = []
    for _ in range(12):
        browser.keys("tab")
        seen.append(_active(browser))
    assert all(s["outline"] != "none 0px" for s in seen), seen
    budgets = next(s for s in seen if s["href"] == "/console/budgets")
    assert budgets["text"] == "Budgets"

"""Render an HTML file in headless Chromium: a screenshot and layout measurements.

The page is copied with a small script appended that, once the page has
loaded, writes its measurements (document and viewport widths, the right
edge of every table, whether every image decoded) into the DOM as JSON;
``--dump-dom`` prints the DOM after the load, and a second run takes a
screenshot. The report itself carries no script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: A4 width at 96 CSS pixels per inch.
A4_WIDTH_PX = 794
_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=5000",
]
_PROBE = """
<pre id="layout-probe"></pre>
<script>
window.addEventListener("load", function () {
  var doc = document.documentElement;
  var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (t) {
    return Math.ceil(t.getBoundingClientRect().right);
  });
  var images = Array.prototype.map.call(document.images, function (i) {
    return {src: i.src.slice(0, 30), complete: i.complete, width: i.naturalWidth};
  });
  document.getElementById("layout-probe").textContent = "PROBE" + JSON.stringify({
    scrollWidth: doc.scrollWidth, innerWidth: window.innerWidth, tables: tables,
    images: images}) + "END";
});
</script>
"""


def chromium() -> str:
    """Return the Chromium binary; skip outside CI when it is missing, fail in CI."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (scripts/ensure-chromium installs it)")
    pytest.skip("chromium is not installed; run scripts/ensure-chromium")


def _run(args: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run(
            [chromium(), *_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def render(html: Path, screenshot: Path, *, width: int = A4_WIDTH_PX) -> dict[str, Any]:
    """Screenshot ``html`` and return the layout measurements of the probe."""
    probed = html.with_name(html.stem + ".probe.html")
    probed.write_text(
        html.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8"
    )
    window = f"--window-size={width},1123"
    dom = _run([window, "--dump-dom", probed.as_uri()])
    found = re.search(r"PROBE(.*?)END", dom, flags=re.S)
    assert found, "the layout probe did not run"
    _run([window, f"--screenshot={screenshot}", html.as_uri()])
    measured: dict[str, Any] = json.loads(found.group(1).replace("&quot;", '"'))
    return measured

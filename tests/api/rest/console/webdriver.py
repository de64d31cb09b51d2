"""A small W3C WebDriver client for Debian's ``chromedriver`` driving headless Chromium.

No Selenium: the WebDriver protocol is JSON over HTTP (W3C WebDriver,
https://www.w3.org/TR/webdriver2/), spoken here with ``httpx`` (already a
test dependency). ``chromedriver`` also forwards Chrome DevTools Protocol
commands (``goog/cdp/execute``), used for exact viewport sizes, downloads
and layout metrics. Chromium itself is found as the compliance report's
browser tests find it (:func:`tests.compliance.chromium.chromium`).
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.compliance.chromium import chromium

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
_KEYS = {"tab": "\ue004", "enter": "\ue007", "shift": "\ue008"}


def chromedriver() -> str:
    """Return the chromedriver binary; skip outside CI when it is missing, fail in CI."""
    found = shutil.which("chromedriver")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromedriver is not installed (scripts/ensure-chromium installs it)")
    pytest.skip("chromedriver is not installed; run scripts/ensure-chromium")


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, *, seconds: float = 30.0) -> None:
    """Wait until ``url`` answers at all (any status)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=2.0)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class WebDriverError(AssertionError):
    """A WebDriver command failed."""


class Browser:
    """One chromedriver process and one headless Chromium session.

    Parameters
    ----------
    downloads
        Folder where the browser saves downloaded files.
    """

    def __init__(self, *, downloads: Path) -> None:
        binary = chromium()
        port = free_port()
        self._profile = tempfile.mkdtemp(prefix="chromium-console-")
        self._driver = subprocess.Popen(
            [chromedriver(), f"--port={port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0)
        options = {
            "binary": binary,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=1280,900",
                f"--user-data-dir={self._profile}",
            ],
            "prefs": {
                "download.default_directory": str(downloads),
                "download.prompt_for_download": False,
                "plugins.always_open_pdf_externally": True,
            },
        }
        caps = {
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL"},
        }
        self.session = ""
        try:
            wait_http(f"http://127.0.0.1:{port}/status")
            created = self._post("/session", {"capabilities": {"alwaysMatch": caps}})
            self.session = f"/session/{created['sessionId']}"
            self.cdp("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        except BaseException:
            self.close()
            raise

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        answer = self._http.post(path, json=body)
        value = answer.json().get("value")
        if answer.status_code != 200:
            raise WebDriverError(f"{path}: {answer.status_code} {value}")
        return value

    def _get(self, path: str) -> Any:
        answer = self._http.get(path)
        if answer.status_code != 200:
            raise WebDriverError(f"{path}: {answer.status_code} {answer.text[:500]}")
        return answer.json()["value"]

    def cdp(self, command: str, **params: Any) -> Any:
        """Run a Chrome DevTools Protocol command and return its result."""
        return self._post(f"{self.session}/goog/cdp/execute", {"cmd": command, "params": params})

    def go(self, url: str) -> None:
        """Navigate and wait for the page to load."""
        self._post(f"{self.session}/url", {"url": url})

    def clear_cookies(self) -> None:
        """Delete every cookie of the current page's origin."""
        self._http.delete(f"{self.session}/cookie")

    @property
    def url(self) -> str:
        """The current page's URL."""
        return str(self._get(f"{self.session}/url"))

    def wait_url(self, url: str, *, seconds: float = 15.0) -> str:
        """Wait until the current URL is ``url`` (after a key press submits a form)."""
        deadline = time.monotonic() + seconds
        while (current := self.url) != url and time.monotonic() < deadline:
            time.sleep(0.05)
        return current

    def find(self, css: str) -> str:
        """Return the id of the first element matching ``css``."""
        found = self._post(f"{self.session}/element", {"using": "css selector", "value": css})
        return str(found[ELEMENT])

    def type(self, css: str, text: str) -> None:
        """Type ``text`` into the element matching ``css``."""
        self._post(f"{self.session}/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        """Click the element matching ``css``."""
        self._post(f"{self.session}/element/{self.find(css)}/click", {})

    def keys(self, *names: str) -> None:
        """Press and release keys one after the other (``tab``, ``enter``)."""
        actions = []
        for name in names:
            code = _KEYS[name]
            actions += [{"type": "keyDown", "value": code}, {"type": "keyUp", "value": code}]
        self._post(
            f"{self.session}/actions",
            {"actions": [{"type": "key", "id": "keyboard", "actions": actions}]},
        )

    def run(self, script: str, *args: Any) -> Any:
        """Run a synchronous script (its ``return`` value comes back)."""
        return self._post(f"{self.session}/execute/sync", {"script": script, "args": list(args)})

    def run_async(self, script: str, *args: Any) -> Any:
        """Run an asynchronous script (it calls ``arguments[arguments.length - 1]``)."""
        return self._post(f"{self.session}/execute/async", {"script": script, "args": list(args)})

    def viewport(self, width: int, height: int) -> None:
        """Emulate a viewport of exactly ``width`` x ``height`` CSS pixels."""
        self.cdp(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )

    def screenshot(self, path: Path) -> bytes:
        """Save a PNG of the whole page (beyond the viewport) and return its bytes."""
        shot = self.cdp("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        data = base64.b64decode(shot["data"])
        path.write_bytes(data)
        return data

    def console_log(self) -> list[str]:
        """Return (and clear) the browser console's messages (CSP violations land there)."""
        entries = self._post(f"{self.session}/se/log", {"type": "browser"})
        return [str(e.get("message", "")) for e in entries]

    def close(self) -> None:
        """End the session and the driver."""
        if self.session:
            try:
                self._http.delete(self.session)
            except httpx.HTTPError:
                pass
        self._http.close()
        self._driver.terminate()
        try:
            self._driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._driver.kill()
        shutil.rmtree(self._profile, ignore_errors=True)

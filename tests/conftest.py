"""Suite-wide pytest hooks.

Memory profile (opt-in): with ``SECURE_FED_MEMPROFILE=<file>`` every test
appends one tab-separated line to ``<file>``: node id, resident set size after
the test (setup, call and teardown) in MiB, the process peak so far (Linux
``VmHWM``) in MiB, and how much that peak rose during the test. Sorting by the
last column names the tests that set the suite's peak; the second column shows
what stays resident between tests (fixtures kept alive, caches, leaks).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

_PROFILE = os.environ.get("SECURE_FED_MEMPROFILE")


def _memory_kib() -> tuple[int, int]:
    """Return (current RSS, peak RSS) of this process in KiB (0, 0 off Linux)."""
    values = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in values:
                    values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values["VmRSS"], values["VmHWM"]


if _PROFILE is not None:
    _OUT = Path(_PROFILE)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
        """Record RSS and the peak rise of each test (setup + call + teardown)."""
        _, before = _memory_kib()
        yield
        rss, peak = _memory_kib()
        with _OUT.open("a", encoding="utf-8") as out:
            out.write(f"{item.nodeid}\t{rss // 1024}\t{peak // 1024}\t{(peak - before) // 1024}\n")

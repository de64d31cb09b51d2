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


_FRESH_CLONE = "tests/e2e/test_fresh_clone.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """When the fresh-clone test runs, its two suite files run there, not twice.

    The fresh-clone test runs the REST fuzz test and the central-DP test with
    the fresh environment's Python in the clone; running them again here would
    only add their minutes to the suite. Without it (``-m "not slow"``, or the
    file deselected) they run here as usual.
    """
    if not any(item.nodeid.startswith(_FRESH_CLONE) for item in items):
        return
    from tests.e2e.test_fresh_clone import SUITE_TESTS as _IN_THE_CLONE

    moved = [item for item in items if item.nodeid.startswith(_IN_THE_CLONE)]
    if moved:
        items[:] = [item for item in items if not item.nodeid.startswith(_IN_THE_CLONE)]
        config.hook.pytest_deselected(items=moved)

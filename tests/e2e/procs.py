"""Process trees on Linux, read from ``/proc``: who descends from whom, who is still alive."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def descendants(root: int) -> set[int]:
    """Every living process below ``root`` (by parent id)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] != "Z":
            parents[int(entry)] = stat[1]
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def survivors(pids: set[int], timeout: float = 30.0) -> set[int]:
    """The processes of ``pids`` still alive after up to ``timeout`` seconds."""
    end = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = {p for p in left if alive(p)}
    return left


def wait_for_text(
    path: Path, text: str, *, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until ``text`` appears in the file ``path`` (fail early if ``proc`` ended)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ended before {text!r}:\n{path.read_text(errors='replace')}")
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s")

"""A minimal terminal screen for tests: what a reader sees after rich's cursor moves.

Interprets the bytes rich writes to a terminal (text, ``\\r``, ``\\n``, cursor up
``ESC[nA``, erase line ``ESC[2K``/``ESC[K``); other control sequences (colours,
cursor visibility) are dropped. Lines are returned without trailing blanks.
"""

from __future__ import annotations

import re

_CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")


def screen(stream: str) -> list[str]:
    """Return the lines left on screen after writing ``stream`` to an empty terminal."""
    lines: list[list[str]] = [[]]
    row = col = 0
    pos = 0
    while pos < len(stream):
        match = _CSI.match(stream, pos)
        if match:
            params, final = match.groups()
            if final == "A":
                row = max(0, row - int(params or 1))
            elif final == "K":
                if params in ("", "0"):
                    del lines[row][col:]
                else:
                    lines[row] = []
            pos = match.end()
            continue
        char = stream[pos]
        pos += 1
        if char == "\r":
            col = 0
        elif char == "\n":
            row, col = row + 1, 0
            while len(lines) <= row:
                lines.append([])
        elif char >= " ":
            line = lines[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = char
            else:
                line.append(char)
            col += 1
    return ["".join(line).rstrip() for line in lines]

"""What people read: the report's tables as text, shared by the HTML and PDF renderers.

Each table has a fixed set of columns with relative widths that fit the text
width of an A4 page; long hex values are broken into groups of 16 so they
wrap. Tables show at most ``max_rows`` rows and say so explicitly when they
are cut (the signed JSON bundle always has every row). Values are shown as
the ledger records them; long decimals are shortened to 6 significant
digits for reading, except epsilons, which are shown exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "CRYPTOGRAPHIC",
    "NOT_CRYPTOGRAPHIC",
    "RNG_NOTE",
    "SECURE_MODE_OFF",
    "ReportView",
    "Table",
    "fill",
    "hexgroups",
    "is_prior_release",
    "PRIOR_ROUND_SUFFIX",
    "round_label",
    "rng_cell",
    "sections_rows",
    "short",
    "text",
    "when",
]


@dataclass
class Table:
    """One table for people: title, columns, relative widths, rows of text."""

    key: str
    title: str
    columns: list[str]
    widths: list[float]
    rows: list[list[str]] = field(default_factory=list)
    total: int = 0
    intro: str = ""

    @property
    def note(self) -> str:
        """Say when rows were left out (never silently)."""
        if self.total > len(self.rows):
            return (
                f"Showing the first {len(self.rows)} of {self.total} rows; the signed JSON "
                "bundle lists all of them."
            )
        return "" if self.rows else "No rows recorded in this period."


@dataclass
class ReportView:
    """Title, key facts, the epsilon chart (PNG) and the tables."""

    title: str
    facts: list[tuple[str, str]]
    tables: list[Table]
    chart_png: bytes | None
    verify_commands: list[str]


def text(value: object) -> str:
    """Render one recorded value as text (lists joined, None as a dash)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return (
            " x ".join(text(v) for v in value)
            if all(isinstance(v, int) for v in value)
            else ", ".join(text(v) for v in value)
        )
    if isinstance(value, dict):
        if set(value) == {"min", "max", "distinct"}:
            lo, hi = short(value["min"]), short(value["max"])
            return lo if lo == hi else f"{lo} to {hi} ({value['distinct']} values)"
        return "; ".join(f"{k}={text(v)}" for k, v in sorted(value.items()))
    return str(value)


def short(value: object, digits: int = 6) -> str:
    """Shorten a long decimal string to ``digits`` significant digits (else unchanged)."""
    raw = text(value) if not isinstance(value, str) else value
    try:
        number = Decimal(raw)
    except (InvalidOperation, ValueError):
        return raw
    if not number.is_finite() or len(raw.replace("-", "").replace(".", "")) <= digits + 1:
        return raw
    return f"{number:.{digits}g}"


#: What ``secure_rng: "false"`` means, and why: the words of the demo's reports too
#: (``secure_fed.report.noise``; a test keeps them equal).
NOT_CRYPTOGRAPHIC = "not cryptographic"
SECURE_MODE_OFF = "Opacus secure_mode off"
CRYPTOGRAPHIC = "cryptographic"
#: The note of every table with a noise RNG column.
RNG_NOTE = (
    f"noise RNG: the recorded secure_rng of the events; {NOT_CRYPTOGRAPHIC} means "
    f"{SECURE_MODE_OFF}: the noise came from a PyTorch generator, not from Opacus' "
    "cryptographic one."
)


#: Round-id suffix of a participant's label-prior release, a DP release made once before
#: its first training round (``r1-label-prior``; ``secure_fed.learning.logit_adjustment``).
PRIOR_ROUND_SUFFIX = "-label-prior"


def is_prior_release(round_id: object) -> bool:
    """Return whether a ledger round id is a label-prior release, not a training round."""
    return isinstance(round_id, str) and round_id.endswith(PRIOR_ROUND_SUFFIX)


def round_label(round_id: object) -> str:
    """Show a ledger round id: ``label-prior release (before round 1)`` for ``r1-label-prior``.

    The release is charged like a round and committed under its own id, so
    lists and counts of committed rounds include it; this says what it is.
    """
    if not is_prior_release(round_id):
        return text(round_id)
    base = str(round_id).removesuffix(PRIOR_ROUND_SUFFIX)
    number = base[1:] if base[:1] == "r" and base[1:].isdigit() else base
    return f"label-prior release (before round {number})"


def rng_cell(value: object) -> str:
    """Show a recorded ``secure_rng`` (or a budget's summary ``on``/``off``) in words.

    ``false``/``off``: the noise came from a generator that is not
    cryptographic; ``true``/``on``: from Opacus' cryptographic one; anything
    else (``not recorded``, ``mixed (...)``) as it is.
    """
    raw = text(value)
    if raw.lower() in ("false", "off"):
        return NOT_CRYPTOGRAPHIC
    if raw.lower() in ("true", "on"):
        return CRYPTOGRAPHIC
    return raw


def when(value: object) -> str:
    """Show an entry time to the second: ``2026-11-30 12:25:16Z``."""
    raw = str(value)
    if len(raw) >= 20 and raw[10] == "T" and raw.endswith("Z"):
        return f"{raw[:10]} {raw[11:19]}Z"
    return raw


_HEX = frozenset("0123456789abcdefABCDEF")


def hexgroups(value: object) -> str:
    """Split a long hex string into groups of 16 characters so it wraps.

    Anything else (``not recorded``, "none (this document is not signed)") is
    words, which wrap between themselves: it is returned unchanged.
    """
    raw = str(value)
    if len(raw) <= 16 or not set(raw) <= _HEX:
        return raw
    return " ".join(raw[i : i + 16] for i in range(0, len(raw), 16))


def fill(table: Table, rows: Iterable[list[str]], max_rows: int) -> Table:
    """Add up to ``max_rows`` rows to ``table``, counting all of them."""
    for row in rows:
        table.total += 1
        if len(table.rows) < max_rows:
            table.rows.append(row)
    return table


def sections_rows(spools: Any, *names: str) -> Iterator[dict[str, Any]]:
    """Yield the rows of several spooled sections in turn."""
    for name in names:
        yield from spools.rows(name)

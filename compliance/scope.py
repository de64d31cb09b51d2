"""What a report covers: one participant or the whole federation, over a period.

Audit entries carry their UTC append time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``;
strings of that fixed format sort like the instants they name, so the period
is kept as two such strings, half-open: ``start <= time < end``.

An entry is *about* a participant when its subject is ``participant:<id>``
(or ``participant:<id>/...``), or its public fields name the participant
(``participant_id``, ``participant`` or the list ``participant_ids``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from compliance.errors import ReportParameterInvalid

__all__ = ["Scope", "parse_bound", "timestamp", "NOT_RECORDED"]

#: What a report says where the ledger does not record a value (never a guess).
NOT_RECORDED = "not recorded"

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def timestamp(moment: datetime | float) -> str:
    """Return ``moment`` (aware datetime or epoch seconds) in the audit-entry time format."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(float(moment), tz=UTC)
    return moment.astimezone(UTC).strftime(_FORMAT)


def parse_bound(text: str, *, name: str, end: bool) -> str:
    """Parse a ``--from``/``--to`` value into an entry-time string.

    Parameters
    ----------
    text
        ``YYYY-MM-DD`` (a whole UTC day) or an ISO 8601 date-time with a time
        zone (``2026-11-30T12:00:00Z``).
    name
        Option name used in errors.
    end
        For a ``--to`` bound: a date means the *end* of that day (exclusive
        start of the next day); a date-time is used as given (exclusive).

    Raises
    ------
    ReportParameterInvalid
        Naming ``name`` when the value is not such a date or lacks a time zone.
    """
    value = text.strip() if isinstance(text, str) else ""
    try:
        if _DAY.match(value):
            day = date.fromisoformat(value) + timedelta(days=1 if end else 0)
            return timestamp(datetime(day.year, day.month, day.day, tzinfo=UTC))
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ReportParameterInvalid(
            f"{name}: {text!r} is not YYYY-MM-DD or an ISO date-time with a time zone"
        ) from None
    if moment.tzinfo is None:
        raise ReportParameterInvalid(f"{name}: {text!r} has no time zone (append Z for UTC)")
    return timestamp(moment)


def _names(fields: Mapping[str, Any], participant: str) -> bool:
    if participant in (fields.get("participant_id"), fields.get("participant")):
        return True
    ids = fields.get("participant_ids")
    return isinstance(ids, list) and participant in ids


@dataclass(frozen=True, kw_only=True)
class Scope:
    """A report's scope: optional participant, optional half-open period.

    Parameters
    ----------
    participant
        Report on this participant only (``None``: the whole federation).
    start, end
        Entry-time strings (see :func:`parse_bound`); ``None`` is unbounded.

    Raises
    ------
    ReportParameterInvalid
        When the participant id is malformed or ``start >= end``.
    """

    participant: str | None = None
    start: str | None = None
    end: str | None = None

    def __post_init__(self) -> None:
        if self.participant is not None and not (
            isinstance(self.participant, str) and _ID.match(self.participant)
        ):
            raise ReportParameterInvalid(
                f"participant: {self.participant!r} must be 1-128 of [A-Za-z0-9._:@-]"
            )
        for label, bound in (("start", self.start), ("end", self.end)):
            if bound is not None and not (isinstance(bound, str) and _TIME.match(bound)):
                raise ReportParameterInvalid(
                    f"{label}: {bound!r} is not an entry time (YYYY-MM-DDTHH:MM:SS.ffffffZ)"
                )
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise ReportParameterInvalid(f"period: start {self.start} is not before end {self.end}")

    def to_json(self) -> dict[str, str | None]:
        """Return the canonical-JSON form written into the bundle."""
        return {"participant": self.participant, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, value: object) -> Scope:
        """Rebuild a scope from :meth:`to_json` output (untrusted)."""
        if not isinstance(value, dict) or set(value) != {"participant", "start", "end"}:
            raise ReportParameterInvalid("scope: want exactly participant, start, end")
        return cls(participant=value["participant"], start=value["start"], end=value["end"])

    def in_period(self, time: str) -> bool:
        """Whether an entry time lies in ``[start, end)``."""
        return (self.start is None or time >= self.start) and (self.end is None or time < self.end)

    def before_end(self, time: str) -> bool:
        """Whether an entry time is before ``end`` (budget history counts up to the end)."""
        return self.end is None or time < self.end

    def about(self, subject: str, fields: Mapping[str, Any]) -> bool:
        """Whether an entry concerns the scope's participant (always true federation-wide)."""
        p = self.participant
        if p is None:
            return True
        if subject == f"participant:{p}" or subject.startswith(f"participant:{p}/"):
            return True
        return _names(fields, p)

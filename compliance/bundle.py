r"""The signed JSON bundle: its line layout, writer and streaming reader.

A bundle is one JSON object written one member (or one array element) per
line, so that it can be produced and checked in a single streaming pass and
taken apart with ``sed`` and ``base64`` for an OpenSSL-only check::

    {"bundle":"secure-fed/audit-bundle/v1",
    "meta":{...},
    "keys":{"log":"<base64 DER SPKI>","signer":"<base64 DER SPKI>","signer_distid":"..."},
    "heads":{"cited":{"body":"..","signature":".."},"consistency":[..],"newest":{..}},
    "participants":[
    {...row...},
    {...row...}
    ],
    "dp_filing":[],
    ...                                   (every section of SECTION_ORDER)
    "entries":[
    {"entry":"<base64 of the stored entry bytes>","index":0},
    {"entry":"...","index":1,"proof":["<base64 node>",...]}
    ],
    "signature":"<base64 DER SM2 signature>"}

Every value line is canonical JSON (:mod:`privacy_ledger.audit.canonical`:
sorted keys, no whitespace, no floats). The report signature is SM2-with-SM3
(ID ``1234567812345678``, DER) over every byte before the last line, that is
the output of ``sed '$d' bundle.json``.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from compliance.derive import SECTIONS
from compliance.errors import BundleFailure, BundleMalformed
from crypto.sm import DEFAULT_SM2_ID, SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.errors import CanonicalJSONInvalid

__all__ = [
    "BUNDLE_FORMAT",
    "PARTY_SECTIONS",
    "TABLE_SECTIONS",
    "SECTION_ORDER",
    "BundleItem",
    "write_bundle",
    "read_bundle",
    "b64",
    "unb64",
]

BUNDLE_FORMAT = "secure-fed/audit-bundle/v1"
#: Sections read from the other parties' own audit logs (each verified when exported,
#: :mod:`compliance.parties`): attested by the report signature only.
PARTY_SECTIONS = ("party_logs", "party_decryptions", "party_events", "party_cross_check")
#: Sections copied from ledger tables or party logs: attested by the report signature only.
TABLE_SECTIONS = ("participants", "uploads", "decryption_requests", "cross_check", *PARTY_SECTIONS)
#: Every section, in bundle order.
SECTION_ORDER = (
    "participants",
    *SECTIONS,
    "uploads",
    "decryption_requests",
    "cross_check",
    *PARTY_SECTIONS,
)

_FIRST = f'{{"bundle":"{BUNDLE_FORMAT}",\n'.encode()
_SIGNATURE = re.compile(rb'^"signature":"([A-Za-z0-9+/]+={0,2})"}\n?$')
_OPEN = re.compile(rb'^"([a-z_]+)":\[(\],)?\n$')
_MEMBER = re.compile(rb'^"([a-z_]+)":(\{.*\}),\n$')
_MAX_LINE = 1 << 20


def b64(data: bytes) -> str:
    """Return standard base64 text of ``data``."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: object, what: str) -> bytes:
    """Decode canonical standard base64, or raise :class:`BundleMalformed` naming ``what``."""
    try:
        data = base64.b64decode(str(text), validate=True) if isinstance(text, str) else None
    except ValueError:
        data = None
    if data is None or base64.b64encode(data).decode("ascii") != text:
        raise _malformed(f"{what}: not canonical base64")
    return data


def _malformed(message: str) -> BundleMalformed:
    return BundleMalformed([BundleFailure.of(BundleMalformed, message)])


def _array(handle: IO[bytes], name: str, rows: Iterable[object]) -> int:
    handle.write(f'"{name}":['.encode())
    count, pending = 0, None
    for row in rows:
        if pending is not None:
            handle.write(pending + b",")
        pending = b"\n" + canonical.encode(row)
        count += 1
    if pending is not None:
        handle.write(pending + b"\n")
    handle.write(b"],\n")
    return count


def write_bundle(
    path: Path,
    *,
    meta: dict[str, Any],
    sections: dict[str, Iterable[dict[str, Any]]],
    entries: Iterable[dict[str, Any]],
    heads: dict[str, Any],
    keys: dict[str, Any],
    signer: SM2PrivateKey,
) -> None:
    """Write and sign a bundle at ``path`` (atomically: temp file, then rename).

    ``sections`` must hold every name of :data:`SECTION_ORDER`; rows and
    entries are consumed lazily, so callers may stream them from disk.
    """
    partial = path.with_name(path.name + ".partial")
    try:
        with partial.open("wb") as handle:
            handle.write(_FIRST)
            handle.write(b'"meta":' + canonical.encode(meta) + b",\n")
            handle.write(b'"keys":' + canonical.encode(keys) + b",\n")
            handle.write(b'"heads":' + canonical.encode(heads) + b",\n")
            for name in SECTION_ORDER:
                _array(handle, name, sections[name])
            _array(handle, "entries", entries)
        signature = signer.sign_file(partial, distid=DEFAULT_SM2_ID)
        with partial.open("ab") as handle:
            handle.write(f'"signature":"{b64(signature)}"}}\n'.encode())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


@dataclass(frozen=True)
class BundleItem:
    """One parsed line; ``kind``: meta, keys, heads, row, entry or signature."""

    kind: str
    value: Any
    section: str = ""
    line: int = 0


def _value(raw: bytes, number: int) -> Any:
    try:
        return canonical.decode(raw)
    except CanonicalJSONInvalid as exc:
        raise _malformed(f"line {number}: not canonical JSON ({exc.message})") from None


class _Reader:
    """Streaming parser of the line layout; also copies the signed prefix to ``signed``."""

    def __init__(self, handle: IO[bytes], signed: IO[bytes]) -> None:
        self._handle, self._signed = handle, signed
        self.number = 0
        self._peeked: bytes | None = None

    def opens(self, name: str) -> bool:
        """Whether the next line opens the array ``name`` (the line is kept for later)."""
        if self._peeked is None:
            self._peeked = self._handle.readline(_MAX_LINE + 1)
        match = _OPEN.match(self._peeked)
        return match is not None and match.group(1).decode() == name

    def _next(self) -> bytes:
        if self._peeked is not None:
            line, self._peeked = self._peeked, None
        else:
            line = self._handle.readline(_MAX_LINE + 1)
        self.number += 1
        if len(line) > _MAX_LINE:
            raise _malformed(f"line {self.number}: longer than {_MAX_LINE} bytes")
        if not line:
            raise _malformed(f"line {self.number}: unexpected end of file")
        return line

    def take(self) -> bytes:
        line = self._next()
        if not _SIGNATURE.match(line):
            self._signed.write(line)
        return line

    def member(self, name: str) -> Any:
        line = self.take()
        match = _MEMBER.match(line)
        if match is None or match.group(1).decode() != name:
            raise _malformed(f"line {self.number}: expected the {name!r} member")
        return _value(match.group(2), self.number)

    def array(self, name: str) -> Iterator[tuple[Any, int]]:
        line = self.take()
        match = _OPEN.match(line)
        if match is None or match.group(1).decode() != name:
            raise _malformed(f"line {self.number}: expected the {name!r} array")
        if match.group(2):
            return
        while True:
            line = self.take()
            if line == b"],\n":
                return
            body = line.rstrip(b"\n")
            last = not body.endswith(b",")
            yield _value(body if last else body[:-1], self.number), self.number
            if last:
                if self.take() != b"],\n":
                    raise _malformed(f"line {self.number}: expected the end of {name!r}")
                return


def read_bundle(handle: IO[bytes], signed: IO[bytes]) -> Iterator[BundleItem]:
    """Parse a bundle line by line, writing the signed bytes to ``signed`` as it goes.

    Raises
    ------
    BundleMalformed
        At the first line that breaks the layout, naming it.
    """
    reader = _Reader(handle, signed)
    if reader.take() != _FIRST:
        raise _malformed(f"line 1: not a {BUNDLE_FORMAT} bundle")
    for name in ("meta", "keys", "heads"):
        yield BundleItem(name, reader.member(name), line=reader.number)
    for name in (*SECTION_ORDER, "entries"):
        if name in PARTY_SECTIONS and not reader.opens(name):
            continue  # a bundle exported before the party logs were reported on
        for value, number in reader.array(name):
            kind = "entry" if name == "entries" else "row"
            yield BundleItem(kind, value, section=name, line=number)
    last = reader.take()
    match = _SIGNATURE.match(last)
    if match is None or not last.endswith(b"\n"):
        raise _malformed(f"line {reader.number}: expected the final signature line")
    if handle.read(1):
        raise _malformed(f"line {reader.number + 1}: data after the signature line")
    yield BundleItem("signature", match.group(1).decode("ascii"), line=reader.number)

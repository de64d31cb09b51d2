"""Field-by-field mutations of a bundle file, optionally re-signed by the report key.

A bundle line holds one canonical JSON value (a member such as ``"meta":{...},``,
a section row or a cited entry). :func:`leaf_mutations` yields, for every leaf
of every value (and every leaf *inside* each cited entry's bytes), a copy of
the bundle with that one leaf changed, in the same layout. :func:`resign`
replaces the signature line with a valid signature over the new bytes, which
is what a dishonest producer holding the report key (but not the log key)
could do.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical

Path_ = tuple[object, ...]
_MEMBER = re.compile(rb'^("[a-z_]+":)(\{.*\})(,?\n)$')
_ROW = re.compile(rb"^(\{.*\})(,?\n)$")
_B64 = re.compile(r"^[A-Za-z0-9+/]{8,}={0,2}$")
_HEX = re.compile(r"^[0-9a-f]{16,}$")


def split(lines: list[bytes]) -> Iterator[tuple[int, bytes, Any, bytes, str]]:
    """Yield ``(line number, prefix, value, suffix, section)`` for every value line."""
    section = ""
    for number, line in enumerate(lines):
        member = _MEMBER.match(line)
        if member and not line.startswith(b'"signature"'):
            name = member.group(1)[1:-2].decode()
            yield number, member.group(1), canonical.decode(member.group(2)), member.group(3), name
            continue
        opening = re.match(rb'^"([a-z_]+)":\[', line)
        if opening:
            section = opening.group(1).decode()
            continue
        row = _ROW.match(line)
        if row:
            yield number, b"", canonical.decode(row.group(1)), row.group(2), section


def leaves(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Yield the path of every scalar leaf (and of every empty list or object)."""
    if isinstance(value, dict) and value:
        for key in sorted(value):
            yield from leaves(value[key], (*path, key))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from leaves(item, (*path, i))
    else:
        yield path


def changed(old: Any) -> Any:
    """Return a different value of a similar kind (base64 and hex stay well-formed)."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, int):
        return old + 1
    if old is None:
        return "x"
    if isinstance(old, str):
        if _HEX.match(old):
            return ("1" if old[0] == "0" else "0") + old[1:]
        if _B64.match(old) and len(old) % 4 == 0:
            raw = bytearray(base64.b64decode(old))
            raw[-1] ^= 0x01
            return base64.b64encode(bytes(raw)).decode()
        return old + "x"
    if isinstance(old, list):
        return [*old, 0]
    return {**old, "x": 0}


def _set(value: Any, path: Path_, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _set(value[head], rest, new)}
    copy = list(value)
    copy[head] = _set(copy[head], rest, new)  # type: ignore[index]
    return copy


def _get(value: Any, path: Path_) -> Any:
    for key in path:
        value = value[key]
    return value


def _variants(value: Any, section: str) -> Iterator[tuple[Path_, Any]]:
    for path in leaves(value):
        if section == "entries" and path == ("entry",):
            inner = canonical.decode(base64.b64decode(value["entry"]))
            for inner_path in leaves(inner):
                mutated = _set(inner, inner_path, changed(_get(inner, inner_path)))
                encoded = base64.b64encode(canonical.encode(mutated)).decode()
                yield ("entry", *inner_path), _set(value, ("entry",), encoded)
        yield path, _set(value, path, changed(_get(value, path)))


def leaf_mutations(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Yield ``(description, mutated bundle bytes)`` for every leaf of every value line."""
    lines = data.splitlines(keepends=True)
    for number, prefix, value, suffix, section in split(lines):
        for path, new in _variants(value, section):
            copy = list(lines)
            copy[number] = prefix + canonical.encode(new) + suffix
            where = "/".join(str(p) for p in path)
            label = section if prefix else f"{section}[line {number + 1}]"
            yield f"{label}:{where}", b"".join(copy)


def resign(data: bytes, key: SM2PrivateKey) -> bytes:
    """Replace the signature line by a valid signature of ``key`` over the new bytes."""
    body = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    signature = base64.b64encode(key.sign(body)).decode()
    return body + f'"signature":"{signature}"}}\n'.encode()

"""Every single-field change to a bundle is caught by ``verify_bundle``.

Two attackers. One edits a bundle and cannot sign: every change must fail the
report signature at least. The other holds the report key and re-signs after
editing (a dishonest report producer without the log key): every change to
something the signed audit log backs must still be caught by the log-level
checks (heads, proofs, hash chain, recomputed sections). What only the
report's own signature attests is listed in ``SIGNATURE_ONLY`` and in
docs/audit/evidence.md.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from compliance import BundleInvalid, Scope, parse_bound, verify_bundle
from compliance.bundle import TABLE_SECTIONS
from compliance.errors import BundleSignatureInvalid
from crypto.sm import SM2PrivateKey
from tests.compliance.builder import build_ledger
from tests.compliance.conftest import Exporter
from tests.compliance.mutate import leaf_mutations, resign

#: Bundle fields attested by the report signature alone (see docs/audit/evidence.md).
SIGNATURE_ONLY_META = (
    "meta:produced/at",
    "meta:produced/by",
    "meta:produced/tool",
    "meta:federation/",
    "meta:log/heads_checked",
    "meta:log/key_pinned",
    "meta:log/result",
)


def signature_only(description: str) -> bool:
    section = description.split("[", 1)[0].split(":", 1)[0]
    return section in TABLE_SECTIONS or description.startswith(SIGNATURE_ONLY_META)


def caught(path: Path, data: bytes, report_key: SM2PrivateKey, log_key: object) -> list[str]:
    path.write_bytes(data)
    try:
        verify_bundle(path, public_key=report_key.public_key, log_public_key=log_key)
    except BundleInvalid as exc:
        return exc.codes
    return []


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A one-round ledger: a federation-wide bundle of it has every kind of section."""
    folder = tmp_path_factory.mktemp("small")
    built = build_ledger(f"sqlite:///{folder / 'ledger.db'}", rounds=1)
    return folder, built


def _bundle(small: tuple[Path, object], report_key: SM2PrivateKey, scope: Scope) -> bytes:
    from compliance import export_report
    from privacy_ledger import create_ledger_engine

    folder, built = small
    engine = create_ledger_engine(built.url)  # type: ignore[attr-defined]
    try:
        out = folder / "bundle.json"
        export_report(
            engine,
            fmt="json",
            out=out,
            scope=scope,
            signing_key=report_key,
            produced_by="officer@test",
        )
        return out.read_bytes()
    finally:
        engine.dispose()


def _check_all(data: bytes, report_key: SM2PrivateKey, log_key: object, work: Path) -> None:
    missed, unsigned_missed, count = [], [], 0
    for description, mutated in leaf_mutations(data):
        count += 1
        if signature_only(description):
            codes = caught(work, mutated, report_key, log_key)
            if BundleSignatureInvalid.code not in codes:
                unsigned_missed.append(description)
        elif not caught(work, resign(mutated, report_key), report_key, log_key):
            missed.append(description)
    assert count > 100
    assert not unsigned_missed, f"edits not caught by the signature: {unsigned_missed}"
    assert not missed, f"re-signed edits of log-backed fields not caught: {missed}"


def test_every_field_of_a_federation_bundle(
    small: tuple[Path, object], report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    data = _bundle(small, report_key, Scope())
    assert caught(tmp_path / "b.json", data, report_key, None) == []
    _check_all(data, report_key, small[1].log_key.public_key, tmp_path / "b.json")  # type: ignore[attr-defined]


def test_every_field_of_a_participant_period_bundle(
    export: Exporter, built: object, report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    day = "2026-01-20"
    scope = Scope(
        participant="bank-b",
        start=parse_bound(day, name="--from", end=False),
        end=parse_bound(day, name="--to", end=True),
    )
    data = export("json", scope=scope).path.read_bytes()
    nodes = [d for d, _ in leaf_mutations(data) if ":proof/" in d or "heads:consistency/" in d]
    assert len(nodes) > 10 and any(d.startswith("heads:consistency/") for d in nodes)
    _check_all(data, report_key, built.log_key.public_key, tmp_path / "b.json")  # type: ignore[attr-defined]


def test_period_range_holes_and_boundaries_are_caught(
    export: Exporter, built: object, report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    day = "2026-01-20"
    scope = Scope(
        start=parse_bound(day, name="--from", end=False),
        end=parse_bound(day, name="--to", end=True),
    )
    lines = export("json", scope=scope).path.read_bytes().splitlines(keepends=True)
    entries = [i for i, line in enumerate(lines) if line.startswith(b'{"entry":')]
    assert len(entries) > 5
    log_key = built.log_key.public_key  # type: ignore[attr-defined]
    for position in (entries[0], entries[1], entries[len(entries) // 2], entries[-1]):
        dropped = b"".join(line for i, line in enumerate(lines) if i != position)
        codes = caught(
            tmp_path / "b.json", resign(_fix_last_comma(dropped), report_key), report_key, log_key
        )
        assert codes, f"dropping bundle line {position + 1} was not caught"


def _fix_last_comma(data: bytes) -> bytes:
    """Keep the layout valid after dropping the last entry line (so only semantics fail)."""
    return data.replace(b"},\n],\n", b"}\n],\n")


def test_every_byte_group_of_the_signature(
    export: Exporter, built: object, report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    data = export("json", scope=Scope(participant="hospital-a")).path.read_bytes()
    log_key = built.log_key.public_key  # type: ignore[attr-defined]
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[1]
    signature = bytearray(base64.b64decode(last.split(b'"')[3]))
    for i in range(0, len(signature), 7):
        flipped = bytearray(signature)
        flipped[i] ^= 0x40
        forged = data.replace(last, b'"signature":"' + base64.b64encode(bytes(flipped)) + b'"}')
        assert caught(tmp_path / "b.json", forged, report_key, log_key), f"signature byte {i}"
    stranger = resign(data, SM2PrivateKey.generate())
    assert caught(tmp_path / "b.json", stranger, report_key, log_key)


def test_layout_damage_is_caught(
    export: Exporter, report_key: SM2PrivateKey, tmp_path: Path
) -> None:
    data = export("json", scope=Scope(participant="bank-b")).path.read_bytes()
    lines = data.splitlines(keepends=True)
    damaged = {
        "truncated": data[: len(data) // 2],
        "line duplicated": b"".join(lines[:5] + [lines[4]] + lines[5:]),
        "lines swapped": b"".join(lines[:-3] + [lines[-2], lines[-3], lines[-1]]),
        "trailing data": data + b"{}\n",
        "no signature": b"".join(lines[:-1]),
        "pretty printed": data.replace(b'":', b'": '),
    }
    for what, bad in damaged.items():
        assert caught(tmp_path / "b.json", bad, report_key, None), what

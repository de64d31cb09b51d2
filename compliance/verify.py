"""Offline verification of a signed audit bundle: no database, one streaming pass.

:func:`verify_bundle` checks, and reports every failure it finds:

1. the layout (:mod:`compliance.bundle`) and canonical JSON of every line;
2. the keys: the log's and the report signer's public keys equal the pinned
   ones when given, and the fingerprints the report states;
3. the two signed tree heads (C2SP checkpoints, SM2 over SM3, ID
   ``1234567812345678``) under the log key, and the RFC 9162 consistency
   proof from the cited head to the newest head;
4. the cited entries (:mod:`compliance.verify_entries`): canonical bytes, the
   ``prev`` hash chain, one inclusion proof per run, and for a
   federation-wide report the completeness of the claimed index range;
5. the content: every log-backed section is derived again from the cited
   entries (:class:`compliance.derive.Deriver`, epsilon recomputed with the
   ledger's accountant, and each filing row's empirical lower bound beside the
   epsilon recomputed over its audited rounds) and must equal the bundle's
   section row for row;
6. the report's SM2 signature over every byte before the signature line.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compliance.bundle import PARTY_SECTIONS, SECTION_ORDER, read_bundle, unb64
from compliance.derive import SECTIONS, Deriver
from compliance.errors import (
    BundleContentMismatch,
    BundleFailure,
    BundleInvalid,
    BundleMalformed,
    BundleScopeViolated,
    BundleSignatureInvalid,
    ComplianceError,
)
from compliance.scope import Scope
from compliance.verify_entries import EntryChecks
from compliance.verify_heads import check_heads, check_keys
from crypto import CryptoError
from crypto.sm import SM2PublicKey, sm3_digest
from privacy_ledger.audit import canonical
from privacy_ledger.budget.empirical import NOT_AUDITED

__all__ = ["verify_bundle", "BundleReport"]

_ERRORS: dict[str, type[BundleInvalid]] = {cls.code: cls for cls in BundleInvalid.__subclasses__()}


@dataclass(frozen=True, kw_only=True)
class BundleReport:
    """What :func:`verify_bundle` checked.

    Attributes
    ----------
    meta
        The bundle's report metadata (scope, production, log verification).
    entries, runs
        Cited entries and runs of consecutive entries (one proof each).
    cited_head_size, newest_head_size
        Sizes of the two signed heads.
    log_key_fingerprint, signer_fingerprint
        SM3 fingerprints of the keys used.
    warnings
        Keys taken from the bundle itself instead of pinned ones.
    """

    meta: dict[str, Any]
    entries: int
    runs: int
    cited_head_size: int
    newest_head_size: int
    log_key_fingerprint: str
    signer_fingerprint: str
    warnings: list[str] = field(default_factory=list)


class _Sections:
    """Row digests per section: as the bundle states them and as derived from entries."""

    def __init__(self) -> None:
        self.stated: dict[str, list[tuple[bytes, object]]] = {n: [] for n in SECTION_ORDER}
        self.derived: dict[str, list[tuple[bytes, object]]] = {n: [] for n in SECTIONS}

    @staticmethod
    def _digest(row: dict[str, Any]) -> tuple[bytes, object]:
        if row.get("empirical_audit") == NOT_AUDITED:
            # a filing row exported before empirical audits were reported has no such
            # member; "not audited" and its absence say the same, anything else is compared
            row = {k: v for k, v in row.items() if k != "empirical_audit"}
        return sm3_digest(canonical.encode(row)), row.get("entry", row.get("participant"))

    def state(self, section: str, row: object, line: int) -> None:
        if not isinstance(row, dict):
            raise BundleMalformed(
                [BundleFailure.of(BundleMalformed, f"line {line}: a row must be an object")]
            )
        self.stated[section].append(self._digest(row))

    def derive(self, section: str, row: dict[str, Any]) -> None:
        self.derived[section].append(self._digest(row))

    def compare(self, counts: object, fail: Any) -> None:
        for name in SECTIONS:
            stated, derived = self.stated[name], self.derived[name]
            for i, (a, b) in enumerate(zip(stated, derived, strict=False)):
                if a[0] != b[0]:
                    fail(
                        BundleContentMismatch,
                        f"section {name}: row {i} (entry or participant "
                        f"{a[1]}) differs from what the cited entries record ({b[1]})",
                    )
                    break
            else:
                if len(stated) != len(derived):
                    fail(
                        BundleContentMismatch,
                        f"section {name}: {len(stated)} rows stated, "
                        f"the cited entries give {len(derived)}",
                    )
        # a bundle exported before the party logs were reported on has no party sections
        older = isinstance(counts, dict) and not set(PARTY_SECTIONS) & set(counts)
        actual = {
            n: len(self.stated[n])
            for n in SECTION_ORDER
            if not (older and n in PARTY_SECTIONS and not self.stated[n])
        }
        if counts != actual:
            fail(BundleContentMismatch, f"meta.counts {counts} differ from the rows {actual}")


def _get(meta: Any, *path: str) -> Any:
    value = meta
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise BundleMalformed(
                [BundleFailure.of(BundleMalformed, f"meta.{'.'.join(path)}: missing")]
            )
        value = value[key]
    return value


class _Run:
    """State of one verification pass."""

    def __init__(self, public_key: SM2PublicKey | None, log_key: SM2PublicKey | None) -> None:
        self.pinned_signer, self.pinned_log = public_key, log_key
        self.failures: list[BundleFailure] = []
        self.sections = _Sections()
        self.meta: dict[str, Any] = {}
        self.scope = Scope()
        self.keys: tuple[SM2PublicKey, SM2PublicKey, bytes] | None = None
        self.heads: tuple[int, bytes, int] | None = None
        self.entries: EntryChecks | None = None
        self.deriver: Deriver | None = None

    def fail(self, kind: type[BundleInvalid], message: str) -> None:
        self.failures.append(BundleFailure.of(kind, message))

    def on_meta(self, meta: Any) -> None:
        try:
            self.scope = Scope.from_json(_get(meta, "scope"))
        except ComplianceError as exc:
            raise BundleMalformed(
                [BundleFailure.of(BundleMalformed, f"meta.scope: {exc}")]
            ) from None
        self.meta = meta
        complete, cited_range = _get(meta, "cited", "complete"), _get(meta, "cited", "range")
        if complete is not (self.scope.participant is None):
            self.fail(
                BundleScopeViolated,
                "meta.cited.complete must be true exactly for a federation-wide report",
            )
        if complete and not (
            isinstance(cited_range, dict)
            and set(cited_range) == {"first", "end"}
            and all(isinstance(v, int) for v in cited_range.values())
            and 0 <= cited_range["first"] <= cited_range["end"]
        ):
            self.fail(
                BundleScopeViolated, "meta.cited.range must be {first, end} with 0 <= first <= end"
            )
        if not complete and cited_range is not None:
            self.fail(BundleScopeViolated, "meta.cited.range must be null for a participant report")
        self.deriver = Deriver(scope=self.scope, sink=self.sections.derive)

    def on_keys(self, keys: Any) -> None:
        self.keys = check_keys(keys, self.meta, self.pinned_signer, self.pinned_log, self.fail)

    def on_heads(self, heads: Any) -> None:
        log_key = None if self.keys is None else self.keys[1]
        self.heads = check_heads(heads, self.meta, log_key, self.fail)
        cited_range = _get(self.meta, "cited", "range")
        complete = _get(self.meta, "cited", "complete") is True and isinstance(cited_range, dict)
        if complete and self.heads is not None:
            size, _, newest = self.heads
            if cited_range.get("end") == size and size != newest:
                self.fail(
                    BundleScopeViolated,
                    f"range runs to the end of the cited head ({size}) "
                    f"but the newest head has {newest} entries",
                )
        self.entries = EntryChecks(
            head=None if self.heads is None else self.heads[:2],
            scope=self.scope,
            cited_range=cited_range if complete else None,
            fail=self.fail,
        )

    def on_entry(self, value: Any) -> None:
        assert self.entries is not None and self.deriver is not None
        parsed = self.entries.feed(value)
        if parsed is not None:
            self.deriver.feed(*parsed)

    def finish(self, signed: Path, signature: str) -> None:
        assert self.entries is not None and self.deriver is not None
        self.entries.finish()
        for name, rows in self.deriver.finish().items():
            for row in rows:
                self.sections.derive(name, row)
        self.sections.compare(_get(self.meta, "counts"), self.fail)
        cited = _get(self.meta, "cited")
        if cited.get("entries") != self.entries.count or cited.get("runs") != self.entries.runs:
            self.fail(
                BundleContentMismatch,
                f"meta.cited says {cited.get('entries')} entries in "
                f"{cited.get('runs')} runs; the bundle has {self.entries.count} in "
                f"{self.entries.runs}",
            )
        if self.keys is not None:
            signer, _, distid = self.keys
            try:
                signer.verify_file(signed, unb64(signature, "signature"), distid=distid)
            except CryptoError as exc:
                self.fail(BundleSignatureInvalid, f"report signature: {exc.message}")


def verify_bundle(
    path: Path,
    *,
    public_key: SM2PublicKey | None = None,
    log_public_key: SM2PublicKey | None = None,
) -> BundleReport:
    """Verify a bundle written by :func:`compliance.export_report` (see module docstring).

    Parameters
    ----------
    path
        The bundle file.
    public_key
        The report signer's SM2 public key, obtained out of band (recommended).
    log_public_key
        The audit log's SM2 public key, obtained out of band (recommended).

    Returns
    -------
    BundleReport
        What was checked, with warnings for keys that were not pinned.

    Raises
    ------
    BundleInvalid
        A subclass named after the first failed check; ``failures`` lists all.
    """
    run = _Run(public_key, log_public_key)
    with Path(path).open("rb") as handle, tempfile.NamedTemporaryFile() as signed:
        signature = ""
        for item in read_bundle(handle, signed):
            if item.kind == "meta":
                run.on_meta(item.value)
            elif item.kind == "keys":
                run.on_keys(item.value)
            elif item.kind == "heads":
                run.on_heads(item.value)
            elif item.kind == "row":
                run.sections.state(item.section, item.value, item.line)
            elif item.kind == "entry":
                run.on_entry(item.value)
            else:
                signature = item.value
        signed.flush()
        run.finish(Path(signed.name), signature)
    if run.failures:
        raise _ERRORS.get(run.failures[0].code, BundleInvalid)(run.failures)
    return _report(run, public_key, log_public_key)


def _report(
    run: _Run, public_key: SM2PublicKey | None, log_public_key: SM2PublicKey | None
) -> BundleReport:
    assert run.keys is not None and run.heads is not None and run.entries is not None
    warnings = []
    if public_key is None:
        warnings.append(
            "the report signer's key was taken from the bundle; pin it with --public-key"
        )
    if log_public_key is None:
        warnings.append(
            "the audit log's key was taken from the bundle; pin it with --log-public-key"
        )
    signer, log_key, _ = run.keys
    return BundleReport(
        meta=run.meta,
        entries=run.entries.count,
        runs=run.entries.runs,
        cited_head_size=run.heads[0],
        newest_head_size=run.heads[2],
        log_key_fingerprint=log_key.fingerprint(),
        signer_fingerprint=signer.fingerprint(),
        warnings=warnings,
    )

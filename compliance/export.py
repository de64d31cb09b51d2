"""Export an audit report: one entry point, one registry of renderers.

:func:`export_report` verifies the ledger's audit log, collects the report
(:mod:`compliance.collect`) and hands it to the renderer registered for the
requested format: ``json`` (the signed bundle, machine-verifiable offline
with :func:`compliance.verify.verify_bundle`), ``html`` and ``pdf`` (for
people). A later REST API serves the same function.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from compliance.bundle import SECTION_ORDER, b64, write_bundle
from compliance.collect import Collected, collect
from compliance.errors import ReportFormatUnknown, ReportParameterInvalid, SigningKeyRequired
from compliance.parties import PartySource, read_party_logs
from compliance.party_check import cross_check_parties, ledger_rounds
from compliance.scope import Scope, timestamp
from compliance.spool import Spools
from crypto.sm import DEFAULT_SM2_ID, SM2PrivateKey, SM2PublicKey

__all__ = ["export_report", "ExportResult", "RENDERERS", "ReportContext", "build_meta"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ReportContext:
    """What a renderer receives: the collected report, its metadata and options."""

    collected: Collected
    meta: dict[str, Any]
    out: Path
    signing_key: SM2PrivateKey | None
    max_rows: int


@dataclass(frozen=True, kw_only=True)
class ExportResult:
    """What :func:`export_report` wrote.

    Attributes
    ----------
    path
        The output file.
    fmt
        Its format (``json``, ``html`` or ``pdf``).
    meta
        The report metadata (scope, verification, cited head, section counts).
    disagreements
        The cross-check rows whose audit-log value differs from the ledger
        tables' (``agree`` false): a budget changed without its audit entry.
    party_disagreements
        The ``party_cross_check`` rows that disagree: a party log missing or
        not verifying, or a decryption one log records and another does not.
    """

    path: Path
    fmt: str
    meta: dict[str, Any] = field(default_factory=dict)
    disagreements: tuple[dict[str, Any], ...] = ()
    party_disagreements: tuple[dict[str, Any], ...] = ()


def _tool() -> str:
    try:
        return f"secure-fed {metadata.version('secure-fed')}"
    except metadata.PackageNotFoundError:
        return "secure-fed (version not installed)"


def build_meta(
    c: Collected, *, produced_by: str, produced_at: str, signer: SM2PublicKey | None
) -> dict[str, Any]:
    """Return the bundle's ``meta`` member for a collected report."""
    v = c.verification
    cited = {k: c.cited[k] for k in ("complete", "entries", "range", "runs")}
    return {
        "federation": {"log_origin": c.origin, **c.tables["federation"]},
        "scope": c.scope.to_json(),
        "produced": {
            "at": produced_at,
            "by": produced_by,
            "tool": _tool(),
            "signer_fingerprint": "none (this document is not signed)"
            if signer is None
            else signer.fingerprint(),
        },
        "log": {
            "origin": c.origin,
            "key_fingerprint": c.log_key.fingerprint(),
            "key_pinned": c.key_pinned,
            "size": v.tree_size,
            "root": v.root_hash.hex(),
            "heads_checked": v.heads_checked,
            "newest_head_size": c.newest_head.tree_size,
            "newest_head_root": c.newest_head.root_hash.hex(),
            "unsigned_entries": v.tree_size - c.newest_head.tree_size,
            "result": "verified",
        },
        "cited": {**cited, "head_size": c.cited_head.tree_size},
        "counts": {name: c.spools.count(name) for name in SECTION_ORDER},
    }


def _in_scope(row: dict[str, Any], scope: Scope) -> bool:
    if not scope.in_period(str(row["time"])):
        return False
    people = row.get("participants")
    return scope.participant is None or (isinstance(people, list) and scope.participant in people)


def add_party_logs(
    engine: Engine, spools: Spools, scope: Scope, sources: tuple[PartySource, ...], origin: str
) -> dict[str, Any]:
    """Read, verify and cross-check the party logs into their sections; return ``meta.parties``."""
    read = read_party_logs(sources, configured_from=origin)
    for log in read.logs:
        spools.add("party_logs", log.row())
    for row in read.decryptions:
        if _in_scope(row, scope):
            spools.add("party_decryptions", row)
    for row in read.events:
        if scope.participant is None and scope.in_period(str(row["time"])):
            spools.add("party_events", row)
    checks = cross_check_parties(read, ledger_rounds(engine)) if sources else []
    for row in checks:
        spools.add("party_cross_check", row)
    return {
        "configured_from": origin,
        "included": [log.party for log in read.logs if log.included],
        "not_included": {
            log.party: f"{log.status}: {log.reason}" for log in read.logs if not log.included
        },
        "disagreements": sum(1 for r in checks if r["agree"] is not True),
    }


def _write_json(ctx: ReportContext) -> None:
    if ctx.signing_key is None:
        raise SigningKeyRequired(
            "signing_key: the json bundle is signed; pass the report "
            "signing key (--signing-key PEM)"
        )
    c = ctx.collected
    heads = {
        "cited": {"body": b64(c.cited_head.body), "signature": b64(c.cited_head.signature)},
        "newest": {"body": b64(c.newest_head.body), "signature": b64(c.newest_head.signature)},
        "consistency": [b64(p) for p in c.consistency],
    }
    keys = {
        "log": b64(c.log_key.to_der()),
        "signer": b64(ctx.signing_key.public_key.to_der()),
        "signer_distid": DEFAULT_SM2_ID.decode("ascii"),
    }
    write_bundle(
        ctx.out,
        meta=ctx.meta,
        heads=heads,
        keys=keys,
        signer=ctx.signing_key,
        sections={name: c.spools.rows(name) for name in SECTION_ORDER},
        entries=c.entries(),
    )


def _write_html(ctx: ReportContext) -> None:
    from compliance.html import write_html

    write_html(ctx)


def _write_pdf(ctx: ReportContext) -> None:
    from compliance.pdf import write_pdf

    write_pdf(ctx)


#: Report renderers by format name (STYLE rule 3: errors list these names).
RENDERERS: dict[str, Callable[[ReportContext], None]] = {
    "json": _write_json,
    "html": _write_html,
    "pdf": _write_pdf,
}


def export_report(
    engine: Engine,
    *,
    fmt: str,
    out: Path,
    scope: Scope | None = None,
    signing_key: SM2PrivateKey | None = None,
    log_public_key: SM2PublicKey | None = None,
    produced_by: str,
    max_rows: int = 1000,
    clock: Callable[[], float] = time.time,
    party_logs: tuple[PartySource, ...] = (),
    party_logs_from: str = "none configured",
) -> ExportResult:
    """Verify the ledger's audit log and write a report about ``scope`` to ``out``.

    Parameters
    ----------
    engine
        The ledger database (:func:`privacy_ledger.create_ledger_engine`).
    fmt
        A name of :data:`RENDERERS`: ``json`` (signed bundle), ``html`` or ``pdf``.
    out
        Output file (written atomically for ``json``).
    scope
        Participant and period; default the whole federation, all time.
    signing_key
        The report signer's SM2 key; required for ``json``, shown (fingerprint)
        in ``html`` and ``pdf`` when given.
    log_public_key
        The audit log's public key obtained out of band (recommended); else
        the key stored in the database is used and the report says so.
    produced_by
        Who produces the report (recorded in it).
    max_rows
        Rows shown per table in ``html`` and ``pdf`` (the bundle has every row).
    clock
        Source of the production time.
    party_logs
        The key authority's and the helper's audit logs
        (:func:`compliance.parties.run_folder_sources`): each is verified,
        listed in section ``party_logs``, and cross-checked against the ledger.
    party_logs_from
        Where :paramref:`party_logs` came from, as the report states it.

    Returns
    -------
    ExportResult
        Path, format and the report metadata.

    Raises
    ------
    ReportFormatUnknown, ReportParameterInvalid, SigningKeyRequired
        On bad options (before the database is read).
    LedgerUnverified, NoSignedHead
        When the log cannot be reported on.
    """
    render = RENDERERS.get(fmt)
    if render is None:
        raise ReportFormatUnknown(
            f"fmt: {fmt!r} is not a report format; registered: {', '.join(sorted(RENDERERS))}"
        )
    if fmt == "json" and signing_key is None:
        raise SigningKeyRequired("signing_key: a json bundle must be signed (--signing-key)")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ReportParameterInvalid(f"max_rows: must be an int >= 1, got {max_rows!r}")
    if not isinstance(produced_by, str) or not 0 < len(produced_by.strip()) <= 256:
        raise ReportParameterInvalid("produced_by: must be 1-256 characters")
    spools = Spools()
    try:
        scope = scope or Scope()
        collected = collect(engine, scope, log_public_key=log_public_key, spools=spools)
        parties = add_party_logs(engine, spools, scope, tuple(party_logs), party_logs_from)
        signer = None if signing_key is None else signing_key.public_key
        meta = build_meta(
            collected, produced_by=produced_by, produced_at=timestamp(clock()), signer=signer
        )
        meta["federation"]["party_logs"] = parties  # signature-only, like the rest of it
        render(
            ReportContext(
                collected=collected,
                meta=meta,
                out=Path(out),
                signing_key=signing_key,
                max_rows=max_rows,
            )
        )
        disagreements = tuple(r for r in spools.rows("cross_check") if r["agree"] is not True)
        party = tuple(r for r in spools.rows("party_cross_check") if r["agree"] is not True)
    finally:
        spools.close()
    logger.info("exported %s report to %s (%d entries cited)", fmt, out, meta["cited"]["entries"])
    return ExportResult(
        path=Path(out), fmt=fmt, meta=meta, disagreements=disagreements, party_disagreements=party
    )

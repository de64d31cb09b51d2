"""Checklist items about transport, DP randomness, roles, the filter, backups and evidence.

The last four items restate the compliance evidence chain (data does not
leave the domain, irreversibility, DP parameter filing, cross-border
assessment): they need a person and always say ``manual`` with what to do.
"""

from __future__ import annotations

import stat
from typing import Any

from sqlalchemy import func, select

from compliance.checklist_base import Facts, Item, Outcome
from compliance.checklist_items import no_ledger
from compliance.view import NOT_CRYPTOGRAPHIC, SECURE_MODE_OFF
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.models import PrivacyEventRow, RoundRow

__all__ = ["MORE_ITEMS"]


def _certificate_problem(f: Facts, cert_path: Any) -> str | None:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError) as exc:
        return f"certificate {cert_path}: {exc}"
    if not cert.not_valid_before_utc <= f.now <= cert.not_valid_after_utc:
        return (
            f"certificate {cert_path} is not valid now (valid "
            f"{cert.not_valid_before_utc:%Y-%m-%d} to {cert.not_valid_after_utc:%Y-%m-%d})"
        )
    return None


def _tls(f: Facts) -> Outcome:
    cert, key = f.config.path("tls", "certificate"), f.config.path("tls", "private_key")
    if cert is None or key is None:
        return "fail", "TLS is not configured: set [tls] certificate and private_key"
    problem = _certificate_problem(f, cert)
    if problem is None:
        try:
            mode = key.stat().st_mode
            problem = (
                f"TLS key {key} is readable by group or others"
                if mode & (stat.S_IRWXG | stat.S_IRWXO)
                else None
            )
        except OSError as exc:
            problem = f"TLS key {key}: {exc.strerror}"
    return ("fail", problem) if problem else ("pass", f"certificate {cert.name} valid, key private")


def _database_tls(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    if f.engine.dialect.name == "sqlite":
        return (
            "manual",
            "SQLite is a local file: no transport to protect (use PostgreSQL in production)",
        )
    mode = f.engine.url.query.get("sslmode")
    if mode in ("verify-full", "verify-ca", "require"):
        return "pass", f"database connection uses sslmode={mode}"
    return "fail", "database URL has no sslmode=verify-full (or require)"


def _secure_rng(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    with f.engine.connect() as db:
        versions = list(
            db.scalars(select(PrivacyEventRow.versions).where(PrivacyEventRow.state == "committed"))
        )
    if not versions:
        return "manual", "no committed privacy event yet: check after the first round"
    values = [str((v or {}).get("secure_rng", "not recorded")).lower() for v in versions]
    off = sum(1 for v in values if v == "false")
    unknown = sum(1 for v in values if v not in ("true", "false"))
    if off or unknown:
        parts = []
        if off:
            parts.append(
                f"{off} of {len(values)} committed privacy events drew their noise from a "
                f"generator that is {NOT_CRYPTOGRAPHIC} (secure_rng false: {SECURE_MODE_OFF})"
            )
        if unknown:
            parts.append(f"{unknown} of {len(values)} record no secure_rng")
        return "fail", "; ".join(parts)
    return "pass", (
        f"all {len(values)} committed privacy events drew their noise from Opacus' "
        "cryptographic generator (secure_rng true)"
    )


def _roles(f: Facts) -> Outcome:
    ka, agg = f.config.get("roles", "key_authority_host"), f.config.get("roles", "aggregator_host")
    if not ka or not agg:
        return "manual", (
            "confirm the key authority (CKKS secret key) runs on another host and "
            "under another operator than the aggregator; set [roles] "
            "key_authority_host and aggregator_host to check it"
        )
    if ka == agg:
        return "fail", f"key authority and aggregator are both on {ka}"
    helper = f.config.get("roles", "helper_host")
    if helper and helper in (ka, agg):
        return "fail", f"the helper shares host {helper} with another server"
    return "pass", f"key authority on {ka}, aggregator on {agg}"


def _count(f: Facts, query: Any) -> int:
    assert f.engine is not None
    with f.engine.connect() as db:
        return int(db.scalar(query) or 0)


def _filter(f: Facts) -> Outcome:
    enabled = f.config.get("filter", "enabled")
    if enabled is False:
        return "fail", "[filter] enabled = false: poisoned predictions would be aggregated"
    if f.engine is None:
        return no_ledger()
    decisions = _count(f, select(func.count()).where(AuditEntryRow.event == "outlier.decision"))
    published = _count(f, select(func.count()).where(RoundRow.stage == "published"))
    if published and not decisions:
        return "fail", f"{published} rounds published but the audit log records no outlier decision"
    if decisions:
        return "pass", f"the audit log records {decisions} outlier decisions"
    return "manual", "no round published yet: confirm the outlier filter is on in the round config"


def _backups(f: Facts) -> Outcome:
    schedule, location = f.config.get("backups", "schedule"), f.config.get("backups", "location")
    if not schedule or not location:
        return "fail", "backups are not configured: set [backups] schedule and location"
    return "pass", f"backups {schedule} to {location} (restore test: see the next item)"


def _backend(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    if f.engine.dialect.name == "postgresql":
        return "pass", "the ledger runs on PostgreSQL"
    return "fail", f"the ledger runs on {f.engine.dialect.name}; production needs PostgreSQL"


def _manual(what: str) -> Any:
    return lambda _f: ("manual", what)


def _production(config: Any) -> bool:
    return bool(config.environment == "production")


def _rng_required(config: Any) -> bool:
    return bool(config.get("dp", "require_secure_rng"))


MORE_ITEMS: list[Item] = [
    Item("tls.configured", "TLS configured for the services", True, _tls),
    Item("tls.database", "Database connection encrypted", _production, _database_tls),
    Item(
        "dp.secure_rng",
        "DP noise from a cryptographic RNG (recorded secure_rng true: Opacus secure_mode on)",
        _rng_required,
        _secure_rng,
    ),
    Item(
        "roles.key_authority_separate", "Key authority separate from the aggregator", True, _roles
    ),
    Item("filter.enabled", "Outlier filter enabled", True, _filter),
    Item("backups.configured", "Ledger backups configured", True, _backups),
    Item(
        "backups.restore_tested",
        "Backup restore tested",
        False,
        _manual(
            "restore the newest backup into a scratch database and run 'secure-fed ledger verify' "
            "on it with the pinned log key"
        ),
    ),
    Item("database.production_backend", "Ledger on PostgreSQL", _production, _backend),
    Item(
        "evidence.egress_capture",
        "Only predictions leave a participant",
        False,
        _manual(
            "capture one participant's traffic during a round; confirm only signed upload "
            "envelopes leave (no record ids, images or text) and that sizes match the "
            "report's egress table"
        ),
    ),
    Item(
        "evidence.inversion_test",
        "Irreversibility assessed",
        False,
        _manual(
            "have a third party run model-inversion and membership-inference tests on the "
            "published soft labels and keep its report"
        ),
    ),
    Item(
        "evidence.dp_filing",
        "DP parameters filed",
        False,
        _manual(
            "file (epsilon, delta) per participant and the DP filing section of 'secure-fed audit "
            "export' with the regulator or sandbox"
        ),
    ),
    Item(
        "evidence.cross_border",
        "Cross-border transfer assessed",
        False,
        _manual(
            "if any node is abroad, complete the outbound data transfer security assessment, "
            "arguing whether predictions or parameters are important data"
        ),
    ),
]

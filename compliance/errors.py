"""Typed errors of the ``compliance`` package, each with a stable code.

Every error derives from :class:`ComplianceError`; each code has a heading in
``docs/audit/errors-compliance.md`` (a test fails when one is missing). Bundle
verification collects every failed check as a :class:`BundleFailure` whose
code is one of the ``COMPLIANCE_BUNDLE_*`` codes below and raises
:class:`BundleInvalid` listing them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "ComplianceError",
    "ReportParameterInvalid",
    "ReportFormatUnknown",
    "SigningKeyRequired",
    "LedgerUnverified",
    "NoSignedHead",
    "BundleFailure",
    "BundleInvalid",
    "BundleMalformed",
    "BundleSignatureInvalid",
    "BundleKeyMismatch",
    "BundleHeadInvalid",
    "BundleProofInvalid",
    "BundleChainBroken",
    "BundleScopeViolated",
    "BundleContentMismatch",
    "ChecklistConfigInvalid",
    "PartyLogsConfigInvalid",
]


class ComplianceError(Exception):
    """Base of every error raised by the ``compliance`` package.

    Parameters
    ----------
    message
        Human-readable explanation naming what was wrong (never key material).
    """

    code: ClassVar[str] = "COMPLIANCE_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class ReportParameterInvalid(ComplianceError):
    """A report option is invalid (date, participant id, period, row limit); names it."""

    code = "COMPLIANCE_PARAMETER_INVALID"


class ReportFormatUnknown(ComplianceError):
    """The requested report format is not registered; the message lists the formats."""

    code = "COMPLIANCE_FORMAT_UNKNOWN"


class SigningKeyRequired(ComplianceError):
    """A signed JSON bundle was requested without the report signing key."""

    code = "COMPLIANCE_SIGNING_KEY_REQUIRED"


class LedgerUnverified(ComplianceError):
    """The ledger's audit log failed verification; no report is produced from it."""

    code = "COMPLIANCE_LEDGER_UNVERIFIED"


class NoSignedHead(ComplianceError):
    """The audit log has no signed tree head covering the entries a report cites."""

    code = "COMPLIANCE_NO_SIGNED_HEAD"


class ChecklistConfigInvalid(ComplianceError):
    """The pre-launch checklist configuration (TOML) is unreadable or has a bad key."""

    code = "COMPLIANCE_CHECKLIST_CONFIG_INVALID"


# --- bundle verification: one code per kind of failed check ------------------------


class PartyLogsConfigInvalid(ComplianceError):
    """The party audit logs to read are misconfigured (not a deployment folder, unknown party)."""

    code = "COMPLIANCE_PARTY_LOGS_INVALID"


class BundleInvalid(ComplianceError):
    """A bundle failed verification; ``failures`` lists every failed check.

    Parameters
    ----------
    failures
        The failed checks, in the order they were found.
    """

    code = "COMPLIANCE_BUNDLE_INVALID"

    def __init__(self, failures: list[BundleFailure]) -> None:
        listed = "; ".join(f"[{f.code}] {f.message}" for f in failures) or "no detail"
        super().__init__(f"bundle failed {len(failures)} check(s): {listed}")
        self.failures = list(failures)

    @property
    def codes(self) -> list[str]:
        """Codes of the failed checks, in order."""
        return [f.code for f in self.failures]


class BundleMalformed(BundleInvalid):
    """The bundle is not in the line layout of ``secure-fed/audit-bundle/v1``."""

    code = "COMPLIANCE_BUNDLE_MALFORMED"


class BundleSignatureInvalid(BundleInvalid):
    """The report's SM2 signature does not verify over the signed bytes."""

    code = "COMPLIANCE_BUNDLE_SIGNATURE_INVALID"


class BundleKeyMismatch(BundleInvalid):
    """A key in the bundle differs from a pinned key or from the fingerprint the report states."""

    code = "COMPLIANCE_BUNDLE_KEY_MISMATCH"


class BundleHeadInvalid(BundleInvalid):
    """A signed tree head does not verify, or heads disagree with each other or the report."""

    code = "COMPLIANCE_BUNDLE_HEAD_INVALID"


class BundleProofInvalid(BundleInvalid):
    """An inclusion or consistency proof does not verify against the signed heads."""

    code = "COMPLIANCE_BUNDLE_PROOF_INVALID"


class BundleChainBroken(BundleInvalid):
    """Cited entries are not canonical, out of order, or break the ``prev`` hash chain."""

    code = "COMPLIANCE_BUNDLE_CHAIN_BROKEN"


class BundleScopeViolated(BundleInvalid):
    """The cited entries do not cover the claimed range or fall outside the report's scope."""

    code = "COMPLIANCE_BUNDLE_SCOPE_VIOLATED"


class BundleContentMismatch(BundleInvalid):
    """A report section differs from what the cited entries record."""

    code = "COMPLIANCE_BUNDLE_CONTENT_MISMATCH"


@dataclass(frozen=True)
class BundleFailure:
    """One failed bundle check: a ``COMPLIANCE_BUNDLE_*`` code and what failed.

    Attributes
    ----------
    code
        Stable code of the check's error class.
    message
        What failed, naming the field, entry index or section.
    """

    code: str
    message: str

    @classmethod
    def of(cls, kind: type[BundleInvalid], message: str) -> BundleFailure:
        """Return a failure carrying the code of ``kind``."""
        return cls(kind.code, message)

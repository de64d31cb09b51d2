"""Compliance: audit reports a regulator verifies offline, and the pre-launch checklist.

:func:`export_report` reads what the privacy ledger records and writes a
report as a signed JSON bundle (verifiable with :func:`verify_bundle`, or
with OpenSSL alone), HTML or PDF. :func:`run_checklist` evaluates the
pre-launch checklist. Heavy libraries (Jinja2, matplotlib, ReportLab) are
imported only by the renderers that need them.
"""

from compliance.checklist import ChecklistResult, run_checklist
from compliance.errors import BundleInvalid, ComplianceError
from compliance.export import RENDERERS, ExportResult, export_report
from compliance.scope import NOT_RECORDED, Scope, parse_bound
from compliance.verify import BundleReport, verify_bundle

__all__ = [
    "NOT_RECORDED",
    "RENDERERS",
    "BundleInvalid",
    "BundleReport",
    "ChecklistResult",
    "ComplianceError",
    "ExportResult",
    "Scope",
    "export_report",
    "parse_bound",
    "run_checklist",
    "verify_bundle",
]

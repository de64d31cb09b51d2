"""Typed errors of the ``secure-fed`` command line and their one-line rendering.

Every operator error prints exactly two lines on stderr::

    error: [CODE] what went wrong, naming the file, option or URL
    hint: what to do about it

and exits 2 (usage or configuration: the command could not start) or 1 (the
command ran and refused, or a check failed). The global ``--debug`` option
shows the traceback instead. Errors of the other packages (``LEDGER_*``,
``CRYPTO_*``, ...) keep their own code; foreign exceptions (SQLAlchemy, the
database drivers, the operating system) are translated here, at the boundary,
into the classes below. Each code has a ``### CODE`` heading in
``docs/audit/errors-cli.md``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CliError",
    "DatabaseMissing",
    "DatabaseFolderMissing",
    "DatabaseUnreachable",
    "DatabaseError",
    "SettingsInvalid",
    "PassphraseUnavailable",
    "FileUnreadable",
    "FileTooLarge",
    "FileExists",
    "WriteFailed",
    "IoFailed",
    "OptionInvalid",
    "UsageInvalid",
    "PortInUse",
    "NoBudget",
    "AuditLogEmpty",
    "AuditOriginMissing",
    "AuditKeyMissing",
    "CrossCheckMismatch",
    "TrustedHeadInvalid",
    "PublicContextMismatch",
    "RecomputeMismatch",
    "InternalError",
    "describe",
]

#: Exit status of a command that could not start (bad option, file, settings, database).
EXIT_USAGE = 2
#: Exit status of a command that ran and refused, or whose check failed.
EXIT_REFUSED = 1

DEMO_LEDGER_URL = "sqlite:///secure-fed-work/demo/ledger.db"


class CliError(Exception):
    """Base of the command line's own errors.

    Parameters
    ----------
    message
        One line naming what was wrong (the file, option or URL).
    hint
        One line saying what to do; the class default when omitted.
    """

    code: ClassVar[str] = "CLI_ERROR"
    exit_code: ClassVar[int] = EXIT_USAGE
    default_hint: ClassVar[str] = "run the command with --help for its options"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class DatabaseMissing(CliError):
    """A read-only command was pointed at a SQLite file that does not exist."""

    code = "CLI_DATABASE_MISSING"
    default_hint = (
        f"read-only commands never create a ledger; the demo's is "
        f"--db {DEMO_LEDGER_URL} (after 'secure-fed demo')"
    )


class DatabaseFolderMissing(CliError):
    """A SQLite ledger was requested in a folder that does not exist."""

    code = "CLI_DATABASE_FOLDER_MISSING"
    default_hint = "create the folder first, or check the path in --db"


class DatabaseUnreachable(CliError):
    """The database server refused or did not answer, or the file cannot be opened."""

    code = "CLI_DATABASE_UNREACHABLE"
    default_hint = "check that the server runs and the URL (host, port, user, database) is right"


class DatabaseError(CliError):
    """The database answered with an error (not a ledger, missing tables, constraint)."""

    code = "CLI_DATABASE_ERROR"
    exit_code = EXIT_REFUSED
    default_hint = "check that --db names a secure-fed ledger; --debug shows the traceback"


class SettingsInvalid(CliError):
    """A ``SECURE_FED_*`` environment variable has an invalid value."""

    code = "CLI_SETTINGS_INVALID"
    default_hint = "fix or unset the SECURE_FED_* variable named above (see api/settings.py)"


class PassphraseUnavailable(CliError):
    """A key passphrase is needed, it is not configured, and there is no terminal to ask."""

    code = "CLI_PASSPHRASE_UNAVAILABLE"
    default_hint = "set SECURE_FED_KEY_PASSPHRASE, or run the command in a terminal"


class FileUnreadable(CliError):
    """An input file cannot be read."""

    code = "CLI_FILE_UNREADABLE"
    default_hint = "check the path and its permissions"


class FileTooLarge(CliError):
    """An input file is larger than the command accepts for its kind (key, signature)."""

    code = "CLI_FILE_TOO_LARGE"
    default_hint = "check that the path names the right file"


class FileExists(CliError):
    """A command refused to overwrite existing files."""

    code = "CLI_FILE_EXISTS"
    exit_code = EXIT_REFUSED
    default_hint = "pass --force to replace them, or choose another --out"


class WriteFailed(CliError):
    """An output file or folder cannot be written."""

    code = "CLI_WRITE_FAILED"
    exit_code = EXIT_REFUSED
    default_hint = "check that the folder exists and is writable"


class IoFailed(CliError):
    """Reading or writing a file failed where no more specific code applies."""

    code = "CLI_IO_FAILED"
    exit_code = EXIT_REFUSED
    default_hint = "check the path, its permissions and the free disk space"


class OptionInvalid(CliError):
    """An option value is malformed (the message names the option)."""

    code = "CLI_OPTION_INVALID"


class UsageInvalid(CliError):
    """The option parser refused the command line; the message is the parser's own.

    A value of the wrong type (``--epsilon abc``), a missing or unknown option, an
    unknown command.
    """

    code = "CLI_USAGE_INVALID"


class PortInUse(CliError):
    """A service cannot listen: another process already holds the address and port."""

    code = "CLI_PORT_IN_USE"
    default_hint = "stop the process that listens there, or choose another --port"


class NoBudget(CliError):
    """``budget show`` found the participant but no budget for it."""

    code = "CLI_NO_BUDGET"
    exit_code = EXIT_REFUSED
    default_hint = "create one with 'secure-fed budget set'"


class AuditLogEmpty(CliError):
    """The audit log has no entries (or no signed head) to verify, print or extend."""

    code = "CLI_AUDIT_LOG_EMPTY"
    exit_code = EXIT_REFUSED
    default_hint = (
        f"check --db: the demo's audit log is in {DEMO_LEDGER_URL}, "
        "with its key in secure-fed-work/demo/log-public-key.pem"
    )


class AuditOriginMissing(CliError):
    """A budget change should be audited but no log origin or key is known."""

    code = "CLI_AUDIT_ORIGIN_MISSING"
    default_hint = "pass --audit-origin NAME for a new audit log"


class AuditKeyMissing(CliError):
    """A budget change would not be audited: no key of the ledger's audit log is available."""

    code = "CLI_AUDIT_KEY_MISSING"
    default_hint = (
        "pass --audit-key PEM (the audit log's SM2 signing key); a SQLite ledger's own key "
        "is log-signing-key.pem in its folder, as secure-fed demo leaves it"
    )


class CrossCheckMismatch(CliError):
    """The exported report's cross-check found ledger tables disagreeing with the audit log."""

    code = "CLI_CROSS_CHECK_MISMATCH"
    exit_code = EXIT_REFUSED
    default_hint = (
        "the report was written and shows the rows; a budget changed without its audit "
        "entry (run 'secure-fed ledger verify' and set it again with 'secure-fed budget set'), "
        "or a party's own audit log disagrees with the ledger (see the report's party rows)"
    )


class TrustedHeadInvalid(CliError):
    """The head passed with ``--trusted-head`` is unreadable or does not verify."""

    code = "CLI_TRUSTED_HEAD_INVALID"
    default_hint = "pass the folder written by 'secure-fed ledger export-head' and its key"


class PublicContextMismatch(CliError):
    """The file passed with ``--public-context`` is no CKKS key epoch of this audit log."""

    code = "CLI_PUBLIC_CONTEXT_MISMATCH"
    default_hint = (
        "pass the public context the key authority distributed; its SM3 must be the "
        "fingerprint of a key.generated (kind ckks) event"
    )


class RecomputeMismatch(CliError):
    """``ledger verify --recompute`` found decrypted ciphertexts that are not what was claimed."""

    code = "CLI_RECOMPUTE_MISMATCH"
    exit_code = EXIT_REFUSED
    default_hint = (
        "each finding names the round, purpose and request digest; the signed request "
        "in the decryption.requested event is the evidence against the aggregator"
    )


class InternalError(CliError):
    """An exception nobody translated: a bug in secure-fed."""

    code = "CLI_INTERNAL_ERROR"
    exit_code = EXIT_REFUSED
    default_hint = "this is a bug: rerun with --debug and report the traceback"


#: Codes of other packages that mean "the command could not start" (exit 2).
_USAGE_CODES = frozenset({"LEDGER_DATABASE_URL_INVALID", "LEDGER_SCHEMA_OUTDATED"})
#: Hints for other packages' codes an operator meets on the command line.
_HINTS = {
    "LEDGER_DATABASE_URL_INVALID": "use sqlite:///path/ledger.db or "
    "postgresql+psycopg://user@host/db",
    "LEDGER_SCHEMA_OUTDATED": f"check --db: it is not a secure-fed ledger at this version "
    f"(the demo's is {DEMO_LEDGER_URL})",
    "LEDGER_PARTICIPANT_UNKNOWN": "check --participant (the demo registers hospital-1, bank-2, "
    "...), or register it with 'secure-fed budget set --institution'",
    "LEDGER_BUDGET_NOT_SET": "create it with 'secure-fed budget set'",
    "LEDGER_BUDGET_UNAUDITED": "a budget was changed without its audit entry: set it again "
    "with 'secure-fed budget set' (always audited) and check who wrote the table",
    "LEDGER_LOG_KEY_MISMATCH": "pin the key of this log with --public-key, or use its own "
    "signing key",
    "CRYPTO_KEY_INVALID": "check the key file and SECURE_FED_KEY_PASSPHRASE",
}
_DOCS = {
    "LEDGER": "errors-ledger.md",
    "CRYPTO": "errors-crypto.md",
    "CLI": "errors-cli.md",
    "API": "errors-api.md",
}


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 300 else line[:297] + "..."


def _translate_database(exc: Exception) -> CliError:
    """Translate a SQLAlchemy exception (connection or query) into a typed error."""
    from sqlalchemy import exc as sa

    cause = _first_line(str(getattr(exc, "orig", None) or exc))
    if isinstance(exc, sa.OperationalError | sa.InterfaceError):
        return DatabaseUnreachable(f"cannot use the database: {cause}")
    return DatabaseError(f"database error ({type(exc).__name__}): {cause}")


def _typed(exc: Exception) -> CliError | None:
    if isinstance(exc, CliError):
        return exc
    module = type(exc).__module__ or ""
    if module.startswith("sqlalchemy"):
        return _translate_database(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return IoFailed(f"{where}{exc.strerror or exc}")
    return None


def describe(exc: Exception) -> tuple[str, str, int]:
    """Return the ``error:`` line, the ``hint:`` line and the exit status for ``exc``."""
    typed = _typed(exc)
    if typed is not None:
        return f"error: {typed}", f"hint: {typed.hint}", typed.exit_code
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code.isupper():
        message = _first_line(str(getattr(exc, "message", "") or exc))
        docs = _DOCS.get(code.split("_", 1)[0], "errors-secure-fed.md")
        hint = _HINTS.get(code, f"{code} is explained in docs/audit/{docs}")
        status = EXIT_USAGE if code in _USAGE_CODES else EXIT_REFUSED
        return f"error: [{code}] {message}", f"hint: {hint}", status
    internal = InternalError(f"unexpected {type(exc).__name__}: {_first_line(str(exc))}")
    return f"error: {internal}", f"hint: {internal.hint}", internal.exit_code

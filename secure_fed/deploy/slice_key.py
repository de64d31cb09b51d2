"""The aggregator's secret key for drawing each round's labeled slice, kept across restarts.

:class:`~secure_fed.federation.evidence.EvidencePool` draws round ``r``'s slice
with a keyed hash; the key must survive an aggregator restart (a resumed round's
plan names the slice the gatekeepers hold) and must never reach a participant.
It is 32 bytes from :mod:`secrets`, in ``<key_dir>/evidence-slice.key``, created
owner-only (0600) on the aggregator's first start, and refused if it is readable
by others or of the wrong size.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from secure_fed.deploy.config_errors import ServerConfigInvalid

__all__ = ["SLICE_KEY_FILE", "slice_key"]

#: File name of the slice key in the aggregator's key directory.
SLICE_KEY_FILE = "evidence-slice.key"
_BYTES = 32


def slice_key(directory: Path) -> bytes:
    """Return the aggregator's slice key from ``directory``, creating it on first use.

    Raises
    ------
    ServerConfigInvalid
        If the file cannot be created or read, is readable by group or others, or
        does not hold exactly 32 bytes.
    """
    path = directory / SLICE_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise _invalid(f"cannot create {path}: {exc}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(_BYTES))
        handle.flush()
        os.fsync(handle.fileno())
    return _read(path)


def _read(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise _invalid(f"cannot read {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise _invalid(f"{path} is readable by others (mode {stat.filemode(mode)}); chmod 600 it")
    if len(data) != _BYTES:
        raise _invalid(f"{path} holds {len(data)} bytes, not {_BYTES}")
    return data


def _invalid(message: str) -> ServerConfigInvalid:
    return ServerConfigInvalid(f"server.key_dir: {message}", field="server.key_dir")

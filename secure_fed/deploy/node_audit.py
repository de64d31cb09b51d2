"""A deployed participant's one-run empirical privacy audit, kept across its messages.

A node is rebuilt for every message (:mod:`secure_fed.deploy.participant_node`), while
the audit needs the same canaries and coins for all its rounds. With ``audit.canaries``
set in ``participant.toml``, the first build draws them
(:func:`~secure_fed.learning.privacy_audit.make_canaries`, from ``secrets``) and keeps
them in the state directory (``canaries.npz``, mode 0600: the coins are the audit's
secret); every later build reads them back, and ``audit-span.json`` keeps the ledger
label of the first charge the audits span.

Each audit is recorded as a signed ``budget.audited`` entry of the ledger the node
charges: its own ledger (``budget.ledger_url``), or the federation's through the API
(``budget.api_url``: ``POST /v1/budgets/{participant}/{asset}/audits``, where the
server recomputes the accounted epsilon over the audited rounds). Nothing is kept
beside it: the signed entry is the one record.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.config_errors import ParticipantStateInvalid
from secure_fed.deploy.participant_config import ParticipantConfig
from secure_fed.deploy.remote_budget import RemoteBudgetGate
from secure_fed.errors import LearningParameterInvalid
from secure_fed.federation.audit_record import record_audit
from secure_fed.learning.budget_gate import BudgetGate
from secure_fed.learning.privacy_audit import (
    AuditResult,
    AuditSettings,
    Canaries,
    CanaryAudit,
    make_canaries,
)
from secure_fed.learning.private_training import PrivateTrainer

__all__ = ["CANARIES", "attach_audit", "node_audit"]

_log = logging.getLogger(__name__)

#: The kept canaries and coins, in the state directory.
CANARIES = "canaries.npz"
_SPAN = "audit-span.json"


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path, settings: AuditSettings, public_x: np.ndarray) -> Canaries:
    try:
        with np.load(path, allow_pickle=False) as kept:
            canaries = Canaries(
                x=kept["x"].astype(np.float32),
                y=kept["y"].astype(np.int64),
                included=kept["included"].astype(bool),
            )
    except (OSError, KeyError, ValueError) as exc:
        raise ParticipantStateInvalid(f"{path} is not readable kept canaries: {exc}") from None
    m = settings.canaries
    if not (
        len(canaries.y) == len(canaries.included) == len(canaries.x) == m
        and canaries.x.shape[1:] == np.asarray(public_x).shape[1:]
    ):
        raise ParticipantStateInvalid(
            f"{path} keeps {len(canaries.y)} canaries of shape {canaries.x.shape[1:]}; "
            f"audit.canaries is {m} and the public set's rows are {np.asarray(public_x).shape[1:]}"
            " (a changed audit needs a new state directory)"
        )
    return canaries


def node_audit(
    config: ParticipantConfig, *, public_x: np.ndarray, num_classes: int, delta: float
) -> CanaryAudit | None:
    """Return the node's kept canaries (drawn and kept on the first call); ``None`` when off.

    Raises
    ------
    ParticipantStateInvalid
        The kept canaries are unreadable or do not match ``audit.canaries``.
    """
    if not config.audit_canaries:
        return None
    settings = AuditSettings(canaries=config.audit_canaries)
    path = config.state_dir / CANARIES
    if path.exists():
        canaries = _load(path, settings, public_x)
    else:
        canaries = make_canaries(settings.canaries, public_x=public_x, num_classes=num_classes)
        buffer = io.BytesIO()
        np.savez(buffer, x=canaries.x, y=canaries.y, included=canaries.included)
        _write(path, buffer.getvalue())
    return CanaryAudit(canaries, settings, delta=delta)


def attach_audit(trainer: object, config: ParticipantConfig, gate: BudgetGate) -> None:
    """Give ``trainer`` its kept audit span and the writer of each audit it makes.

    ``gate`` is the node's real gate, and each audit is a signed entry of its
    ledger: the node's own :class:`~privacy_ledger.PrivacyLedger`, or the
    federation's through the API (:meth:`RemoteBudgetGate.record_audit`). A
    refusal or an API that cannot be reached raises from the round, as the
    in-process writer does (the gate answered the round's charge just before).

    Raises
    ------
    ParticipantStateInvalid
        The kept audit span is unreadable.
    LearningParameterInvalid
        ``gate`` is neither: nothing could record the audits.
    """
    if not isinstance(trainer, PrivateTrainer) or trainer.audit is None:
        return
    ledger = gate if isinstance(gate, PrivacyLedger) else None
    remote = gate if isinstance(gate, RemoteBudgetGate) else None
    if ledger is None and remote is None:
        raise LearningParameterInvalid(
            f"gate: {gate!r} records no audits (a PrivacyLedger or a RemoteBudgetGate does)"
        )
    span = config.state_dir / _SPAN
    if span.exists():
        try:
            trainer.audit_from = str(json.loads(span.read_text(encoding="utf-8"))["from"])
        except (OSError, ValueError, KeyError) as exc:
            raise ParticipantStateInvalid(f"{span} is not a readable audit span: {exc}") from None

    def write(result: AuditResult) -> None:
        if not span.exists():
            _write(span, json.dumps({"from": result.rounds_from}).encode("utf-8"))
        if ledger is not None:
            record_audit(ledger, result)
        elif remote is not None:
            recorded = remote.record_audit(result)
            _log.info(
                "empirical audit of %s recorded by the ledger's API as entry %d: "
                "lower bound %s, accounted %s",
                result.participant,
                recorded.index,
                recorded.audit.epsilon_lower_bound,
                recorded.audit.epsilon_accounted,
            )

    trainer.on_audit = write

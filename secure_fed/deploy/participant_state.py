"""A participant's local state directory: model checkpoint and its own record of every round.

Layout (mode 0700, files 0600, every write a temp file renamed into place)::

    state/
      participant.json        # {"participant_id": ...}; a directory of another id is refused
      model.pt                # torch state_dict after the last training or distillation
      progress.json           # rounds_trained, stop_reason, last round trained / distilled
      label-prior.json        # the label prior released once: noisy counts, sigma, charge
      rounds/r00000003.json   # round 3: training report, reservations, receipt, upload SM3
      envelopes/r00000003.bin # the signed upload envelope of round 3, as sent

:class:`BudgetRecorder` wraps the participant's budget gate and writes each
reservation, commit and abort into the round's record the moment it happens.
After a restart :meth:`ParticipantState.restore` reloads the model and the
trainer's progress and the released label prior; a round whose envelope is on
disk is answered with that envelope, never retrained or charged again, and the
label prior (logit adjustment) is released and charged once in the
participant's life: the trainer hands it to :meth:`ParticipantState.save_prior`
before its charge is committed and again after, and every later process
reuses it (a copy whose digest or fields do not check is refused, nothing charged).
"""

from __future__ import annotations

import hmac
import json
import os
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import torch

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.budget.types import Reservation
from secure_fed.deploy.config_errors import ParticipantStateInvalid
from secure_fed.errors import LearningParameterInvalid
from secure_fed.federation.handlers import ParticipantHandler
from secure_fed.learning.budget_gate import BudgetGate
from secure_fed.learning.logit_adjustment import ReleasedPrior
from secure_fed.learning.private_training import PrivateTrainer

__all__ = ["BudgetRecorder", "ParticipantState"]


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600."""
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


class ParticipantState:
    """One participant's state directory (see the module docstring).

    Parameters
    ----------
    directory
        The state directory (created with mode 0700 when absent).
    participant_id
        Its owner; a directory written by another id is refused.

    Raises
    ------
    ParticipantStateInvalid
        If the directory cannot be created or read, or belongs to another id.
    """

    def __init__(self, *, directory: Path, participant_id: str) -> None:
        self.directory, self.participant_id = Path(directory), participant_id
        try:
            for sub in ("", "rounds", "envelopes"):
                (self.directory / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
            owner = self._json("participant.json")
        except OSError as exc:
            raise ParticipantStateInvalid(f"state directory {directory}: {exc}") from None
        if owner is None:
            self._put("participant.json", {"participant_id": participant_id})
        elif owner.get("participant_id") != participant_id:
            raise ParticipantStateInvalid(
                f"state directory {directory} belongs to {owner.get('participant_id')!r}, "
                f"not {participant_id!r}",
                field="participant.state_dir",
            )

    def _json(self, name: str) -> dict[str, Any] | None:
        path = self.directory / name
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ParticipantStateInvalid(f"{path} is unreadable: {exc}") from None
        if not isinstance(data, dict):
            raise ParticipantStateInvalid(f"{path} is not a JSON object")
        return data

    def _put(self, name: str, data: dict[str, Any]) -> None:
        _write(self.directory / name, json.dumps(data, indent=1, sort_keys=True).encode())

    # -- model and progress ---------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        """Return ``progress.json`` (empty before the first checkpoint)."""
        return self._json("progress.json") or {}

    def restore(self, handler: ParticipantHandler) -> None:
        """Load the checkpointed model, the trainer's progress and its label prior.

        The trainer also keeps every later label-prior release here
        (:meth:`save_prior`).

        Raises
        ------
        ParticipantStateInvalid
            If the checkpoint does not fit the participant's model, or the kept
            label prior is corrupted or does not fit the trainer.
        """
        participant = handler.participant
        trainer = participant.trainer
        if isinstance(trainer, PrivateTrainer):
            self._restore_prior(trainer)
        model_file = self.directory / "model.pt"
        if not model_file.exists():
            return
        try:
            weights = torch.load(model_file, map_location="cpu", weights_only=True)
            participant.model.load_state_dict(weights)
        except (OSError, RuntimeError, ValueError) as exc:
            raise ParticipantStateInvalid(f"{model_file} does not fit the model: {exc}") from None
        progress = self.progress()
        if isinstance(trainer, PrivateTrainer):
            trainer.rounds_trained = int(progress.get("rounds_trained", 0))
        stop = progress.get("stop_reason")
        participant.stop_reason = stop if isinstance(stop, str) else None

    def checkpoint(self, handler: ParticipantHandler, *, round_id: int, phase: str) -> None:
        """Save the model and the progress after ``phase`` (``trained``, ``distilled``)."""
        participant = handler.participant
        buffer = tempfile.SpooledTemporaryFile()
        torch.save(participant.model.state_dict(), buffer)
        buffer.seek(0)
        _write(self.directory / "model.pt", buffer.read())
        trainer = participant.trainer
        progress = self.progress()
        progress.update(
            {
                f"last_{phase}": round_id,
                "rounds_trained": (
                    trainer.rounds_trained if isinstance(trainer, PrivateTrainer) else 0
                ),
                "stop_reason": participant.stop_reason,
            }
        )
        self._put("progress.json", progress)

    # -- the label prior ------------------------------------------------------------

    def save_prior(self, prior: ReleasedPrior) -> None:
        """Keep the released label prior with the SM3 of its fields (before and after commit)."""
        fields = prior.to_fields()
        self._put(_PRIOR_FILE, {"prior": fields, "sm3": _prior_digest(fields)})

    def load_prior(self) -> ReleasedPrior | None:
        """Return the kept label prior (None if none was released yet).

        Raises
        ------
        ParticipantStateInvalid
            If the file is unreadable, its SM3 does not match or a field is invalid.
        """
        data = self._json(_PRIOR_FILE)
        if data is None:
            return None
        path = self.directory / _PRIOR_FILE
        fields, digest = data.get("prior"), data.get("sm3")
        if not (isinstance(fields, dict) and isinstance(digest, str)):
            raise ParticipantStateInvalid(
                f"{path} has no prior and sm3", field="participant.state_dir"
            )
        if not hmac.compare_digest(_prior_digest(fields), digest):
            raise ParticipantStateInvalid(
                f"{path}: the label prior does not match its SM3 (corrupted or altered)",
                field="participant.state_dir",
            )
        try:
            return ReleasedPrior.from_fields(fields)
        except (LearningParameterInvalid, TypeError) as exc:
            raise ParticipantStateInvalid(f"{path}: {exc}", field="participant.state_dir") from None

    def _restore_prior(self, trainer: PrivateTrainer) -> None:
        prior = self.load_prior()
        if prior is not None:
            try:
                trainer.adopt_prior(prior)
            except LearningParameterInvalid as exc:
                raise ParticipantStateInvalid(
                    f"{self.directory / _PRIOR_FILE}: {exc}", field="participant.state_dir"
                ) from None
        trainer.on_prior = self.save_prior

    # -- the round record -----------------------------------------------------------

    def record(self, round_id: int) -> dict[str, Any]:
        """Return the record of ``round_id`` (empty when the round never reached this node)."""
        return self._json(f"rounds/r{round_id:08d}.json") or {}

    def update_record(self, round_id: int, **fields: Any) -> None:
        """Merge ``fields`` into the record of ``round_id``."""
        record = self.record(round_id)
        for key, value in fields.items():
            if isinstance(value, list) and isinstance(record.get(key), list):
                record[key] = record[key] + value
            else:
                record[key] = value
        record["round_id"] = round_id
        self._put(f"rounds/r{round_id:08d}.json", record)

    def envelope(self, round_id: int) -> bytes | None:
        """Return the envelope already sent for ``round_id`` (None if none was made)."""
        path = self.directory / "envelopes" / f"r{round_id:08d}.bin"
        return path.read_bytes() if path.exists() else None

    def save_envelope(self, round_id: int, envelope: bytes) -> None:
        """Keep the signed envelope of ``round_id`` and record its SM3 and size."""
        _write(self.directory / "envelopes" / f"r{round_id:08d}.bin", envelope)
        self.update_record(round_id, envelope_sm3=sm3_digest(envelope).hex(), bytes=len(envelope))


_PRIOR_FILE = "label-prior.json"


def _prior_digest(fields: dict[str, Any]) -> str:
    """SM3 of the prior's canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return sm3_digest(canonical.encode()).hex()


class BudgetRecorder:
    """A :class:`BudgetGate` that writes each reservation's fate into the round record.

    Parameters
    ----------
    gate
        The real gate (the ledger API's remote gate, or a local ledger).
    state
        Where the records go.
    round_of
        Maps the ledger round label (``r3``) to the round number.
    """

    def __init__(
        self, *, gate: BudgetGate, state: ParticipantState, round_of: Callable[[str], int]
    ) -> None:
        self.gate, self.state, self.round_of = gate, state, round_of
        self._rounds: dict[str, int] = {}

    def epsilon_spent(self, participant_id: str, asset_id: str) -> Decimal:
        """Pass through."""
        return self.gate.epsilon_spent(participant_id, asset_id)

    def calibrate_noise(self, participant_id: str, asset_id: str, **kwargs: Any) -> float:
        """Pass through."""
        return self.gate.calibrate_noise(participant_id, asset_id, **kwargs)

    def reserve(
        self, participant_id: str, asset_id: str, event: Any, *, round_id: str | None = None
    ) -> Reservation:
        """Reserve through the gate, then record the reservation id and projected epsilon."""
        reservation = self.gate.reserve(participant_id, asset_id, event, round_id=round_id)
        if round_id is not None:
            number = self.round_of(round_id)
            self._rounds[reservation.id] = number
            entry = {"id": reservation.id, "epsilon_projected": str(reservation.epsilon_projected)}
            self.state.update_record(number, reservations=[entry])
        return reservation

    def commit(self, reservation_id: str) -> None:
        """Commit through the gate, then record it."""
        self.gate.commit(reservation_id)
        self._note(reservation_id, "committed")

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Abort through the gate, then record it."""
        self.gate.abort(reservation_id, released_anything=released_anything)
        self._note(reservation_id, "aborted")

    def _note(self, reservation_id: str, outcome: str) -> None:
        number = self._rounds.get(reservation_id)
        if number is not None:
            self.state.update_record(number, resolved=[{"id": reservation_id, "state": outcome}])

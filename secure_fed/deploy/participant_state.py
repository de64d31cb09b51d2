"""A participant's local state directory: model checkpoint and its own record of every round.

Layout (mode 0700, files 0600, every write a temp file renamed into place)::

    state/
      participant.json        # {"participant_id": ...}; a directory of another id is refused
      model.pt                # torch state_dict after the last training or distillation
      progress.json           # rounds_trained, stop_reason, last round trained / distilled
      rounds/r00000003.json   # round 3: training report, reservations, receipt, upload SM3
      envelopes/r00000003.bin # the signed upload envelope of round 3, as sent

:class:`BudgetRecorder` wraps the participant's budget gate and writes each
reservation, commit and abort into the round's record the moment it happens.
After a restart :meth:`ParticipantState.restore` reloads the model and the
trainer's progress; a round whose envelope is on disk is answered with that
envelope, never retrained or charged again.
"""

from __future__ import annotations

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
from secure_fed.federation.handlers import ParticipantHandler
from secure_fed.learning.budget_gate import BudgetGate
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
        """Load the checkpointed model and the trainer's progress into ``handler``.

        Raises
        ------
        ParticipantStateInvalid
            If the checkpoint does not fit the participant's model.
        """
        model_file = self.directory / "model.pt"
        if not model_file.exists():
            return
        participant = handler.participant
        try:
            weights = torch.load(model_file, map_location="cpu", weights_only=True)
            participant.model.load_state_dict(weights)
        except (OSError, RuntimeError, ValueError) as exc:
            raise ParticipantStateInvalid(f"{model_file} does not fit the model: {exc}") from None
        progress = self.progress()
        trainer = participant.trainer
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

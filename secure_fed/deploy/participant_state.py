"""A participant's local state directory: model checkpoint and its own record of every round.

Layout (mode 0700, files 0600, every write a temp file renamed into place)::

    state/
      participant.json        # {"participant_id": ...}; a directory of another id is refused
      model.pt                # torch state_dict after the last training or distillation
      progress.json           # rounds_trained, stop_reason, last round trained / distilled
      label-prior.json        # the label prior released once: noisy counts, sigma, charge
      rounds/r00000003.json   # round 3: training report, reservations, receipt, upload SM3
      envelopes/r00000003.bin # the signed upload envelope of round 3, as sent
      pending/<id>.json       # a reservation not yet resolved, locked by the process holding it

:class:`BudgetRecorder` wraps the participant's budget gate and writes each
reservation, commit and abort into the round's record the moment it happens.
Before it reserves, it writes the reservation's intent to ``pending/`` (the
request id the ledger derives the reservation id from) and holds an exclusive
``flock`` on that file until the reservation is resolved; a process that dies
or gives up (a commit that failed) lets go of the lock. A later process
releases such stale reservations through the ledger's audited abort
(:meth:`BudgetRecorder.release_stale`): only reservations of this state
directory, only when no live process holds their lock, and never a committed
charge (the ledger refuses to refund one).
After a restart :meth:`ParticipantState.restore` reloads the model and the
trainer's progress and the released label prior; a round whose envelope is on
disk is answered with that envelope, never retrained or charged again, and the
label prior (logit adjustment) is released and charged once in the
participant's life: the trainer hands it to :meth:`ParticipantState.save_prior`
before its charge is committed and again after, and every later process
reuses it (a copy whose digest or fields do not check is refused, nothing charged).
"""

from __future__ import annotations

import fcntl
import hmac
import json
import logging
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import torch

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.budget.event_rows import request_reservation_id
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.types import BudgetGate, Reservation
from privacy_ledger.errors import (
    BudgetExceeded,
    ParticipantSuspended,
    ReservationNotActive,
    ReservationUnknown,
)
from secure_fed.deploy.config_errors import ParticipantStateInvalid
from secure_fed.errors import LearningParameterInvalid
from secure_fed.federation.handlers import ParticipantHandler
from secure_fed.learning.logit_adjustment import ReleasedPrior
from secure_fed.learning.private_training import PrivateTrainer

__all__ = ["BudgetRecorder", "JournaledGate", "ParticipantState"]

_log = logging.getLogger(__name__)


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
            for sub in ("", "rounds", "envelopes", _PENDING):
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


_PENDING = "pending"


class JournaledGate(BudgetGate, Protocol):
    """The budget gates a node charges: ``reserve`` also takes the caller's ``request_id``.

    :class:`~privacy_ledger.PrivacyLedger` (the node's own ledger) and
    :class:`~secure_fed.deploy.remote_budget.RemoteBudgetGate` (the ledger's API).
    """

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
        request_id: str | None = None,
    ) -> Reservation:
        """Hold budget for ``event``; the reservation id is derived from ``request_id``."""
        ...


class _Intent:
    """One ``pending/<reservation id>.json`` file and the descriptor holding its lock."""

    def __init__(self, path: Path, fd: int, fields: dict[str, Any]) -> None:
        self.path, self.fd, self.fields = path, fd, fields
        self.reservation_id = str(fields.get("reservation_id", ""))

    def resolved(self) -> None:
        """Forget the resolved reservation: remove the file, then let go of the lock."""
        self.path.unlink(missing_ok=True)
        os.close(self.fd)

    def abandoned(self) -> None:
        """Give the reservation up: keep the file, let go of the lock (it is now stale)."""
        os.close(self.fd)


def _lock(fd: int) -> bool:
    """Take the exclusive lock of ``fd`` without waiting; ``False``: a live process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class BudgetRecorder:
    """A budget gate that journals each reservation and writes its fate into the round record.

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
        self, *, gate: JournaledGate, state: ParticipantState, round_of: Callable[[str], int]
    ) -> None:
        self.gate, self.state, self.round_of = gate, state, round_of
        self._rounds: dict[str, int] = {}
        self._held: dict[str, _Intent] = {}

    def epsilon_spent(self, participant_id: str, asset_id: str) -> Decimal:
        """Pass through."""
        return self.gate.epsilon_spent(participant_id, asset_id)

    def calibrate_noise(self, participant_id: str, asset_id: str, **kwargs: Any) -> float:
        """Pass through."""
        return self.gate.calibrate_noise(participant_id, asset_id, **kwargs)

    def reserve(
        self, participant_id: str, asset_id: str, event: Any, *, round_id: str | None = None
    ) -> Reservation:
        """Journal the intent (locked), reserve through the gate, then record the reservation.

        The request id is drawn here (``secrets``) and written, with the
        reservation id the ledger derives from it, before the request leaves:
        whatever happens to the answer, this state directory knows the id.
        """
        intent = self._intend(participant_id, asset_id, round_id)
        try:
            reservation = self.gate.reserve(
                participant_id,
                asset_id,
                event,
                round_id=round_id,
                request_id=intent.fields["request_id"],
            )
        except (BudgetExceeded, ParticipantSuspended):
            intent.resolved()  # a refusal holds nothing
            raise
        except BaseException:
            intent.abandoned()  # perhaps held: a later process releases it
            raise
        if reservation.id != intent.reservation_id:  # pragma: no cover - the ledger's own rule
            intent.abandoned()
            raise ParticipantStateInvalid(
                f"the ledger answered reservation {reservation.id!r} for request "
                f"{intent.reservation_id!r}"
            )
        self._held[reservation.id] = intent
        if round_id is not None:
            number = self.round_of(round_id)
            self._rounds[reservation.id] = number
            entry = {"id": reservation.id, "epsilon_projected": str(reservation.epsilon_projected)}
            self.state.update_record(number, reservations=[entry])
        return reservation

    def commit(self, reservation_id: str) -> None:
        """Commit through the gate, then record it (a failed commit leaves the intent stale)."""
        try:
            self.gate.commit(reservation_id)
        except BaseException:
            self._let_go(reservation_id, resolved=False)
            raise
        self._let_go(reservation_id, resolved=True)
        self._note(reservation_id, "committed")

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Abort through the gate, then record it (a failed abort leaves the intent stale)."""
        try:
            self.gate.abort(reservation_id, released_anything=released_anything)
        except BaseException:
            self._let_go(reservation_id, resolved=False)
            raise
        self._let_go(reservation_id, resolved=True)
        self._note(reservation_id, "committed" if released_anything else "aborted")

    def _let_go(self, reservation_id: str, *, resolved: bool) -> None:
        intent = self._held.pop(reservation_id, None)
        if intent is not None:
            intent.resolved() if resolved else intent.abandoned()

    def _note(self, reservation_id: str, outcome: str) -> None:
        number = self._rounds.get(reservation_id)
        if number is not None:
            self.state.update_record(number, resolved=[{"id": reservation_id, "state": outcome}])

    # -- the journal of pending reservations ------------------------------------------

    def _intend(self, participant_id: str, asset_id: str, round_id: str | None) -> _Intent:
        """Write ``pending/<reservation id>.json`` whole, already locked by this process."""
        request_id = secrets.token_urlsafe(24)
        fields = {
            "participant_id": participant_id,
            "asset_id": asset_id,
            "round_id": round_id,
            "request_id": request_id,
            "reservation_id": request_reservation_id(participant_id, asset_id, request_id),
            "pid": os.getpid(),
        }
        folder = self.state.directory / _PENDING
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".intent.")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh file: nobody else can hold it
            os.write(fd, json.dumps(fields, sort_keys=True).encode())
            os.fsync(fd)
            path = folder / f"{fields['reservation_id']}.json"
            os.replace(tmp, path)  # the lock is the file's: it moves with it
        except BaseException:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise
        return _Intent(path, fd, fields)

    def _stale(self) -> Iterator[_Intent]:
        """Yield each pending intent no live process holds, locked by this one."""
        for path in sorted((self.state.directory / _PENDING).glob("*.json")):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:  # resolved meanwhile
                continue
            if not _lock(fd) or os.fstat(fd).st_nlink == 0:  # held, or resolved meanwhile
                os.close(fd)
                continue
            try:
                with open(fd, "rb", closefd=False) as handle:
                    fields = json.loads(handle.read(1 << 16))
                if not isinstance(fields, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                os.close(fd)
                raise ParticipantStateInvalid(
                    f"{path} is unreadable: {exc}", field="participant.state_dir"
                ) from None
            yield _Intent(path, fd, fields)

    def _own(self, intent: _Intent) -> bool:
        """Whether the intent names a reservation this participant's request id stands for."""
        f = intent.fields
        try:
            derived = request_reservation_id(
                str(f.get("participant_id")), str(f.get("asset_id")), str(f.get("request_id"))
            )
        except Exception:  # noqa: BLE001 - a malformed request id is simply not ours
            return False
        return (
            f.get("participant_id") == self.state.participant_id
            and hmac.compare_digest(derived, intent.reservation_id)
            and intent.path.name == f"{derived}.json"
        )

    def release_stale(self) -> list[str]:
        """Release this node's reservations that no live process will resolve; return their ids.

        Each stale intent (its lock free: the process that reserved died or gave
        up) is aborted through the gate with ``released_anything=False``: the
        ledger writes ``budget.aborted`` in the same transaction, or does
        nothing for one already aborted or expired. One the ledger committed
        (the process died after the charge, before forgetting the intent) is
        refused by the ledger and stays charged; one the ledger never saw is
        dropped. The uncommitted charge of a kept label prior is left for the
        trainer to finish (it commits it before using the prior). An intent
        that does not name a reservation of this participant's request id is
        left alone.

        Raises
        ------
        BudgetServiceUnavailable, LedgerError
            The gate could not be asked: the intent stays for the next process.
        ParticipantStateInvalid
            A pending file is unreadable.
        """
        prior = self.state.load_prior()
        keep = None if prior is None or prior.committed else prior.reservation_id
        released: list[str] = []
        for intent in self._stale():
            rid = intent.reservation_id
            if not self._own(intent) or rid == keep:
                if rid != keep:
                    _log.warning("%s names no reservation of this node: left", intent.path)
                intent.abandoned()
                continue
            try:
                self.gate.abort(rid, released_anything=False)
            except ReservationNotActive:
                _log.info("stale reservation %s was committed: the charge stands", rid)
                intent.resolved()
                continue
            except ReservationUnknown:
                _log.info("stale reservation %s never reached the ledger", rid)
                intent.resolved()
                continue
            except BaseException:
                intent.abandoned()
                raise
            _log.warning("released stale reservation %s (round %s)", rid, intent.fields["round_id"])
            round_id = intent.fields.get("round_id")
            if isinstance(round_id, str):
                number = self.round_of(round_id)
                self.state.update_record(number, resolved=[{"id": rid, "state": "released"}])
            intent.resolved()
            released.append(rid)
        return released

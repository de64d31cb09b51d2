"""Round-state persistence: the ledger database, or an atomic JSON folder.

Both implement :class:`secure_fed.federation.stages.RoundStore`. :class:`LedgerRoundStore`
keeps round state in the privacy ledger's ``rounds`` table
(``privacy_ledger.rounds.RoundStore``) with compare-and-set on the stage, so
two aggregator processes cannot both advance a round, and records upload
evidence (SM3 digest, size, mode, shape; never the data) for the compliance
report. When a round ends (published or aborted) it has the ledger's audit log
sign a tree head over every entry so far (``privacy_ledger.audit.rows.checkpoint_engine``).
:class:`JsonFileRoundStore` writes one file per round with a temp-file-and-rename,
for single-process use without a database.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.audit.rows import checkpoint_engine
from privacy_ledger.errors import RoundUnknown
from privacy_ledger.models import RoundRow
from privacy_ledger.rounds import RoundStore as LedgerRounds
from secure_fed.errors import RoundConfigInvalid, UploadParticipantUnknown
from secure_fed.federation.stages import RoundState, Stage

__all__ = ["JsonFileRoundStore", "LedgerRoundStore"]

_TERMINAL = (Stage.PUBLISHED, Stage.ABORTED)
_NAMESPACE = re.compile(r"^[A-Za-z0-9._@-]{1,100}$")


class LedgerRoundStore:
    """Round state in the ledger DB, ids ``<namespace>:<round id, 8 digits>``.

    Parameters
    ----------
    engine
        The migrated ledger engine (``PrivacyLedger.engine``).
    namespace
        Federation name separating its rounds from other federations' rounds.
    """

    def __init__(self, *, engine: Engine, namespace: str) -> None:
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise RoundConfigInvalid(f"namespace must be 1-100 of [A-Za-z0-9._@-]: {namespace!r}")
        self.rounds, self.namespace = LedgerRounds(engine), namespace
        self._sessions = sessionmaker(engine)
        self._recorded: dict[int, set[str]] = {}
        self._stages: dict[int, str] = {}

    def _key(self, round_id: int) -> str:
        return f"{self.namespace}:{round_id:08d}"

    def save(self, state: RoundState) -> None:
        """Persist ``state`` (compare-and-set on the last stage this store saw)."""
        rid, key = state.round_id, self._key(state.round_id)
        if self._stages.get(rid) is not None:  # evidence first: the round row must exist
            self._record_uploads(state)
        self.rounds.save(
            key,
            stage=state.stage.value,
            state=state.to_dict(),
            expected_stage=self._stages.get(rid),
        )
        self._stages[rid] = state.stage.value
        if state.stage in _TERMINAL:  # a round's end: every audit entry so far under a head
            checkpoint_engine(self.rounds.engine)

    def _record_uploads(self, state: RoundState) -> None:
        key = self._key(state.round_id)
        recorded = self._recorded.setdefault(
            state.round_id, {u.participant_id for u in self.rounds.uploads(key)}
        )
        shape = [state.config.num_public, state.config.schema.output.num_classes]
        for pid, upload in state.uploads.items():
            if pid in recorded:
                continue
            try:
                self.rounds.record_upload(
                    key,
                    pid,
                    digest=sm3_digest(upload.payload).hex(),
                    size=len(upload.payload),
                    kind=state.config.mode,
                    shape=shape,
                )
            except IntegrityError:
                raise UploadParticipantUnknown(
                    f"participant {pid!r} is not registered in the ledger"
                ) from None
            recorded.add(pid)

    def load(self, round_id: int) -> RoundState | None:
        """Return the stored state, or None."""
        try:
            record = self.rounds.load(self._key(round_id))
        except RoundUnknown:
            return None
        self._stages[round_id] = record.stage
        return RoundState.from_dict(record.state)

    def _ids(self) -> list[tuple[int, str]]:
        prefix = f"{self.namespace}:"
        with self._sessions() as session:  # read-only listing
            rows = session.execute(
                select(RoundRow.id, RoundRow.stage).where(RoundRow.id.startswith(prefix))
            ).all()
        return sorted((int(rid[len(prefix) :]), stage) for rid, stage in rows)

    def open_rounds(self) -> list[RoundState]:
        """Every stored round of this namespace that is not terminal."""
        terminal = {s.value for s in _TERMINAL}
        states = [self.load(rid) for rid, stage in self._ids() if stage not in terminal]
        return [s for s in states if s is not None]

    def last_round_id(self) -> int | None:
        """Highest stored round id of this namespace."""
        ids = self._ids()
        return ids[-1][0] if ids else None

    def rounds_with_payload(self, digest: str, *, other_than: int) -> list[int]:
        """Return the rounds but ``other_than`` whose recorded uploads include this digest."""
        prefix = f"{self.namespace}:"
        found = (int(r[len(prefix) :]) for r in self.rounds.rounds_with_upload(digest, prefix))
        return sorted(r for r in found if r != other_than)


class JsonFileRoundStore:
    """One JSON file per round in a folder, written atomically (temp file + rename)."""

    def __init__(self, *, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._terminal: dict[int, set[str]] = {}

    def _path(self, round_id: int) -> Path:
        return self.directory / f"round-{round_id:08d}.json"

    def save(self, state: RoundState) -> None:
        """Write ``state`` to a temp file, fsync, and rename over the old file."""
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".round-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state.to_dict(), fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path(state.round_id))

    def load(self, round_id: int) -> RoundState | None:
        """Return the stored state, or None."""
        path = self._path(round_id)
        if not path.exists():
            return None
        return RoundState.from_dict(json.loads(path.read_text(encoding="utf-8")))

    def _ids(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.directory.glob("round-*.json"))

    def open_rounds(self) -> list[RoundState]:
        """Every stored round that is not terminal."""
        states = [self.load(i) for i in self._ids()]
        return [s for s in states if s is not None and s.stage not in _TERMINAL]

    def last_round_id(self) -> int | None:
        """Highest stored round id."""
        ids = self._ids()
        return ids[-1] if ids else None

    def rounds_with_payload(self, digest: str, *, other_than: int) -> list[int]:
        """Return the stored rounds but ``other_than`` that accepted a payload of this SM3.

        Reads every round file once; a terminal round's digests are kept in memory
        afterwards (they cannot change), an open round's are read again each time.
        """
        found = []
        for rid in self._ids():
            if rid == other_than:  # the asking round's own file is not read
                continue
            digests = self._terminal.get(rid)
            if digests is None:
                state = self.load(rid)
                if state is None:
                    continue
                digests = {sm3_digest(u.payload).hex() for u in state.uploads.values()}
                if state.stage in _TERMINAL:
                    self._terminal[rid] = digests
            if digest in digests:
                found.append(rid)
        return found

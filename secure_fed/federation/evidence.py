"""The labeled rows of the public set that the evidence of correctness is measured on.

The weights reward being right (:mod:`secure_fed.federation.weighting`): the
servers need public rows whose labels they know. Built-in tasks and single-table
tasks keep the labels of their public rows on the servers' side only
(:attr:`~secure_fed.learning.data.TaskData.public_y`; participants receive the
features). Each round's slice is drawn afresh from those rows by
:class:`EvidencePool`, keyed by a 256-bit secret the aggregator draws from
:mod:`secrets`: a participant who has read this code and knows every seed of the
federation still cannot tell which rows of the next round are evaluated, so
being right on a guessed slice buys nothing on the rows that count
(docs/learning.md, "A slice nobody can predict"). The slice is fixed in the
round's release plan before any upload and never reaches a participant.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import NoReturn, Protocol

from secure_fed.errors import FederationConfigInvalid
from secure_fed.learning.data import TaskData
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = ["EvidencePool", "EvidenceSource"]

_log = logging.getLogger(__name__)

#: Domain of the slice key's keyed hash (one per draw, never reused elsewhere).
_DOMAIN = b"secure-fed/evidence-slice/1"
#: Domain of the key a predictable (``--reproducible``) run derives from its seed.
_SEEDED = b"secure-fed/evidence-slice/insecure-seeded/1"
_KEY_BYTES = 32


class EvidenceSource(Protocol):
    """Where a round engine takes each round's labeled slice from."""

    @property
    def size(self) -> int:
        """Rows in every round's slice."""
        ...

    def for_round(self, round_id: int) -> EvidenceSlice:
        """Return round ``round_id``'s slice (the same on every call)."""
        ...


class EvidencePool:
    """Labeled public rows and the secret key that draws each round's slice from them.

    Round ``r``'s slice is the ``size`` rows with the smallest keyed BLAKE2b of
    ``(r, row)``: a fresh, uniformly random subset each round, the same after an
    aggregator restart as long as the key is kept, and unpredictable to anyone
    without the key. Construct with :meth:`from_task`; the key is never printed
    or pickled.

    Parameters
    ----------
    rows, labels
        The public rows whose labels the servers hold, and those labels.
    size
        Rows per round's slice (at most ``len(rows)``).
    key
        32 secret bytes.
    predictable
        True only for a key derived from a seed (:meth:`insecure_from_seed`).

    Raises
    ------
    FederationConfigInvalid
        If the rows, labels, size or key are inconsistent.
    """

    def __init__(
        self,
        *,
        rows: tuple[int, ...],
        labels: tuple[int, ...],
        size: int,
        key: bytes,
        predictable: bool = False,
    ) -> None:
        if len(rows) != len(labels) or len(set(rows)) != len(rows):
            raise FederationConfigInvalid("evidence pool: one label per distinct row")
        if not 1 <= size <= len(rows):
            raise FederationConfigInvalid(
                f"evidence pool: size must be in [1, {len(rows)}], got {size!r}"
            )
        if not isinstance(key, bytes) or len(key) != _KEY_BYTES:
            raise FederationConfigInvalid(f"evidence pool: the key must be {_KEY_BYTES} bytes")
        self.rows, self.labels, self._size = rows, labels, size
        self.predictable = predictable
        self._key = key
        self._drawn: dict[int, EvidenceSlice] = {}

    @classmethod
    def from_task(
        cls, task: TaskData, *, rows: int, key: bytes | None = None
    ) -> EvidencePool | None:
        """Return the pool of ``task``'s labeled public rows, ``rows`` per round (None: no slice).

        ``key`` defaults to 32 fresh bytes from :mod:`secrets`. None when ``rows``
        is 0 or the task keeps no public labels (one table per participant).

        Raises
        ------
        FederationConfigInvalid
            If ``rows`` is not an integer >= 0.
        """
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise FederationConfigInvalid(f"evidence_rows must be an integer >= 0, got {rows!r}")
        labels = task.public_y
        if rows == 0 or labels is None or len(labels) == 0:
            return None
        secret = secrets.token_bytes(_KEY_BYTES) if key is None else key
        return cls(
            rows=tuple(range(len(labels))),
            labels=tuple(int(y) for y in labels),
            size=min(rows, len(labels)),
            key=secret,
        )

    @classmethod
    def insecure_from_seed(cls, task: TaskData, *, rows: int, seed: int) -> EvidencePool | None:
        """Return :meth:`from_task` with a key derived from ``seed``: PREDICTABLE.

        For reproducible runs only (``--reproducible``): anyone who knows the seed
        draws the same slices, so a participant can answer them and nothing else.
        """
        key = hashlib.blake2b(_SEEDED + str(int(seed)).encode(), digest_size=_KEY_BYTES).digest()
        pool = cls.from_task(task, rows=rows, key=key)
        if pool is not None:
            pool.predictable = True
        return pool

    @property
    def size(self) -> int:
        """Rows in every round's slice."""
        return self._size

    def for_round(self, round_id: int) -> EvidenceSlice:
        """Return round ``round_id``'s slice: rows in increasing order, with their labels."""
        if round_id not in self._drawn:
            prefix = _DOMAIN + int(round_id).to_bytes(8, "big", signed=True)

            def rank(i: int) -> bytes:
                row = self.rows[i].to_bytes(8, "big")
                return hashlib.blake2b(prefix + row, key=self._key, digest_size=16).digest()

            chosen = sorted(sorted(range(len(self.rows)), key=rank)[: self._size])
            self._drawn[round_id] = EvidenceSlice(
                rows=tuple(self.rows[i] for i in chosen),
                labels=tuple(self.labels[i] for i in chosen),
            )
        return self._drawn[round_id]

    def __repr__(self) -> str:
        """Name the pool's sizes, never its key."""
        kind = "predictable" if self.predictable else "secret-keyed"
        return f"EvidencePool({len(self.rows)} labeled rows, {self._size} per round, {kind})"

    def __reduce__(self) -> NoReturn:
        """Refuse pickling: the key stays in this process."""
        raise TypeError("EvidencePool holds a secret key and cannot be pickled")

"""The labeled slice of the public set that the evidence of correctness is measured on.

The weights reward being right (:mod:`secure_fed.federation.weighting`): the
servers need a few public rows whose labels they know. The built-in tasks have an
unlabeled public set, so :func:`carve_evidence` moves ``rows`` labeled rows out
of the private pool (before it is divided among participants: no participant
trains on them) into the public set, at seeded positions among the unlabeled
rows. Participants predict on them like on every public row and cannot tell
them apart; the servers keep the positions and labels
(:class:`~secure_fed.secure.scoring.evidence.EvidenceSlice`). The slice is never
taken from a participant's own table (that would publish its rows): a task
given as one table per participant gets no slice unless it brings one.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from secure_fed.errors import FederationConfigInvalid
from secure_fed.learning.data import TaskData
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = ["MAX_POOL_FRACTION", "carve_evidence"]

_log = logging.getLogger(__name__)

#: At most this fraction of the private pool goes into the labeled slice.
MAX_POOL_FRACTION = 0.1


def carve_evidence(
    task: TaskData, *, rows: int, seed: int
) -> tuple[TaskData, EvidenceSlice | None]:
    """Move up to ``rows`` labeled private rows into the public set; return both.

    At most :data:`MAX_POOL_FRACTION` of the pool is taken. ``rows == 0``, or a
    task made of per-participant tables, returns the task unchanged and None.

    Raises
    ------
    FederationConfigInvalid
        If ``rows`` is negative.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise FederationConfigInvalid(f"evidence_rows must be an integer >= 0, got {rows!r}")
    count = min(rows, int(MAX_POOL_FRACTION * len(task.private_y)))
    if count == 0 or task.parts is not None:
        return task, None
    rng = np.random.default_rng([seed, 0x5E1])
    taken = rng.choice(len(task.private_y), size=count, replace=False)
    keep = np.setdiff1d(np.arange(len(task.private_y)), taken)
    public_x = np.concatenate([task.public_x, task.private_x[taken]])
    order = rng.permutation(len(public_x))  # labeled rows land among the unlabeled ones
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    slots = position[len(task.public_x) :]
    labels = task.private_y[taken]
    by_row = np.argsort(slots)
    carved = replace(
        task,
        public_x=public_x[order],
        private_x=task.private_x[keep],
        private_y=task.private_y[keep],
    )
    _log.info("labeled public slice: %d rows moved from the private pool", count)
    return carved, EvidenceSlice(
        rows=tuple(int(r) for r in slots[by_row]),
        labels=tuple(int(y) for y in labels[by_row]),
    )

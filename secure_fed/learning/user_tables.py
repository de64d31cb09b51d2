"""Tasks from a user's own tables: one table split among participants, or one table each.

Two ways in (``secure-fed demo --data`` and ``--participant``, ``docs/learning.md``,
section 2):

* :func:`task_from_table`: one CSV/Parquet table is split exactly as a built-in
  task (:func:`secure_fed.learning.data.load_task`): a permutation seeded by
  ``seed`` gives 20% public rows (labels dropped), 20% test rows and 60%
  private rows, which the federation then divides among participants by
  Dirichlet label skew (Hsu, Qi and Brown 2019).
* :func:`task_from_participant_tables`: one table per participant, kept as the
  participant's own (no re-split among participants). From each table, a
  permutation seeded by ``seed + position`` holds out 20% of its rows for the
  public set (labels dropped) and 20% for the test set; the other 60% are that
  participant's private rows. The public set is the union of the held-out
  public rows, the test set the union of the held-out test rows, so both
  follow the federation's overall distribution.

Features are standardised with the public rows' mean and standard deviation
only; labels (integers or strings) are numbered jointly over all tables, so a
participant without some class keeps the federation's numbering. Bad tables
are refused with a typed error naming the file (see the ``Raises`` sections).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.errors import SingleClassData, TableColumnsMismatch, TooFewRows
from secure_fed.learning.data import TaskData, assemble_task
from secure_fed.learning.tabular import frame_to_arrays, read_table

__all__ = [
    "MIN_PRIVATE_ROWS",
    "PUBLIC_FRACTION",
    "TEST_FRACTION",
    "task_from_participant_tables",
    "task_from_table",
]

logger = logging.getLogger(__name__)

#: Private rows every participant keeps at least (the federation's Dirichlet minimum).
MIN_PRIVATE_ROWS = 16
#: Fractions of a table's rows held out for the public set and the test set.
PUBLIC_FRACTION, TEST_FRACTION = 0.2, 0.2


def _split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_pub, n_test = int(round(n * PUBLIC_FRACTION)), int(round(n * TEST_FRACTION))
    return order[:n_pub], order[n_pub : n_pub + n_test], order[n_pub + n_test :]


def _rows_needed(private_rows: int) -> int:
    """Smallest table size whose split keeps ``private_rows`` private and one row elsewhere."""
    n = private_rows
    while True:
        pub, test, priv = (len(part) for part in _split(n, 0))
        if priv >= private_rows and pub >= 1 and test >= 1:
            return n
        n += 1


def _check_classes(y: np.ndarray, source: str) -> None:
    if len(np.unique(y)) < 2:
        raise SingleClassData(
            f"{source}: every row has label {int(y[0])}; at least two classes are needed"
        )


def task_from_table(
    path: str | Path,
    *,
    label_column: str,
    participants: int,
    seed: int,
    id_column: str | None = None,
    drop_columns: Sequence[str] = (),
) -> TaskData:
    """Load one table to be split among ``participants`` (20% public, 20% test, 60% private).

    Parameters
    ----------
    path
        ``.csv`` or ``.parquet`` / ``.pq`` file.
    label_column
        Name of the label column; every other column is a numeric feature.
    participants
        How many participants will share the private rows (each needs
        :data:`MIN_PRIVATE_ROWS`).
    seed
        Seed of the split permutation.
    id_column, drop_columns
        Columns that are not features: row identifiers (distinct) and any others
        (see :func:`secure_fed.learning.tabular.load_tabular`).

    Returns
    -------
    TaskData
        Named after the file's stem; ``parts`` is ``None`` (the federation splits).

    Raises
    ------
    TabularDataInvalid, EmptyData, LabelColumnMissing, NonNumericData
        The file cannot be read or its content is not a numeric table with labels.
    SingleClassData
        All labels are equal.
    TooFewRows
        The private part cannot give every participant :data:`MIN_PRIVATE_ROWS` rows.
    """
    p = Path(path)
    x, y = frame_to_arrays(
        read_table(p), label_column, p.name, id_column=id_column, drop_columns=drop_columns
    )
    _check_classes(y, p.name)
    needed = _rows_needed(MIN_PRIVATE_ROWS * participants)
    if len(y) < needed:
        raise TooFewRows(
            f"{p.name} has {len(y)} rows; {participants} participants need at least {needed} "
            f"({MIN_PRIVATE_ROWS} private rows each after 20% public and 20% test rows)"
        )
    pub, test, priv = _split(len(y), seed)
    return assemble_task(p.stem, x, y, pub=pub, test=test, priv=priv, standardize=True)


def _read_all(
    paths: Sequence[Path], label_column: str, id_column: str | None, drop_columns: Sequence[str]
) -> list[Any]:
    """Read and check every table; the columns must be those of the first table."""
    frames: list[Any] = []
    for p in paths:
        frame = read_table(p)
        # typed errors naming this file; ids must be distinct within each table
        frame_to_arrays(frame, label_column, p.name, id_column=id_column, drop_columns=drop_columns)
        if frames:
            first, here = list(frames[0].columns), list(frame.columns)
            missing = [c for c in first if c not in here]
            extra = [c for c in here if c not in first]
            if missing or extra:
                raise TableColumnsMismatch(
                    f"{p.name} does not have the columns of {paths[0].name}: missing "
                    f"{missing or 'none'}, extra {extra or 'none'}"
                )
            frame = frame[first]
        needed = _rows_needed(MIN_PRIVATE_ROWS)
        if len(frame) < needed:
            raise TooFewRows(
                f"{p.name} has {len(frame)} rows; a participant's table needs at least "
                f"{needed} ({MIN_PRIVATE_ROWS} private rows after 20% public and 20% test rows)"
            )
        frames.append(frame)
    return frames


def task_from_participant_tables(
    paths: Sequence[str | Path],
    *,
    label_column: str,
    seed: int,
    id_column: str | None = None,
    drop_columns: Sequence[str] = (),
) -> TaskData:
    """Load one table per participant (no re-split); hold out public and test rows from each.

    Parameters
    ----------
    paths
        The participants' tables, in participant order (CSV or Parquet, same columns).
    label_column
        Name of the label column in every table.
    seed
        Table ``i`` is permuted with seed ``seed + i`` before its 20% public and
        20% test rows are held out.
    id_column, drop_columns
        Columns that are not features, as in :func:`task_from_table` (ids must be
        distinct within each table; two participants may use the same id).

    Returns
    -------
    TaskData
        ``parts[i]`` holds the private rows of table ``i``; named ``tables``.

    Raises
    ------
    TabularDataInvalid, EmptyData, LabelColumnMissing, NonNumericData
        A file cannot be read or is not a numeric table with labels (named).
    TableColumnsMismatch
        A table's columns differ from the first table's.
    TooFewRows
        A table cannot keep :data:`MIN_PRIVATE_ROWS` private rows.
    SingleClassData
        All tables together hold one class only.
    """
    import pandas as pd

    files = [Path(p) for p in paths]
    frames = _read_all(files, label_column, id_column, drop_columns)
    not_features = [*([id_column] if id_column is not None else []), *drop_columns]
    x, y = frame_to_arrays(
        pd.concat(frames, ignore_index=True),
        label_column,
        "the participants' tables",
        drop_columns=not_features,
    )
    _check_classes(y, "the participants' tables together")
    pubs, tests, privs, parts = [], [], [], []
    offset = start = 0
    for i, frame in enumerate(frames):
        pub, test, priv = _split(len(frame), seed + i)
        pubs.append(pub + offset)
        tests.append(test + offset)
        privs.append(np.sort(priv) + offset)
        parts.append(np.arange(start, start + len(priv), dtype=np.int64))
        offset, start = offset + len(frame), start + len(priv)
    logger.info("%d participant tables, %d rows in all", len(frames), offset)
    return assemble_task(
        "tables",
        x,
        y,
        pub=np.concatenate(pubs),
        test=np.concatenate(tests),
        priv=np.concatenate(privs),
        standardize=True,
        parts=tuple(parts),
    )

"""Bring-your-own data: CSV / Parquet tables and torch ``Dataset`` objects.

A participant that does not use a built-in task (:mod:`secure_fed.learning.data`)
loads its private rows here. Every loader returns ``float32`` features and
``int64`` class labels, and refuses bad input with a typed error naming what is
wrong (missing label column, non-numeric features, NaN, fractional labels...).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from secure_fed.errors import (
    EmptyData,
    LabelColumnMissing,
    NonNumericData,
    TabularDataInvalid,
)

if TYPE_CHECKING:
    import torch

__all__ = ["frame_to_arrays", "from_torch_dataset", "load_tabular", "read_table"]


def load_tabular(path: str | Path, *, label_column: str) -> tuple[np.ndarray, np.ndarray]:
    """Read a participant's table (CSV or Parquet) into features and labels.

    Parameters
    ----------
    path
        ``.csv`` or ``.parquet`` / ``.pq`` file.
    label_column
        Name of the column holding class labels: non-negative integers (kept
        as class ids, so a participant missing a class keeps the federation's
        numbering) or strings (mapped to ``0..C-1`` in sorted order of the
        labels present; prefer integers when participants see different classes).

    Returns
    -------
    tuple of numpy.ndarray
        ``float32 [N, F]`` features (every other column) and ``int64 [N]`` labels.

    Raises
    ------
    TabularDataInvalid
        Unknown extension, missing or unreadable file.
    EmptyData
        No rows, or no feature columns.
    LabelColumnMissing
        ``label_column`` is absent (the message lists the columns).
    NonNumericData
        Non-numeric features (named), missing/infinite values, fractional labels.
    """
    p = Path(path)
    return frame_to_arrays(read_table(p), label_column, p.name)


def read_table(path: str | Path) -> Any:
    """Read a CSV or Parquet file into a pandas ``DataFrame`` (no checks of its content).

    Parameters
    ----------
    path
        ``.csv`` or ``.parquet`` / ``.pq`` file (Parquet is read by pyarrow).

    Returns
    -------
    pandas.DataFrame
        The table as read.

    Raises
    ------
    TabularDataInvalid
        Unknown extension, missing or unreadable file.
    EmptyData
        The file is empty or holds no columns.
    """
    import pandas as pd

    p = Path(path)
    readers: dict[str, Callable[[Path], Any]] = {
        ".csv": pd.read_csv,
        ".parquet": pd.read_parquet,
        ".pq": pd.read_parquet,
    }
    reader = readers.get(p.suffix.lower())
    if reader is None:
        raise TabularDataInvalid(
            f"unsupported file extension {p.suffix!r} for {p.name}; use one of "
            f"{', '.join(sorted(readers))}"
        )
    if not p.is_file():
        raise TabularDataInvalid(f"data file {str(p)!r} does not exist")
    if p.stat().st_size == 0:
        raise EmptyData(f"data file {p.name} is empty")
    try:
        return reader(p)
    except pd.errors.EmptyDataError as exc:
        raise EmptyData(f"data file {p.name} holds no columns or rows") from exc
    except (ValueError, OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise TabularDataInvalid(f"cannot read {p.name}: {type(exc).__name__}: {exc}") from exc


def frame_to_arrays(frame: Any, label_column: str, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Check a ``DataFrame`` and split it into ``float32`` features and ``int64`` labels.

    Parameters
    ----------
    frame
        The table (every column but ``label_column`` is a feature).
    label_column
        Name of the label column (see :func:`load_tabular`).
    source
        Name used in error messages (the file name).

    Returns
    -------
    tuple of numpy.ndarray
        ``float32 [N, F]`` features and ``int64 [N]`` labels.

    Raises
    ------
    LabelColumnMissing, EmptyData, NonNumericData
        As :func:`load_tabular`.
    """
    import pandas as pd

    if label_column not in frame.columns:
        raise LabelColumnMissing(
            f"label column {label_column!r} not in {source}; columns present: "
            f"{', '.join(map(str, frame.columns))}"
        )
    if len(frame) == 0:
        raise EmptyData(f"{source} has a header but no rows")
    features = frame.drop(columns=[label_column])
    if features.shape[1] == 0:
        raise EmptyData(f"{source} has no feature columns besides {label_column!r}")
    bad = [str(c) for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    bad += [str(c) for c in features.columns if pd.api.types.is_bool_dtype(features[c])]
    if bad:
        raise NonNumericData(f"non-numeric feature columns in {source}: {', '.join(bad)}")
    x = features.to_numpy(dtype=np.float64)
    if not np.isfinite(x).all():
        raise NonNumericData(f"{source} has missing (NaN) or infinite feature values")
    return x.astype(np.float32), _encode_labels(frame[label_column].to_numpy(), source)


def _encode_labels(raw: np.ndarray, source: str) -> np.ndarray:
    """Keep integer class ids as they are; map string labels to their sorted order."""
    if raw.dtype.kind in "OUS" and all(isinstance(v, str) for v in raw):
        _, encoded = np.unique(raw.astype(str), return_inverse=True)
        return encoded.astype(np.int64)
    if raw.dtype.kind not in "iuf":
        raise NonNumericData(
            f"labels in {source} must be integers or strings, got dtype {raw.dtype}"
        )
    if not np.isfinite(raw).all() or not np.all(raw == np.round(raw)) or (raw < 0).any():
        raise NonNumericData(f"labels in {source} must be non-negative whole numbers or strings")
    return raw.astype(np.int64)


def from_torch_dataset(ds: torch.utils.data.Dataset[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Materialise a map-style torch ``Dataset`` of ``(features, label)`` pairs.

    Parameters
    ----------
    ds
        Dataset with ``__len__`` and ``__getitem__`` returning ``(x, y)``.

    Returns
    -------
    tuple of numpy.ndarray
        ``float32 [N, *shape]`` features and ``int64 [N]`` labels.

    Raises
    ------
    EmptyData
        The dataset has no items.
    TabularDataInvalid
        Items are not ``(features, label)`` pairs of consistent shape.
    NonNumericData
        Non-finite features or non-integer labels.
    """
    import torch

    n = len(ds)  # type: ignore[arg-type]
    if n == 0:
        raise EmptyData("the torch dataset has no items")
    xs, ys = [], []
    for i in range(n):
        item = ds[i]
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TabularDataInvalid(f"item {i} is not a (features, label) pair")
        xs.append(np.asarray(torch.as_tensor(item[0]), dtype=np.float32))
        ys.append(np.asarray(torch.as_tensor(item[1])).reshape(-1))
    if len({a.shape for a in xs}) != 1 or any(y.size != 1 for y in ys):
        raise TabularDataInvalid("items have features of different shapes or non-scalar labels")
    x = np.stack(xs)
    if not np.isfinite(x).all():
        raise NonNumericData("the torch dataset has missing (NaN) or infinite features")
    return x, _encode_labels(np.concatenate(ys), "the torch dataset")

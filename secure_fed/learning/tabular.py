"""Bring-your-own data: CSV / Parquet tables and torch ``Dataset`` objects.

A participant that does not use a built-in task (:mod:`secure_fed.learning.data`)
loads its private rows here. Every loader returns ``float32`` features and
``int64`` class labels, and refuses bad input with a typed error naming what is
wrong (missing label column, non-numeric features, NaN, fractional labels...).
A bad value is named by its column and the first row holding one (row 1 is the
first data row, the header not counted; in a CSV file that is line 2). A CSV
file's delimiter (``,``, ``;``, tab or ``|``) is sniffed from its first lines.
"""

from __future__ import annotations

import csv
import difflib
from collections.abc import Callable, Sequence
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

__all__ = [
    "CSV_DELIMITERS",
    "frame_to_arrays",
    "from_torch_dataset",
    "load_tabular",
    "read_table",
    "sniff_delimiter",
]


#: Delimiters a CSV file may use (sniffed from its first lines; ``,`` when unclear).
CSV_DELIMITERS = ",;\t|"
_SNIFF_BYTES = 64 << 10


def load_tabular(
    path: str | Path,
    *,
    label_column: str,
    id_column: str | None = None,
    drop_columns: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray]:
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
    id_column
        A column of row identifiers (patient or account numbers): not a feature;
        its values must be distinct (a repeated id would put the same record in
        two of the public, test and private parts).
    drop_columns
        Columns that are not features either (free text, dates, leakage).

    Returns
    -------
    tuple of numpy.ndarray
        ``float32 [N, F]`` features (every other column) and ``int64 [N]`` labels.

    Raises
    ------
    TabularDataInvalid
        Unknown extension, missing or unreadable file; an ``id_column`` or
        ``drop_columns`` name that is not a column; a repeated id.
    EmptyData
        No rows, or no feature columns.
    LabelColumnMissing
        ``label_column`` is absent (the message lists the columns and suggests
        the closest name).
    NonNumericData
        Non-numeric features, missing (empty, ``NaN``, ``n/a``...) or infinite
        values, fractional labels; naming the column and the first bad row.
    """
    p = Path(path)
    return frame_to_arrays(
        read_table(p), label_column, p.name, id_column=id_column, drop_columns=drop_columns
    )


def read_table(path: str | Path) -> Any:
    """Read a CSV or Parquet file into a pandas ``DataFrame`` (no checks of its content).

    Parameters
    ----------
    path
        ``.csv`` or ``.parquet`` / ``.pq`` file (Parquet is read by pyarrow). A CSV
        file's delimiter is sniffed (:data:`CSV_DELIMITERS`), so ``;``-separated
        exports read as they are; decimal commas are not converted.

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
        ".csv": lambda f: pd.read_csv(f, sep=sniff_delimiter(f)),
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


def sniff_delimiter(path: Path) -> str:
    """Return the delimiter of a CSV file, sniffed from its first 64 KiB (``,`` if unclear).

    Only :data:`CSV_DELIMITERS` are considered, and the header line must split into
    more than one column with the delimiter found; a one-column file reads as ``,``.
    """
    with path.open("r", encoding="utf-8", errors="replace", newline="") as handle:
        sample = handle.read(_SNIFF_BYTES)
    lines = sample.splitlines()
    if len(sample) == _SNIFF_BYTES and len(lines) > 1:
        sample = "\n".join(lines[:-1])  # the last line may be cut
    try:
        found = csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:
        return ","
    header = lines[0] if lines else ""
    return found if found in CSV_DELIMITERS and found in header else ","


def frame_to_arrays(
    frame: Any,
    label_column: str,
    source: str,
    *,
    id_column: str | None = None,
    drop_columns: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Check a ``DataFrame`` and split it into ``float32`` features and ``int64`` labels.

    Parameters
    ----------
    frame
        The table (every column but ``label_column``, ``id_column`` and
        ``drop_columns`` is a feature).
    label_column
        Name of the label column (see :func:`load_tabular`).
    source
        Name used in error messages (the file name).
    id_column, drop_columns
        Columns that are not features (see :func:`load_tabular`).

    Returns
    -------
    tuple of numpy.ndarray
        ``float32 [N, F]`` features and ``int64 [N]`` labels.

    Raises
    ------
    LabelColumnMissing, TabularDataInvalid, EmptyData, NonNumericData
        As :func:`load_tabular`.
    """
    import pandas as pd

    columns = [str(c) for c in frame.columns]
    if label_column not in frame.columns:
        raise LabelColumnMissing(
            f"label column {label_column!r} not in {source}{_suggest(label_column, columns)}; "
            f"columns present: {', '.join(columns)}"
        )
    named = [("--id-column", id_column)] if id_column is not None else []
    named += [("--drop-columns", c) for c in drop_columns]
    for option, name in named:
        if name not in frame.columns:
            raise TabularDataInvalid(
                f"{option} {name!r} is not a column of {source}{_suggest(name, columns)}; "
                f"columns present: {', '.join(columns)}"
            )
        if name == label_column:
            raise TabularDataInvalid(f"{option} {name!r} is the label column of {source}")
    if len(frame) == 0:
        raise EmptyData(f"{source} has a header but no rows")
    if id_column is not None:
        _check_ids(frame[id_column], id_column, source)
    excluded = list(dict.fromkeys([label_column, *(name for _, name in named)]))
    features = frame.drop(columns=excluded)
    if features.shape[1] == 0:
        raise EmptyData(f"{source} has no feature columns besides {', '.join(map(repr, excluded))}")
    bad = [str(c) for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    bad += [str(c) for c in features.columns if pd.api.types.is_bool_dtype(features[c])]
    if bad:
        raise NonNumericData(
            f"non-numeric feature columns in {source}: {', '.join(bad)}; "
            f"{_first_non_numeric(features[bad[0]], bad[0], source)}; leave columns that are "
            "not features out (--drop-columns, or --id-column for row identifiers)"
        )
    for column in features.columns:
        values = features[column].to_numpy(dtype=np.float64)
        finite = np.isfinite(values)
        if not finite.all():
            first = int(np.flatnonzero(~finite)[0])
            what = (
                "a missing value (empty, NaN, n/a, NA...)"
                if np.isnan(values[first])
                else ("an infinite value")
            )
            raise NonNumericData(
                f"column {str(column)!r} of {source} has {what} at {_row(first, source)} "
                f"({int((~finite).sum())} row(s) in all); fill or remove those rows, or leave "
                "the column out (--drop-columns)"
            )
    x = features.to_numpy(dtype=np.float64)
    raw = frame[label_column]
    missing = raw.isna().to_numpy()
    if missing.any():
        first = int(np.flatnonzero(missing)[0])
        raise NonNumericData(
            f"label column {label_column!r} of {source} has a missing value at "
            f"{_row(first, source)} ({int(missing.sum())} row(s) in all); every row needs a label"
        )
    return x.astype(np.float32), _encode_labels(raw.to_numpy(), source)


def _suggest(name: str, columns: Sequence[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest column name (case first), else ``""``."""
    same_case = [c for c in columns if c.casefold() == name.casefold()]
    close = same_case or difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _row(position: int, source: str) -> str:
    """Name the row at 0-based ``position``: ``data row 3`` (``, line 4`` in a CSV file)."""
    row = f"data row {position + 1}"
    return f"{row}, line {position + 2}" if source.lower().endswith(".csv") else row


def _first_non_numeric(column: Any, name: str, source: str) -> str:
    import pandas as pd

    if pd.api.types.is_bool_dtype(column):
        return f"column {name!r} holds true/false values; write them as 1/0"
    parsed = pd.to_numeric(column, errors="coerce")
    bad = (parsed.isna() & column.notna()).to_numpy()
    if not bad.any():
        return f"column {name!r} is not numeric"
    first = int(np.flatnonzero(bad)[0])
    return f"column {name!r} holds {str(column.iloc[first])[:40]!r} at {_row(first, source)}"


def _check_ids(ids: Any, name: str, source: str) -> None:
    missing = ids.isna().to_numpy()
    if missing.any():
        first = int(np.flatnonzero(missing)[0])
        raise TabularDataInvalid(
            f"id column {name!r} of {source} has a missing id at {_row(first, source)}"
        )
    repeated = ids.duplicated(keep=False).to_numpy()
    if repeated.any():
        rows = np.flatnonzero(ids.to_numpy() == ids.to_numpy()[np.flatnonzero(repeated)[0]])
        raise TabularDataInvalid(
            f"id column {name!r} of {source} repeats {str(ids.iloc[rows[0]])[:40]!r} at "
            f"{_row(int(rows[0]), source)} and {_row(int(rows[1]), source)}: a record may "
            "appear once (it would otherwise land in two of the public, test and private parts)"
        )


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

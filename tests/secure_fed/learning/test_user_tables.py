"""A user's own tables: one table split among participants, or one table each.

Every bad table is refused with its typed error naming the file; the good ones
give the documented parts (20% public without labels, 20% test, 60% private).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from secure_fed.errors import (
    EmptyData,
    LabelColumnMissing,
    NonNumericData,
    SingleClassData,
    TableColumnsMismatch,
    TabularDataInvalid,
    TooFewRows,
)
from secure_fed.learning.user_tables import (
    MIN_PRIVATE_ROWS,
    task_from_participant_tables,
    task_from_table,
)


def _frame(rows: int, *, seed: int = 0, positive: float = 0.3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(rows, 3)), columns=["age", "income", "score"])
    frame["outcome"] = (rng.random(rows) < positive).astype(int)
    return frame


def _csv(tmp_path: Path, name: str, frame: pd.DataFrame) -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def test_one_table_is_split_20_20_60_and_standardised(tmp_path: Path) -> None:
    path = _csv(tmp_path, "cohort.csv", _frame(500))
    task = task_from_table(path, label_column="outcome", participants=4, seed=1)
    assert (len(task.public_x), len(task.test_y), len(task.private_y)) == (100, 100, 300)
    assert task.name == "cohort" and task.num_classes == 2 and task.input_shape == (3,)
    assert task.parts is None  # the federation splits the pool by Dirichlet skew
    np.testing.assert_allclose(task.public_x.mean(axis=0), 0.0, atol=1e-5)


def test_parquet_reads_like_csv(tmp_path: Path) -> None:
    frame = _frame(200)
    frame.to_parquet(tmp_path / "t.parquet")
    a = task_from_table(tmp_path / "t.parquet", label_column="outcome", participants=2, seed=0)
    b = task_from_table(
        _csv(tmp_path, "t.csv", frame), label_column="outcome", participants=2, seed=0
    )
    np.testing.assert_allclose(a.private_x, b.private_x, rtol=1e-6)
    np.testing.assert_array_equal(a.test_y, b.test_y)


def test_participant_tables_stay_whole_and_give_the_held_out_sets(tmp_path: Path) -> None:
    frames = [_frame(100, seed=1), _frame(50, seed=2, positive=0.0), _frame(80, seed=3)]
    paths = [_csv(tmp_path, f"p{k}.csv", f) for k, f in enumerate(frames)]
    task = task_from_participant_tables(paths, label_column="outcome", seed=7)
    assert task.parts is not None and [len(p) for p in task.parts] == [60, 30, 48]
    assert len(task.public_x) == 20 + 10 + 16 and len(task.test_y) == 20 + 10 + 16
    # participant 2 holds no positives and keeps it: no re-split, no label mixing
    assert task.private_y[task.parts[1]].sum() == 0
    # every private row of participant 0 comes from its own table (raw ages, unscaled)
    raw = frames[0]["age"].to_numpy()
    mean, std = _public_stats(task, frames)
    ages = task.private_x[task.parts[0], 0] * std + mean
    assert all(np.isclose(raw, a, atol=1e-4).any() for a in ages)


def _public_stats(task: object, frames: list[pd.DataFrame]) -> tuple[float, float]:
    """Recover the public standardisation of 'age' from the rows held out (seed 7 + i)."""
    held = []
    for i, frame in enumerate(frames):
        order = np.random.default_rng(7 + i).permutation(len(frame))
        held.append(frame["age"].to_numpy()[order[: int(round(len(frame) * 0.2))]])
    public = np.concatenate(held)
    return float(public.mean()), float(public.std())


def test_string_labels_are_numbered_jointly_over_tables(tmp_path: Path) -> None:
    a, b = _frame(60, seed=1), _frame(60, seed=2)
    a["outcome"] = np.where(a["outcome"] == 1, "sick", "well")
    b["outcome"] = "well"  # only one class here: label skew, allowed
    paths = [_csv(tmp_path, "a.csv", a), _csv(tmp_path, "b.csv", b)]
    task = task_from_participant_tables(paths, label_column="outcome", seed=0)
    assert task.parts is not None and set(task.private_y[task.parts[1]]) == {1}  # "well"


def test_missing_label_column(tmp_path: Path) -> None:
    path = _csv(tmp_path, "t.csv", _frame(200))
    with pytest.raises(LabelColumnMissing, match="'target' not in t.csv.*outcome"):
        task_from_table(path, label_column="target", participants=2, seed=0)


def test_non_numeric_feature_is_named(tmp_path: Path) -> None:
    frame = _frame(200)
    frame["city"] = "Paris"
    with pytest.raises(NonNumericData, match="city"):
        task_from_table(
            _csv(tmp_path, "t.csv", frame), label_column="outcome", participants=2, seed=0
        )


def test_one_class_only(tmp_path: Path) -> None:
    path = _csv(tmp_path, "t.csv", _frame(200, positive=0.0))
    with pytest.raises(SingleClassData, match="t.csv"):
        task_from_table(path, label_column="outcome", participants=2, seed=0)
    tables = [_csv(tmp_path, f"p{k}.csv", _frame(60, seed=k, positive=0.0)) for k in range(2)]
    with pytest.raises(SingleClassData, match="together"):
        task_from_participant_tables(tables, label_column="outcome", seed=0)


def test_too_few_rows(tmp_path: Path) -> None:
    path = _csv(tmp_path, "t.csv", _frame(100))
    with pytest.raises(TooFewRows, match=r"t.csv has 100 rows; 10 participants need at least"):
        task_from_table(path, label_column="outcome", participants=10, seed=0)
    task = task_from_table(path, label_column="outcome", participants=3, seed=0)
    assert len(task.private_y) == 60 >= 3 * MIN_PRIVATE_ROWS
    small = _csv(tmp_path, "small.csv", _frame(MIN_PRIVATE_ROWS + 5))
    with pytest.raises(TooFewRows, match="small.csv"):
        task_from_participant_tables(
            [_csv(tmp_path, "big.csv", _frame(100)), small], label_column="outcome", seed=0
        )


def test_mismatched_columns_across_participant_files(tmp_path: Path) -> None:
    other = _frame(60, seed=2).rename(columns={"income": "salary"})
    paths = [_csv(tmp_path, "a.csv", _frame(60)), _csv(tmp_path, "b.csv", other)]
    with pytest.raises(
        TableColumnsMismatch, match=r"b.csv .*missing \['income'\], extra \['salary'\]"
    ):
        task_from_participant_tables(paths, label_column="outcome", seed=0)


def test_reordered_columns_are_accepted(tmp_path: Path) -> None:
    b = _frame(60, seed=2)[["outcome", "score", "age", "income"]]
    paths = [_csv(tmp_path, "a.csv", _frame(60)), _csv(tmp_path, "b.csv", b)]
    task = task_from_participant_tables(paths, label_column="outcome", seed=0)
    assert task.input_shape == (3,)


@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        ("absent.csv", None, TabularDataInvalid),
        ("garbage.parquet", b"not a parquet file at all", TabularDataInvalid),
        ("binary.csv", b"\xff\xfe\x00\x81\x92" * 50, TabularDataInvalid),
        ("empty.csv", b"", EmptyData),
        ("table.xlsx", b"x", TabularDataInvalid),
    ],
)
def test_unreadable_files(tmp_path: Path, name: str, content: bytes | None, error: type) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(error, match=name.split(".")[0]):
        task_from_table(path, label_column="outcome", participants=2, seed=0)


def test_id_and_dropped_columns_are_left_out_of_one_table(tmp_path: Path) -> None:
    frame = _frame(200).assign(note="text")
    frame.insert(0, "patient", [f"p{i}" for i in range(200)])
    path = tmp_path / "t.csv"
    frame.to_csv(path, sep=";", index=False)  # a ;-separated export
    task = task_from_table(
        path,
        label_column="outcome",
        participants=2,
        seed=0,
        id_column="patient",
        drop_columns=["note"],
    )
    assert task.input_shape == (3,)
    plain = task_from_table(
        _csv(tmp_path, "plain.csv", _frame(200)), label_column="outcome", participants=2, seed=0
    )
    np.testing.assert_allclose(task.private_x, plain.private_x, rtol=1e-6)


def test_participant_tables_may_share_ids_but_not_repeat_one(tmp_path: Path) -> None:
    frames = [_frame(100, seed=1), _frame(80, seed=2)]
    for frame in frames:
        frame.insert(0, "record", range(len(frame)))  # both tables count from 0
    paths = [_csv(tmp_path, f"p{k}.csv", f) for k, f in enumerate(frames)]
    task = task_from_participant_tables(paths, label_column="outcome", seed=0, id_column="record")
    assert task.input_shape == (3,) and task.parts is not None
    frames[1].loc[5, "record"] = 7
    repeated = _csv(tmp_path, "p1.csv", frames[1])
    with pytest.raises(TabularDataInvalid, match="p1.csv repeats '7' at data row 6, line 7 and"):
        task_from_participant_tables(
            [paths[0], repeated], label_column="outcome", seed=0, id_column="record"
        )

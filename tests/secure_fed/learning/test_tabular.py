"""Bring-your-own data: CSV / Parquet tables and torch datasets, and their typed errors."""

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import TensorDataset

from secure_fed.errors import EmptyData, LabelColumnMissing, NonNumericData, TabularDataInvalid
from secure_fed.learning.tabular import from_torch_dataset, load_tabular


def _frame():
    return pd.DataFrame({"age": [50, 61, 33], "bmi": [22.5, 30.1, 27.0], "y": [1, 0, 1]})


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".pq"])
def test_load_tabular_round_trip(tmp_path, suffix):
    path = tmp_path / f"data{suffix}"
    if suffix == ".csv":
        _frame().to_csv(path, index=False)
    else:
        _frame().to_parquet(path)
    x, y = load_tabular(path, label_column="y")
    assert x.dtype == np.float32 and x.shape == (3, 2)
    assert y.dtype == np.int64 and y.tolist() == [1, 0, 1]
    assert x[1].tolist() == pytest.approx([61, 30.1])


def test_integer_labels_keep_their_ids(tmp_path):
    path = tmp_path / "d.csv"
    pd.DataFrame({"f": [1.0, 2.0], "y": [3, 7]}).to_csv(path, index=False)
    assert load_tabular(path, label_column="y")[1].tolist() == [3, 7]


def test_string_labels_sorted(tmp_path):
    path = tmp_path / "d.csv"
    pd.DataFrame({"f": [1, 2, 3], "y": ["sick", "healthy", "sick"]}).to_csv(path, index=False)
    assert load_tabular(path, label_column="y")[1].tolist() == [1, 0, 1]


def test_missing_label_column_lists_columns(tmp_path):
    path = tmp_path / "d.csv"
    _frame().to_csv(path, index=False)
    with pytest.raises(LabelColumnMissing, match="columns present: age, bmi, y") as e:
        load_tabular(path, label_column="diagnosis")
    assert e.value.code == "LEARNING_LABEL_COLUMN_MISSING"
    assert isinstance(e.value, TabularDataInvalid)


def test_non_numeric_features_named(tmp_path):
    path = tmp_path / "d.parquet"
    frame = _frame().assign(city=["Wuhan", "Xi'an", "Hefei"])
    frame.to_parquet(path)
    with pytest.raises(NonNumericData, match="non-numeric feature columns in d.parquet: city") as e:
        load_tabular(path, label_column="y")
    assert e.value.code == "LEARNING_NON_NUMERIC_DATA"


@pytest.mark.parametrize(
    ("frame", "fragment"),
    [
        (pd.DataFrame({"a": [1.0, None], "y": [0, 1]}), "missing"),
        (pd.DataFrame({"a": [1.0, 2.0], "y": [0.5, 1.0]}), "whole numbers"),
        (pd.DataFrame({"a": [1.0, 2.0], "y": [-1, 1]}), "non-negative"),
        (pd.DataFrame({"a": [True, False], "y": [0, 1]}), "non-numeric"),
    ],
)
def test_bad_values(tmp_path, frame, fragment):
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    with pytest.raises(NonNumericData, match=fragment):
        load_tabular(path, label_column="y")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(EmptyData, match="empty") as e:
        load_tabular(path, label_column="y")
    assert e.value.code == "LEARNING_EMPTY_DATA"


def test_header_only(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("a,b,y\n")
    with pytest.raises(EmptyData, match="no rows"):
        load_tabular(path, label_column="y")


def test_only_label_column(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("y\n1\n0\n")
    with pytest.raises(EmptyData, match="no feature columns"):
        load_tabular(path, label_column="y")


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(TabularDataInvalid, match="unsupported file extension") as e:
        load_tabular(tmp_path / "d.xlsx", label_column="y")
    assert e.value.code == "LEARNING_TABULAR_INVALID"
    with pytest.raises(TabularDataInvalid, match="does not exist"):
        load_tabular(tmp_path / "absent.csv", label_column="y")


def test_corrupt_parquet(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TabularDataInvalid, match="cannot read bad.parquet"):
        load_tabular(path, label_column="y")


def test_from_torch_dataset():
    ds = TensorDataset(torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 9]))
    x, y = from_torch_dataset(ds)
    assert x.shape == (6, 1, 8, 8) and x.dtype == np.float32
    assert y.tolist() == [0, 1, 2, 3, 4, 9] and y.dtype == np.int64


def test_from_torch_dataset_errors():
    with pytest.raises(EmptyData, match="no items"):
        from_torch_dataset(TensorDataset(torch.zeros(0, 2), torch.zeros(0)))
    with pytest.raises(TabularDataInvalid, match="not a \\(features, label\\) pair"):
        from_torch_dataset(TensorDataset(torch.zeros(2, 2)))
    with pytest.raises(NonNumericData, match="NaN"):
        from_torch_dataset(TensorDataset(torch.full((2, 2), float("nan")), torch.tensor([0, 1])))
    with pytest.raises(TabularDataInvalid, match="non-scalar labels"):
        from_torch_dataset(TensorDataset(torch.zeros(2, 2), torch.zeros(2, 2)))


@pytest.mark.parametrize("sep", [";", "\t", "|", ","])
def test_the_csv_delimiter_is_sniffed(tmp_path, sep):
    path = tmp_path / "d.csv"
    _frame().to_csv(path, sep=sep, index=False)
    x, y = load_tabular(path, label_column="y")
    np.testing.assert_allclose(x, [[50, 22.5], [61, 30.1], [33, 27.0]], rtol=1e-6)
    assert y.tolist() == [1, 0, 1]


def test_a_semicolon_inside_quotes_does_not_fool_the_sniffer(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('age,note,y\n50,"a;b;c",1\n61,"d;e",0\n33,"f;g",1\n')
    x, _ = load_tabular(path, label_column="y", drop_columns=["note"])
    assert x[:, 0].tolist() == [50, 61, 33]


def test_a_one_column_csv_reads_with_commas(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("y\n1\n0\n")
    with pytest.raises(EmptyData, match="no feature columns"):
        load_tabular(path, label_column="y")


@pytest.mark.parametrize("missing", ["n/a", "NaN", "NA", "", "null"])
def test_a_missing_value_names_its_column_and_first_row(tmp_path, missing):
    path = tmp_path / "d.csv"
    path.write_text(f"age;bmi;y\n50;22.5;1\n61;30.1;0\n33;{missing};1\n40;;0\n")
    with pytest.raises(NonNumericData) as e:
        load_tabular(path, label_column="y")
    message = str(e.value)
    assert "column 'bmi' of d.csv has a missing value" in message
    assert "at data row 3, line 4 (2 row(s) in all)" in message
    assert e.value.code == "LEARNING_NON_NUMERIC_DATA"


def test_an_infinite_value_names_its_column_and_row_in_parquet(tmp_path):
    path = tmp_path / "d.parquet"
    pd.DataFrame({"a": [1.0, 2.0], "b": [0.0, np.inf], "y": [0, 1]}).to_parquet(path)
    with pytest.raises(
        NonNumericData,
        match=r"column 'b' of d.parquet has an infinite value "
        r"at data row 2 \(",
    ):
        load_tabular(path, label_column="y")


def test_a_missing_label_names_the_first_row(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("age,y\n1,0\n2,n/a\n3,1\n")
    with pytest.raises(
        NonNumericData,
        match=r"label column 'y' of d\.csv has a missing value "
        r"at data row 2, line 3",
    ):
        load_tabular(path, label_column="y")


def test_a_non_numeric_feature_names_its_first_bad_value(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("age,y\n50,1\nfifty,0\n33,1\n")
    with pytest.raises(NonNumericData, match=r"column 'age' holds 'fifty' at data row 2, line 3"):
        load_tabular(path, label_column="y")


@pytest.mark.parametrize(
    ("typed", "suggested"), [("lable", "label"), ("Label", "label"), ("labels", "label")]
)
def test_a_mistyped_label_column_gets_a_suggestion(tmp_path, typed, suggested):
    path = tmp_path / "d.csv"
    _frame().rename(columns={"y": "label"}).to_csv(path, index=False)
    with pytest.raises(LabelColumnMissing, match=f"did you mean '{suggested}'"):
        load_tabular(path, label_column=typed)


def test_no_suggestion_when_nothing_is_close(tmp_path):
    path = tmp_path / "d.csv"
    _frame().to_csv(path, index=False)
    with pytest.raises(LabelColumnMissing) as e:
        load_tabular(path, label_column="diagnosis")
    assert "did you mean" not in str(e.value)


def test_id_and_dropped_columns_are_not_features(tmp_path):
    path = tmp_path / "d.csv"
    frame = _frame().assign(patient=["p1", "p2", "p3"], note=["a", "b", "c"], leak=[1, 0, 1])
    frame.to_csv(path, index=False)
    x, y = load_tabular(path, label_column="y", id_column="patient", drop_columns=["note", "leak"])
    assert x.shape == (3, 2) and y.tolist() == [1, 0, 1]
    with pytest.raises(NonNumericData, match="--drop-columns"):
        load_tabular(path, label_column="y")  # without them: refused, naming the way out


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (
            {"id_column": "patiant"},
            "--id-column 'patiant' is not a column of d.csv (did you mean 'patient'?)",
        ),
        ({"drop_columns": ["nots"]}, "--drop-columns 'nots' is not a column of d.csv"),
        ({"id_column": "y"}, "--id-column 'y' is the label column"),
        (
            {"id_column": "dup"},
            "id column 'dup' of d.csv repeats 'x' at data row 1, line 2 and data row 3, line 4",
        ),
        ({"id_column": "gap"}, "id column 'gap' of d.csv has a missing id at data row 2"),
    ],
)
def test_bad_id_or_drop_columns_are_refused(tmp_path, kwargs, fragment):
    path = tmp_path / "d.csv"
    frame = _frame().assign(patient=["p1", "p2", "p3"], dup=["x", "z", "x"], gap=["a", None, "c"])
    frame.to_csv(path, index=False)
    other = {"drop_columns": ["patient", "dup", "gap"]}
    other["drop_columns"] = [c for c in other["drop_columns"] if c != kwargs.get("id_column")]
    other["drop_columns"] += kwargs.pop("drop_columns", [])
    with pytest.raises(TabularDataInvalid) as e:
        load_tabular(path, label_column="y", **other, **kwargs)
    assert fragment in str(e.value)
    assert e.value.code == "LEARNING_TABULAR_INVALID"

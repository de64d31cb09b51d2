"""``secure-fed demo`` on a user's own tables, from the command line, in both forms.

Bad tables and bad options are refused before the learning stack loads (one
fresh interpreter reports whether torch was imported), with the typed
two-line error; good tables run a small plaintext federation whose rows carry
the user's participant ids and every metric (ROC AUC: the task is binary).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from api.cli import app

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

runner = CliRunner()


def _frame(rows: int, seed: int, positive: float = 0.2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4))
    frame = pd.DataFrame(x, columns=["age", "income", "debt", "score"])
    frame["default"] = ((x[:, 2] + rng.normal(0, 0.5, rows)) > 1.2 - positive).astype(int)
    return frame


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tables")
    _frame(300, 0).to_csv(d / "all.csv", index=False)
    _frame(90, 1).to_csv(d / "north.csv", index=False)
    _frame(70, 2).to_parquet(d / "south.parquet")
    _frame(80, 3, positive=-5.0).to_csv(d / "east.csv", index=False)  # no positives: skew
    _frame(300, 4).assign(region="north").to_csv(d / "text.csv", index=False)
    _frame(300, 5, positive=-9.0).to_csv(d / "oneclass.csv", index=False)
    _frame(40, 6).to_csv(d / "small.csv", index=False)
    _frame(90, 7).rename(columns={"debt": "loans"}).to_csv(d / "renamed.csv", index=False)
    (d / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    gaps = _frame(300, 8).astype({"debt": object})
    gaps.loc[[41, 77], "debt"] = "n/a"
    gaps.to_csv(d / "gaps.csv", index=False)
    ids = _frame(300, 9)
    ids.insert(0, "patient", [f"p{i:03d}" for i in range(300)])
    ids["note"] = "free text"
    ids.to_csv(d / "semi.csv", sep=";", index=False)  # a ;-separated export with an id column
    ids.assign(patient="p000").to_csv(d / "dupids.csv", sep=";", index=False)
    return d


def _run_json(args: list[str]) -> dict[str, object]:
    result = runner.invoke(app, ["demo", "--json", "--mode", "plaintext", "--rounds", "1", *args])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def _rows(data: dict[str, object]) -> list[dict[str, object]]:
    rounds = data["rounds"]
    assert isinstance(rounds, list)
    rows = rounds[-1]["rows"]
    assert isinstance(rows, list)
    return rows


@pytest.mark.slow
def test_one_table_split_among_chosen_ids_and_architectures(tables: Path, tmp_path: Path) -> None:
    data = _run_json(
        [
            "--data", str(tables / "all.csv"),
            "--label-column", "default",
            "--participant-ids", "alpha,beta,gamma",
            "--participants", "3",
            "--architectures", "mlp,logreg",
            "--out", str(tmp_path / "one"),
        ]
    )  # fmt: skip
    rows = _rows(data)
    assert [r["participant_id"] for r in rows] == ["alpha", "beta", "gamma"]
    assert [r["architecture"] for r in rows] == ["mlp", "logreg", "mlp"]
    for row in rows:
        for side in ("federated", "local"):
            for metric in ("accuracy", "balanced_accuracy", "macro_f1", "roc_auc"):
                value = row[f"{metric}_{side}"]
                assert isinstance(value, float) and 0 <= value <= 1, (metric, side)
    final = data["final_mean_metrics"]
    assert isinstance(final, dict) and set(final) >= {"balanced_accuracy", "roc_auc"}
    config = data["config"]
    assert isinstance(config, dict) and config["task"] == "all"
    assert "balanced accuracy" in (tmp_path / "one" / "report.html").read_text()


@pytest.mark.slow
def test_one_table_per_participant_kept_whole(tables: Path, tmp_path: Path) -> None:
    data = _run_json(
        [
            "--participant", f"north={tables / 'north.csv'}",
            "--participant", f"south={tables / 'south.parquet'}",
            "--participant", f"east={tables / 'east.csv'}",
            "--label-column", "default",
            "--architectures", "logreg",
            "--out", str(tmp_path / "each"),
        ]
    )  # fmt: skip
    assert [r["participant_id"] for r in _rows(data)] == ["north", "south", "east"]
    config = data["config"]
    assert isinstance(config, dict) and config["participants"] == 3
    budgets = data["budgets"]
    assert isinstance(budgets, dict) and set(budgets) == {"north", "south", "east"}


def test_table_output_shows_the_metrics(tables: Path, tmp_path: Path) -> None:
    args = ["demo", "--mode", "plaintext", "--rounds", "1", "--participants", "2"]
    args += ["--data", str(tables / "all.csv"), "--label-column", "default"]
    args += ["--architectures", "logreg", "--out", str(tmp_path / "t")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "participant" in line)
    assert "accuracy" in header  # one cell "local-only -> federated" per row
    # the other metrics' means in the caption (one column each in report.html)
    caption = result.stdout.split("mean honest, local-only -> federated: ", 1)[1]
    for metric in ("balanced acc", "macro F1", "ROC AUC"):
        assert metric in caption.split("\nterms:", 1)[0]
    assert "balanced accuracy local-only" in result.stdout


CASES = [
    (["--data", "{d}/all.csv"], "[FEDERATION_CONFIG_INVALID] label_column"),
    (["--label-column", "default"], "[FEDERATION_CONFIG_INVALID] label_column"),
    (
        ["--data", "{d}/all.csv", "--participant", "a={d}/north.csv", "--label-column", "default"],
        "either --data FILE",
    ),
    (["--data", "{d}/all.csv", "--label-column", "target"], "[LEARNING_LABEL_COLUMN_MISSING]"),
    (["--data", "{d}/text.csv", "--label-column", "default"], "[LEARNING_NON_NUMERIC_DATA]"),
    (["--data", "{d}/oneclass.csv", "--label-column", "default"], "[LEARNING_SINGLE_CLASS]"),
    (["--data", "{d}/small.csv", "--label-column", "default"], "[LEARNING_TOO_FEW_ROWS]"),
    (["--data", "{d}/absent.csv", "--label-column", "default"], "[LEARNING_TABULAR_INVALID]"),
    (["--data", "{d}/broken.parquet", "--label-column", "default"], "broken.parquet"),
    (
        ["--participant", "a={d}/north.csv", "--participant", "b={d}/renamed.csv"]
        + ["--label-column", "default"],
        "[LEARNING_TABLE_COLUMNS_MISMATCH]",
    ),
    (
        ["--participant", "a={d}/north.csv", "--participant", "a={d}/east.csv"]
        + ["--label-column", "default"],
        "participant ids must be distinct",
    ),
    (["--participant", "{d}/north.csv", "--label-column", "default"], "is not ID=FILE"),
    (["--participant-ids", "a,b,c"], "3 ids for 4 participants"),
    (["--participant-ids", "a b,c,d,e"], "[A-Za-z0-9._:@-]"),
    (["--architectures", "mlp,resnet"], "[FEDERATION_CONFIG_INVALID] architectures"),
    (
        ["--participant", "a={d}/north.csv", "--participant", "b={d}/east.csv"]
        + ["--participants", "3", "--label-column", "default"],
        "the number of --participant tables",
    ),
    (
        ["--data", "{d}/all.csv", "--label-column", "Default"],
        "[LEARNING_LABEL_COLUMN_MISSING] label column 'Default' not in all.csv (did you mean "
        "'default'?)",
    ),
    (
        ["--data", "{d}/all.csv", "--label-column", "defualt"],
        "(did you mean 'default'?)",
    ),
    (
        ["--data", "{d}/gaps.csv", "--label-column", "default"],
        "[LEARNING_NON_NUMERIC_DATA] column 'debt' of gaps.csv has a missing value (empty, NaN, "
        "n/a, NA...) at data row 42, line 43 (2 row(s) in all)",
    ),
    (
        ["--data", "{d}/semi.csv", "--label-column", "default"],
        "non-numeric feature columns in semi.csv: patient, note; column 'patient' holds 'p000'",
    ),
    (
        ["--data", "{d}/semi.csv", "--label-column", "default", "--id-column", "patient"],
        "[LEARNING_NON_NUMERIC_DATA] non-numeric feature columns in semi.csv: note;",
    ),
    (
        ["--data", "{d}/semi.csv", "--label-column", "default", "--id-column", "patients"]
        + ["--drop-columns", "note"],
        "[LEARNING_TABULAR_INVALID] --id-column 'patients' is not a column of semi.csv (did you "
        "mean 'patient'?)",
    ),
    (
        ["--data", "{d}/dupids.csv", "--label-column", "default", "--id-column", "patient"]
        + ["--drop-columns", "note"],
        "id column 'patient' of dupids.csv repeats 'p000'",
    ),
    (
        ["--data", "{d}/semi.csv", "--label-column", "default", "--drop-columns", "note,default"],
        "[FEDERATION_CONFIG_INVALID] label_column: 'default' is the label",
    ),
    (["--id-column", "patient"], "[FEDERATION_CONFIG_INVALID] id_column"),
]

SCRIPT = """
import json, sys
from typer.testing import CliRunner
from api.cli import app
out, cases = sys.argv[1], json.loads(sys.argv[2])
results = []
for k, extra in enumerate(cases):
    r = CliRunner().invoke(app, ["demo", "--out", f"{out}/d{k}", *extra])
    results.append([r.exit_code, r.stdout, r.stderr])
heavy = [m for m in ("torch", "opacus") if m in sys.modules]
print("RESULT" + json.dumps({"results": results, "heavy": heavy}))
"""


@pytest.fixture(scope="module")
def refused(tables: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("refused")
    cases = [[a.replace("{d}", str(tables)) for a in extra] for extra, _ in CASES]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout[done.stdout.index("RESULT") + len("RESULT") :])
    assert isinstance(data, dict)
    data["out"] = str(out)
    return data


def test_no_bad_table_imports_the_learning_stack(refused: dict[str, object]) -> None:
    assert refused["heavy"] == []


@pytest.mark.parametrize(("k", "case"), list(enumerate(CASES)))
def test_bad_table_or_option_fails_with_its_code(
    refused: dict[str, object], tables: Path, k: int, case: tuple[list[str], str]
) -> None:
    results = refused["results"]
    assert isinstance(results, list)
    status, stdout, stderr = results[k]
    assert status == 2, (case, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: [") and lines[1].startswith("hint: ")
    assert case[1] in lines[0], lines
    assert stdout == ""
    assert not (Path(str(refused["out"])) / f"d{k}").exists()  # nothing written


def test_a_semicolon_table_with_id_and_dropped_columns_runs_and_is_named(
    tables: Path, tmp_path: Path
) -> None:
    data = _run_json(
        [
            "--data", str(tables / "semi.csv"),
            "--label-column", "default",
            "--id-column", "patient",
            "--drop-columns", "note",
            "--participants", "2",
            "--architectures", "logreg",
            "--out", str(tmp_path / "semi"),
        ]
    )  # fmt: skip
    written = json.loads((tmp_path / "semi" / "results.json").read_text(encoding="utf-8"))
    for results in (data, written):
        config = results["config"]
        assert isinstance(config, dict)
        assert config["dataset"] is None and config["task"] == "semi"  # not "digits"
        assert config["id_column"] == "patient" and config["drop_columns"] == ["note"]
        source = results["data"]
        assert isinstance(source, dict) and source["kind"] == "table"
        assert source["label_column"] == "default" and source["id_column"] == "patient"
        [entry] = source["files"]
        assert entry["name"] == "semi.csv" and entry["path"] == str(tables / "semi.csv")
        digest = hashlib.sha256((tables / "semi.csv").read_bytes()).hexdigest()
        assert entry["sha256"] == digest and entry["bytes"] == (tables / "semi.csv").stat().st_size
    assert len(_rows(data)) == 2


def test_a_built_in_run_names_its_dataset() -> None:
    from secure_fed.demo import DemoConfig

    assert DemoConfig(dataset="digits").data_source() == {"kind": "built-in", "dataset": "digits"}


def test_participant_tables_are_named_with_their_participants(tables: Path) -> None:
    from secure_fed.demo import DemoConfig

    config = DemoConfig(
        participants=2,
        label_column="default",
        participant_tables=(("north", tables / "north.csv"), ("south", tables / "south.parquet")),
    )
    source = config.data_source()
    assert source["kind"] == "participant tables" and source["id_column"] is None
    files = source["files"]
    assert isinstance(files, list)
    assert [(f["participant"], f["name"]) for f in files] == [
        ("north", "north.csv"),
        ("south", "south.parquet"),
    ]
    digest = hashlib.sha256((tables / "south.parquet").read_bytes()).hexdigest()
    assert files[1]["sha256"] == digest

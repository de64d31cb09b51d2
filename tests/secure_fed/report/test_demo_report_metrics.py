"""report.html shows every metric: charts and per-round columns, ROC AUC only for binary tasks."""

from __future__ import annotations

from typing import Any

import pytest

from secure_fed.report.charts import has_values
from secure_fed.report.demo_report import render_demo_report


def _row(pid: str, auc: float | None) -> dict[str, Any]:
    return {
        "participant_id": pid,
        "architecture": "mlp",
        "attacker": False,
        "upload": "accepted",
        "score": 1.0,
        "decision": "keep",
        "factor": 1.0,
        "weight": 0.5,
        "epsilon_spent": 2.0,
        "accuracy_federated": 0.9,
        "accuracy_local": 0.8,
        "balanced_accuracy_federated": 0.612,
        "balanced_accuracy_local": 0.534,
        "macro_f1_federated": 0.71,
        "macro_f1_local": 0.65,
        "roc_auc_federated": auc,
        "roc_auc_local": None if auc is None else auc - 0.1,
    }


def _results(auc: float | None) -> dict[str, Any]:
    rounds = [
        {"round_id": r, "stage": "published", "reason": None, "rows": [_row("h-1", auc)]}
        for r in (1, 2)
    ]
    pair = {"federated": 0.612, "local_only": 0.534}
    return {
        "config": {"participants": 1, "rounds": 2, "dataset": "x", "task": "loans", "mode": "p"},
        "rounds": rounds,
        "final_mean_accuracy": {"federated": 0.9, "local_only": 0.8},
        "final_mean_metrics": {
            "accuracy": {"federated": 0.9, "local_only": 0.8},
            "balanced_accuracy": pair,
            "macro_f1": {"federated": 0.71, "local_only": 0.65},
            "roc_auc": {"federated": auc, "local_only": None if auc is None else auc - 0.1},
        },
        "privacy": {"secure_noise": True},
        "ledger": {},
    }


@pytest.mark.parametrize("auc", [0.8, None])
def test_metrics_in_charts_and_tables(auc: float | None) -> None:
    results = _results(auc)
    html = render_demo_report(results)
    assert 'alt="Test balanced accuracy (mean per-class recall)"' in html
    assert 'alt="Test macro F1"' in html
    assert "53.4% / 61.2%" in html  # balanced accuracy, local-only / federated
    assert "<code>loans</code>" in html  # the user's table, not the default dataset
    binary = auc is not None
    assert has_values(results["rounds"], "roc_auc") is binary
    assert ('alt="Test ROC AUC (binary task)"' in html) is binary
    assert ("0.700 / 0.800" in html) is binary
    assert ("<th>ROC AUC</th>" in html) is binary
    assert "80.0% / 90.0%" in html  # accuracy, local-only / federated

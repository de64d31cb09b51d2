"""``secure-fed demo --no-privacy-audit`` and ``--audit-canaries`` reach the configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app
from api.cli import demo as demo_cli
from secure_fed.demo_options import DemoConfig
from secure_fed.errors import FederationConfigInvalid


@pytest.mark.parametrize(
    ("flags", "canaries"),
    [([], 64), (["--audit-canaries", "128"], 128), (["--no-privacy-audit"], None)],
)
def test_flags_set_the_federation_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], canaries: int | None
) -> None:
    seen: list[DemoConfig] = []

    def capture(config: DemoConfig, **_: Any) -> None:
        seen.append(config)

    monkeypatch.setattr(demo_cli, "_run", capture)
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), *flags])
    assert result.exit_code == 0, result.output
    audit = seen[0].federation_config().privacy_audit
    assert (audit.canaries if audit is not None else None) == canaries
    if audit is not None and canaries is not None:
        assert (audit.per_side, audit.confidence) == (canaries // 4, 0.95)


def test_too_few_canaries_are_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(FederationConfigInvalid, match="audit_canaries"):
        DemoConfig(out=tmp_path / "d", audit_canaries=3).validate()

"""``secure-fed demo --no-logit-adjustment`` reaches the federation's configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app
from api.cli import demo as demo_cli
from secure_fed.demo_options import DemoConfig


@pytest.mark.parametrize(("flag", "expected"), [([], True), (["--no-logit-adjustment"], False)])
def test_flag_sets_the_federation_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: list[str], expected: bool
) -> None:
    seen: list[DemoConfig] = []

    def capture(config: DemoConfig, **_: Any) -> None:
        seen.append(config)

    monkeypatch.setattr(demo_cli, "_run", capture)
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), *flag])
    assert result.exit_code == 0, result.output
    assert seen[0].logit_adjustment is expected
    federation = seen[0].federation_config()
    assert federation.logit_adjustment is expected
    assert (federation.local_adjustment() is not None) is expected
    assert (federation.distill_settings().logit_adjustment > 0) is expected

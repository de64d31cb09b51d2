"""A ``deploy local`` run writes the ServerApp's retry delay into its server.toml.

The delay is the first wait before a round a failed service aborted is run again
(``[federation] retry_delay``); the default 5 s doubles to 35 s per outage, so the
end-to-end tests set 0.5 s. A delay outside (0, 3600] is refused before anything
is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from secure_fed.deploy.local import LocalFederation
from secure_fed.deploy.local_files import LocalOptions
from secure_fed.deploy.server_config import load_server_config
from secure_fed.errors import FederationConfigInvalid


@pytest.mark.parametrize("delay", [0.5, 5.0, 7])
def test_the_retry_delay_reaches_the_server_config(tmp_path: Path, delay: float) -> None:
    options = LocalOptions(
        participants=2, mode="shares", rounds=1, run_dir=tmp_path / "run", retry_delay=delay
    )
    layout = LocalFederation(options=options, python=sys.executable, env={}).prepare()
    assert load_server_config(layout.server_toml).retry_delay == delay


@pytest.mark.parametrize("delay", [0, -1, 3601, True, "5"])
def test_a_retry_delay_outside_the_range_is_refused(tmp_path: Path, delay: object) -> None:
    with pytest.raises(FederationConfigInvalid, match="retry_delay"):
        LocalOptions(
            participants=2,
            mode="shares",
            rounds=1,
            run_dir=tmp_path / "run",
            retry_delay=delay,  # type: ignore[arg-type]
        )
    assert not (tmp_path / "run").exists()

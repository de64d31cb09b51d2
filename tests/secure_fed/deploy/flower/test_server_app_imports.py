"""The aggregator's process starts without the learning stack.

The ServerApp aggregates ciphertexts or shares and never trains, so importing it
must not load torch or Opacus (they took more than half of its start-up time).
A fresh interpreter imports the app the SuperLink runs and lists what it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

LEARNING_STACK = ("torch", "opacus")

_PROBE = """
import json, sys
import secure_fed.deploy.flower.server_app
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {names!r})))
"""


def _loaded_by(module: str) -> list[str]:
    probe = _PROBE.replace("secure_fed.deploy.flower.server_app", module)
    out = subprocess.run(
        [sys.executable, "-c", probe.format(names=set(LEARNING_STACK))],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def test_the_server_app_loads_neither_torch_nor_opacus() -> None:
    assert _loaded_by("secure_fed.deploy.flower.server_app") == []


def test_the_probe_sees_the_learning_stack_where_it_is_loaded() -> None:
    # the participant's side trains with Opacus: the same probe lists both there
    loaded = _loaded_by("secure_fed.federation.builders")
    assert {"torch", "opacus"} <= {name.split(".")[0] for name in loaded}

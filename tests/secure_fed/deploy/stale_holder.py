"""A participant process that reserves through its node's journalled gate, then waits to die.

``python -m tests.secure_fed.deploy.stale_holder MODE participant.toml``:

* ``hold``: reserve round ``r1`` and hold it (training, as far as anyone knows);
* ``charged``: reserve, then commit through the ledger itself, as a process that
  dies after the ledger's commit and before it forgets its intent.

It prints the reservation id on one line and blocks until stdin closes or it
is killed; the tests kill it (``SIGKILL``) to stand for a crashed node.
"""

from __future__ import annotations

import sys

from privacy_ledger import MechanismEvent
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import _budget_gate, _round_of
from secure_fed.deploy.participant_state import BudgetRecorder, ParticipantState
from secure_fed.federation.config import ASSET_ID

EVENT = MechanismEvent(
    noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
)


def main(mode: str, toml: str) -> None:
    config = load_participant_config(toml)
    state = ParticipantState(directory=config.state_dir, participant_id=config.participant_id)
    gate = _budget_gate(config)
    recorder = BudgetRecorder(gate=gate, state=state, round_of=_round_of)
    held = recorder.reserve(config.participant_id, ASSET_ID, EVENT, round_id="r1")
    if mode == "charged":
        gate.commit(held.id)  # the ledger charged it; the process dies before it forgets
    print(held.id, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

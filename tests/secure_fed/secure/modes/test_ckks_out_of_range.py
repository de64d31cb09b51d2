"""CKKS mode cannot see an out-of-range plaintext; only its weight and the filter act on it.

The threat model says so plainly (docs/audit/threat-model.md, "Out-of-range inputs"):
these tests pin both halves. If CKKS mode ever refuses such an upload at load, the
first test fails and the page must change with it.
"""

from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import packing
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.outlier import OutlierPolicy, excluded_ids
from tests.secure_fed.secure.conftest import IDS, C, N
from tests.secure_fed.secure.helpers import BOUND, population


def test_out_of_range_plaintext_is_accepted_and_only_the_filter_removes_it(
    ckks: tuple[SecureDeployment, MemoryAuditSink], monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, _ = ckks
    agg = dep.aggregator(bound=BOUND)
    preds = population(len(IDS), N, C, seed=11)
    attacker = IDS[-1]
    evil = np.array(preds[attacker])
    evil[3, 1] = 1000.0
    encoder = dep.encoder(attacker, bound=BOUND)
    encoder.bound = 4096.0  # type: ignore[attr-defined]  # skips its own clip
    # ... and its library's bound check
    monkeypatch.setattr(packing, "_check_matrix", lambda m, _b: np.asarray(m, dtype=float))
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(preds[p])) for p in IDS[:-1]}
    handles[attacker] = agg.load(encoder.encode(evil))  # no error: nothing can see the value
    monkeypatch.undo()
    scores = agg.score(handles, round_id=1).scores
    assert scores[attacker] > 100 * max(scores[p] for p in IDS[:-1])
    decisions = OutlierPolicy(dof=C - 1).decide(scores, round_id=1)
    assert excluded_ids(decisions) == {attacker}

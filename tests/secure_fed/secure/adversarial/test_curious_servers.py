"""Curious servers following the protocol: the openings of a round reveal no participant.

Before the release plan, scoring opened the mean over all K uploads and then
the mean over the robust subset: ``K mean_all - h mean_H`` is the sum of the
excluded uploads (one whole matrix at K = 3 or 4), and with the publication's
public weights K = 3 gave all three matrices. Now no mean is opened and a
round has exactly one linear release; asking for more is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crypto.ckks import weighted_sum
from secure_fed.errors import DecryptionRefused, OpeningRefused
from tests.secure_fed.secure.adversarial.attacker import helper_linear, helper_uids, ka_decrypt
from tests.secure_fed.secure.adversarial.leak_checker import LeakChecker, openings
from tests.secure_fed.secure.adversarial.rounds import gatekeeper_log, run_round

MODES = ["shares", pytest.param("ckks", marks=pytest.mark.slow)]


def _ask_gatekeeper(dep, harness, purpose: str, ids: list[str], weights: list[float]) -> None:  # type: ignore[no-untyped-def]
    """The aggregator asks the mode's gatekeeper for ``sum w_k x_k`` over ``ids``."""
    if dep.mode == "shares":
        uids = helper_uids(dep)
        helper_linear(dep, [uids[p] for p in ids], weights, purpose=purpose)
        return
    agg = harness.engine.aggregator
    handles = harness.engine._live_handles(harness.engine.state(1))
    ups = agg._uploads(handles)
    matrix = weighted_sum([ups[p] for p in ids], weights)
    op = "mean" if purpose == "mean" else "weighted_sum"
    claim = {"op": op, "uploads": [[p, handles[p].digest] for p in ids], "weights": weights}
    ka_decrypt(agg, purpose=purpose, ids=ids, matrix=matrix, claim=claim, shape=agg.shape)


@pytest.mark.parametrize("mode", MODES)
def test_mean_differencing_finds_no_mean_to_difference(mode: str, tmp_path: Path) -> None:
    dep, harness, _, state = run_round(mode, 4, tmp_path, attackers=1)
    assert state.excluded == ["p03"]
    assert not any(r.released and r.purpose == "mean" for r in gatekeeper_log(dep))
    refusal = OpeningRefused if mode == "shares" else DecryptionRefused
    everyone, subset = ["p00", "p01", "p02", "p03"], ["p00", "p01", "p02"]
    with pytest.raises(refusal, match="opens no means"):
        _ask_gatekeeper(dep, harness, "mean", everyone, [0.25] * 4)
    with pytest.raises(refusal, match="opens no means"):
        _ask_gatekeeper(dep, harness, "mean", subset, [1 / 3] * 3)
    denied = dep.plan.audit.named("access.denied")[-1]
    assert "no means" in str(denied["reason"])
    assert sum(r.released and r.purpose == "aggregate" for r in gatekeeper_log(dep)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_publication_differencing_at_k3_has_one_equation_for_three_unknowns(
    mode: str, tmp_path: Path
) -> None:
    dep, harness, preds, _ = run_round(mode, 3, tmp_path)
    found = openings(gatekeeper_log(dep))
    assert sum(o.degree == 1 for o in found) == 1  # the publication: rank 1 of 3
    LeakChecker(min_participants=3).check(found, harness.ids)
    # the best linear estimate of p00 from the opened values is the publication:
    # its error is the honest spread between models, not zero
    published = np.mean([preds[p] for p in harness.ids], axis=0)
    error = float(np.sqrt(np.mean((published - preds["p00"]) ** 2)))
    spread = float(np.sqrt(np.mean((preds["p01"] - preds["p00"]) ** 2)))
    assert error > 0.3 * spread
    # a second publication with other public weights would solve the system: refused
    refusal = OpeningRefused if mode == "shares" else DecryptionRefused
    with pytest.raises(refusal, match="'done'"):
        _ask_gatekeeper(dep, harness, "aggregate", harness.ids, [0.5, 0.25, 0.25])

"""Pinned limit of shares mode without authenticated shares (docs/audit/threat-model.md).

A malicious aggregator chooses its own share of every input. Adding ``t`` to its
share of one whitened deviation ``z_j`` of one participant turns that
participant's allowed score ``sum z^2`` into ``sum z^2 + 2 t z_j + t^2``: with a
large ``t`` the one scalar the plan allows reveals ``z_j``. The release plan
still caps how many scalars open per round (two per participant); only
authenticated shares (SPDZ-style MACs) would detect the offset. This test
performs the attack and documents that it works, so the claim stays honest.
"""

from __future__ import annotations

import numpy as np
import pytest

import secure_fed.secure.modes.shares_scoring as shares_module
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, population

T = 2.0**16


def test_an_offset_on_the_aggregators_own_share_leaks_one_value_per_score(
    shares, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, _ = shares
    honest = shares_module.whiten_shares
    calls: list[int] = []

    def offset(delta, plan, *, party):  # type: ignore[no-untyped-def]
        out = honest(delta, plan, party=party)
        if party == 0 and not calls:  # the first participant's z, sample 0, class 0
            out = out.copy()
            out[0, 0] += np.uint64(int(T) << plan.fz)
        calls.append(party)
        return out

    monkeypatch.setattr(shares_module, "whiten_shares", offset)
    preds = population(4, N, C, seed=8)
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    ids = sorted(preds)
    scores = agg.scoring_round(handles, round_id=1).ranking_scores(ids, N)
    leaked = (scores[ids[0]] * N - T * T) / (2 * T)  # up to sum z^2 / 2t, about 1e-2
    mean = np.mean([np.clip(preds[p], -BOUND, BOUND) for p in ids], axis=0)
    truth = float(np.clip(preds[ids[0]], -BOUND, BOUND)[0, 0] - mean[0, 0])
    assert leaked == pytest.approx(truth, abs=0.05)  # the limit is real
    assert abs(truth) > 0.05  # and the value was not trivially zero

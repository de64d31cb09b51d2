"""The outlier budget ``max_flagged`` and the influence bound it gives.

The policy keeps at most ``max_flagged`` factors below 1 (an impossible score
aside), and the derivation in docs/audit/threat-model.md holds for the project's
own weighting: with at most ``M`` participants other than ``x`` marked in either
round, the published weights with and without ``x`` differ by at most
``w_max (1 + M)`` in total variation.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_fed.errors import OutlierConfigInvalid
from secure_fed.federation.weighting import DynamicWeighting
from secure_fed.secure.scoring.outlier import (
    OutlierConfig,
    OutlierPolicy,
    flagged_count,
    influence_bound,
)

DOF = 3


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(
        st.floats(min_value=-1.0, max_value=1e4, allow_nan=False), min_size=2, max_size=12
    ),
    budget=st.integers(min_value=0, max_value=4),
    exclude=st.booleans(),
)
def test_no_round_flags_more_than_the_budget(
    scores: list[float], budget: int, exclude: bool
) -> None:
    """Whatever the scores, at most ``max_flagged`` factors are below 1, the rest as before."""
    named = {f"p{i:02d}": s for i, s in enumerate(scores)}
    config = OutlierConfig(max_flagged=budget, exclude=exclude)
    decisions = OutlierPolicy(dof=DOF, config=config).decide(named, round_id=1)
    free = OutlierPolicy(dof=DOF, config=OutlierConfig(exclude=exclude)).decide(named, round_id=1)
    assert flagged_count(decisions) <= budget
    kept = {p for p, d in decisions.items() if d.factor < 1}
    assert kept <= {p for p, d in free.items() if d.factor < 1}  # only ever unflags
    for pid in kept:  # a participant it keeps flagged has the unbudgeted decision
        assert decisions[pid].factor == free[pid].factor
    if flagged_count(free) <= budget:
        assert decisions == free


def test_budget_zero_keeps_everybody_but_an_impossible_score() -> None:
    scores = {"a": 3.0, "b": 500.0, "c": 3.1, "d": -4.0}
    decisions = OutlierPolicy(dof=DOF, config=OutlierConfig(max_flagged=0)).decide(
        scores, round_id=1
    )
    assert {p: d.action for p, d in decisions.items()} == {
        "a": "keep",
        "b": "keep",
        "c": "keep",
        "d": "exclude",
    }


def test_a_kept_participant_is_still_judged_on_its_history() -> None:
    """The budget changes this round's factor, not the score history the next round uses."""
    policy = OutlierPolicy(dof=DOF, config=OutlierConfig(max_flagged=1, exclude=False))
    scores = {"a": 3.0, "b": 3.0, "c": 3.0, "f": 400.0, "g": 300.0}
    first = policy.decide(scores, round_id=1)
    assert first["f"].factor < 1 and first["g"].action == "keep"
    second = policy.decide({**scores, "f": 3.0}, round_id=2)
    assert second["g"].factor < 1 and second["g"].smoothed == 300.0


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_a_budget_that_is_not_a_count_is_refused(value: object) -> None:
    with pytest.raises(OutlierConfigInvalid, match="max_flagged"):
        OutlierConfig(max_flagged=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bound": 0.0, "max_weight": 0.5, "marked": 1},
        {"bound": 8.0, "max_weight": 0.0, "marked": 1},
        {"bound": 8.0, "max_weight": 1.5, "marked": 1},
        {"bound": 8.0, "max_weight": 0.5, "marked": -1},
        {"bound": math.inf, "max_weight": 0.5, "marked": 1},
    ],
)
def test_the_bound_refuses_parameters_out_of_range(kwargs: dict[str, float]) -> None:
    with pytest.raises(OutlierConfigInvalid):
        influence_bound(**kwargs)  # type: ignore[arg-type]


_FACTOR = st.one_of(st.just(0.0), st.floats(min_value=0.05, max_value=0.99))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.integers(min_value=1, max_value=100), min_size=3, max_size=9),
    x_rows=st.integers(min_value=1, max_value=100),
    data=st.data(),
)
def test_the_weighting_moves_at_most_w_max_times_one_plus_the_marked(
    rows: list[int], x_rows: int, data: st.DataObject
) -> None:
    """The derivation, on ``DynamicWeighting.weigh``: ``TV(W, W') <= w_max (1 + M)``.

    Round 0 without ``x``, round 1 with it; each marks up to ``budget`` honest
    participants with any factor (0: excluded) and ``x`` may be marked too. The
    cap is any value both rounds can meet.
    """
    honest = [f"h{i}" for i in range(len(rows))]
    registered = {**dict(zip(honest, rows, strict=True)), "x": x_rows}
    budget = data.draw(st.integers(min_value=0, max_value=len(honest) - 2))
    marks0 = data.draw(st.lists(st.sampled_from(honest), max_size=budget, unique=True))
    marks1 = data.draw(st.lists(st.sampled_from(honest), max_size=budget, unique=True))
    f0 = {p: data.draw(_FACTOR) if p in marks0 else 1.0 for p in honest}
    f1 = {p: data.draw(_FACTOR) if p in marks1 else 1.0 for p in honest}
    f1["x"] = data.draw(st.one_of(st.just(1.0), st.floats(min_value=0.05, max_value=1.0)))
    kept0 = {p: f for p, f in f0.items() if f > 0}
    kept1 = {p: f for p, f in f1.items() if f > 0}
    low = 1.0 / min(len(kept0), len(kept1))
    cap = data.draw(st.floats(min_value=low, max_value=1.0))
    w0 = DynamicWeighting(alpha=0.0, registered=registered).weigh(kept0, max_weight=cap)
    w1 = DynamicWeighting(alpha=0.0, registered=registered).weigh(kept1, max_weight=cap)
    ids = [*honest, "x"]
    tv = 0.5 * sum(
        abs((w1[p].weight if p in w1 else 0.0) - (w0[p].weight if p in w0 else 0.0)) for p in ids
    )
    marked = max(len(marks0), len(marks1))
    assert tv <= cap * (1 + marked) + 1e-9
    assert 2 * 8.0 * tv <= influence_bound(bound=8.0, max_weight=cap, marked=marked) + 1e-8

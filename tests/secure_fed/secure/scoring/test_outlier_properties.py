"""Properties of the outlier policy over any scores (Hypothesis).

Whatever the scores: every scored participant gets one decision with a factor
in ``[0, 1]`` (0 exactly when excluded); at most a minority is excluded and
never below ``min_keep``; deciding a round again gives the same decisions; and
honest scores (at most the model's expectation ``C - 1``) are kept at full
weight whatever a minority of attackers sends, however large.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from secure_fed.secure.scoring.outlier import OutlierPolicy, excluded_ids

DOF = 9
SCORE = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
SCORES = st.dictionaries(st.sampled_from([f"p{i}" for i in range(9)]), SCORE, min_size=1)
FAST = settings(max_examples=60, deadline=None)


@FAST
@given(rounds=st.lists(SCORES, min_size=1, max_size=4), min_keep=st.integers(1, 4))
def test_decisions_are_whole_and_exclude_only_a_minority(
    rounds: list[dict[str, float]], min_keep: int
) -> None:
    policy = OutlierPolicy(dof=DOF, min_keep=min_keep)
    for round_id, scores in enumerate(rounds, start=1):
        decisions = policy.decide(scores, round_id=round_id)
        assert set(decisions) == set(scores)
        for pid, d in decisions.items():
            assert d.participant_id == pid and d.score == scores[pid]
            assert 0.0 <= d.factor <= 1.0
            assert (d.action == "exclude") == (d.factor == 0.0) == d.excluded
        out = excluded_ids(decisions)
        assert len(out) <= (len(scores) - 1) // 2
        assert not out or len(scores) - len(out) >= min_keep


@FAST
@given(first=SCORES, second=SCORES)
def test_deciding_a_round_again_changes_nothing(
    first: dict[str, float], second: dict[str, float]
) -> None:
    policy = OutlierPolicy(dof=DOF)
    policy.decide(first, round_id=1)
    once = policy.decide(second, round_id=2)
    history = dict(policy.history)
    assert policy.decide(second, round_id=2) == once  # e.g. after a restart in filtering
    assert policy.history == history


@FAST
@given(
    honest=st.lists(st.floats(min_value=0.0, max_value=float(DOF)), min_size=3, max_size=7),
    attack=st.lists(SCORE, max_size=3),
)
def test_honest_scores_keep_full_weight_against_a_minority(
    honest: list[float], attack: list[float]
) -> None:
    attack = attack[: (len(honest) - 1) // 2 + (len(honest) - 1) % 2]  # a strict minority
    scores = {f"h{i}": s for i, s in enumerate(honest)}
    scores.update({f"x{i}": s for i, s in enumerate(attack)})
    decisions = OutlierPolicy(dof=DOF).decide(scores, round_id=1)
    for i in range(len(honest)):
        assert decisions[f"h{i}"].action == "keep" and decisions[f"h{i}"].factor == 1.0

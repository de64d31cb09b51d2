"""The public weight cap of a federation and of a round: defaults and validation."""

from __future__ import annotations

import pytest

from secure_fed.errors import FederationConfigInvalid, RoundConfigInvalid
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.stages import RoundConfig
from tests.secure_fed.federation.helpers import make_config


@pytest.mark.parametrize(("participants", "cap"), [(2, 0.5), (4, 0.5), (10, 0.2), (11, 1 / 6)])
def test_default_cap_is_one_over_the_quorum(participants: int, cap: float) -> None:
    config = FederationConfig(participants=participants)
    assert config.weight_cap() == pytest.approx(cap) and cap * config.quorum() == pytest.approx(1)


def test_explicit_cap_must_be_satisfiable_by_the_quorum() -> None:
    assert FederationConfig(participants=10, max_weight=0.2).weight_cap() == 0.2
    with pytest.raises(FederationConfigInvalid, match="max_weight must be >= 1/min_participants"):
        FederationConfig(participants=10, max_weight=0.15)  # quorum 5
    # above an equal share of the quorum: the consortium policy refuses it
    with pytest.raises(FederationConfigInvalid, match="max_weight must be <= 1/min_participants"):
        FederationConfig(participants=10, max_weight=0.3)
    assert FederationConfig(participants=10, min_participants=8, max_weight=0.125).weight_cap()
    for bad in (0.0, 1.5, float("nan"), True):
        with pytest.raises(FederationConfigInvalid, match="max_weight must be in"):
            FederationConfig(max_weight=bad)


def test_round_config_carries_the_cap_and_validates_it() -> None:
    config = make_config(min_participants=4, max_weight=0.25)
    assert RoundConfig.from_dict(config.to_dict()) == config
    with pytest.raises(RoundConfigInvalid, match="below 1/min_participants"):
        make_config(min_participants=4, max_weight=0.24)
    with pytest.raises(RoundConfigInvalid, match="max_weight must be in"):
        make_config(max_weight=0.0)
    stored = make_config().to_dict()
    del stored["max_weight"]  # a round stored before the cap existed: no cap
    assert RoundConfig.from_dict(stored).max_weight == 1.0

from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import KeyAuthorityKeys, generate_keys


@pytest.fixture(scope="session")
def agg_keys() -> KeyAuthorityKeys:
    return generate_keys("CKKS_AGGREGATION")


@pytest.fixture(scope="session")
def score_keys() -> KeyAuthorityKeys:
    return generate_keys("CKKS_SCORING")


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)

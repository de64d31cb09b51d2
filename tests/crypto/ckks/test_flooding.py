from __future__ import annotations

import math

import numpy as np
import pytest

from crypto.ckks import CKKS_AGGREGATION
from crypto.ckks.flooding import csprng_normal, flood, statistical_security_bits
from crypto.errors import ParameterInvalid


def test_csprng_normal_is_standard_normal() -> None:
    z = csprng_normal(200_001)
    assert z.shape == (200_001,)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    # tails: about 4.55% beyond 2 sigma
    assert 0.043 < float(np.mean(np.abs(z) > 2)) < 0.048
    assert not np.array_equal(csprng_normal(8), csprng_normal(8))
    assert csprng_normal(0).shape == (0,)


def test_flood_adds_noise_of_the_requested_size() -> None:
    values = np.zeros((300, 100))
    out = flood(values, sigma=1e-3)
    assert out.shape == values.shape
    assert 0.95e-3 < out.std() < 1.05e-3


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("inf"), 1])
def test_flood_refuses_bad_sigma(sigma: float) -> None:
    with pytest.raises(ParameterInvalid, match="sigma must be a positive finite float"):
        flood(np.zeros(3), sigma=sigma)


def test_statistical_security_formula() -> None:
    s1 = statistical_security_bits(CKKS_AGGREGATION)
    ratio = CKKS_AGGREGATION.flood_sigma / CKKS_AGGREGATION.decryption_error_bound
    assert math.isclose(s1, 2 * (math.log2(ratio) - 3))
    assert math.isclose(statistical_security_bits(CKKS_AGGREGATION, decryptions=4), s1 - 2)
    with pytest.raises(ParameterInvalid, match="decryptions must be a positive integer"):
        statistical_security_bits(CKKS_AGGREGATION, decryptions=0)
    with pytest.raises(ParameterInvalid, match="count must be a nonnegative integer"):
        csprng_normal(-1)

from __future__ import annotations

import dataclasses

import pytest

from crypto.ckks import CKKS_AGGREGATION, CKKS_SCORING, PRESETS, get_preset
from crypto.ckks.flooding import statistical_security_bits
from crypto.ckks.presets import HE_STANDARD_MAX_BITS_128, CkksPreset
from crypto.errors import ParameterInvalid


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_within_128_bit_he_standard(name: str) -> None:
    preset = PRESETS[name]
    bound = {4096: 109, 8192: 218, 16384: 438}[preset.poly_modulus_degree]
    assert bound == HE_STANDARD_MAX_BITS_128[preset.poly_modulus_degree]
    assert sum(preset.coeff_mod_bit_sizes) <= bound


def test_required_presets_and_their_shape() -> None:
    assert CKKS_AGGREGATION.depth == 0 and not CKKS_AGGREGATION.relin_keys
    assert not CKKS_AGGREGATION.galois_keys
    assert CKKS_SCORING.depth == 2 and CKKS_SCORING.relin_keys and CKKS_SCORING.galois_keys
    assert CKKS_SCORING.poly_modulus_degree == 8192
    assert len({p.wire_id for p in PRESETS.values()}) == len(PRESETS)


def test_unknown_preset_lists_registry_names() -> None:
    with pytest.raises(ParameterInvalid, match="unknown CKKS preset 'CKKS_FAST'") as info:
        get_preset("CKKS_FAST")
    for name in PRESETS:
        assert name in str(info.value)
    assert str(info.value).startswith("[CRYPTO_PARAMETER_INVALID]")


def test_preset_over_the_bound_is_refused() -> None:
    with pytest.raises(ParameterInvalid, match="exceeds the 128-bit HE-standard bound 109"):
        dataclasses.replace(CKKS_AGGREGATION, coeff_mod_bit_sizes=(60, 50))
    with pytest.raises(ParameterInvalid, match="poly_modulus_degree must be one of"):
        dataclasses.replace(CKKS_AGGREGATION, poly_modulus_degree=5000)
    with pytest.raises(ParameterInvalid, match="depth must equal"):
        dataclasses.replace(CKKS_SCORING, depth=1)


def test_rescale_factor_is_prime_over_scale() -> None:
    f = CKKS_SCORING.rescale_factor(3)
    assert f != 1.0 and abs(f - 1.0) < 1e-3
    with pytest.raises(ParameterInvalid, match="level must be in"):
        CKKS_SCORING.rescale_factor(1)


@pytest.mark.parametrize("preset", list(PRESETS.values()), ids=lambda p: p.name)
def test_flooding_fits_the_error_budget(preset: CkksPreset) -> None:
    # 5.5 sigma covers the maximum over 10^6 released values with prob > 0.96.
    quantization = 10 * preset.input_bound * 2.0**-preset.weight_bits if preset.weight_bits else 0
    worst = 5.5 * preset.flood_sigma + preset.decryption_error_bound + quantization
    # CKKS_SCORING's budget and flooding are relative (for scores >= 1): same check
    assert worst <= preset.error_budget
    assert preset.flood_sigma > preset.decryption_error_bound


def test_statistical_security_of_the_presets() -> None:
    assert statistical_security_bits(CKKS_AGGREGATION) == 10
    assert statistical_security_bits(PRESETS["CKKS_AGGREGATION_STRICT"]) == 42
    assert statistical_security_bits(PRESETS["CKKS_AGGREGATION_STRICT"], decryptions=1024) == 32
    assert statistical_security_bits(CKKS_SCORING) < 0  # documented: no statistical claim

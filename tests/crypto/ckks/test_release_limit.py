"""Each preset floods for a stated number of decryptions, and its keys refuse beyond it.

The statistical security of noise flooding falls with the number ``t`` of released
decryptions (Li, Micciancio, Schultz, Sorrell, CRYPTO 2022): ``s = 2 log2(sigma / E)
- log2(64 t)``. Each preset states the ``t`` it is sized for (``max_decryptions``,
each decrypted ciphertext counting once); a key epoch refuses the decryption that
would exceed it, before decrypting anything. ``CKKS_PUBLICATION`` is the preset
whose flooding keeps ``s >= 40`` at its limit within the 5e-4 error budget.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import numpy as np
import pytest

from crypto.ckks import (
    PRESETS,
    _tenseal,
    decrypt_aggregate,
    generate_keys,
    pack_class_major,
    weighted_sum,
)
from crypto.ckks import presets as preset_registry
from crypto.ckks.flooding import statistical_security_bits
from crypto.ckks.keys import _private_context
from crypto.ckks.packing import unpack_class_major
from crypto.errors import ParameterInvalid, ReleaseLimitReached


def test_each_preset_states_its_bits_at_its_limit() -> None:
    bits = {name: p.guaranteed_bits for name, p in PRESETS.items()}
    assert bits["CKKS_PUBLICATION"] >= 40  # the one preset sized for s >= 40
    assert bits["CKKS_AGGREGATION_STRICT"] == 32  # 42 - log2(1024): stated, not hidden
    assert bits["CKKS_AGGREGATION"] < 40 and bits["CKKS_SCORING"] < 40
    for preset in PRESETS.values():
        t = preset.max_decryptions
        assert preset.flood_bits(t) == statistical_security_bits(preset, decryptions=t)
        assert preset.flood_bits(2 * t) == pytest.approx(preset.flood_bits(t) - 1.0)
        assert 5.5 * preset.flood_sigma + preset.decryption_error_bound <= preset.error_budget
    publication = PRESETS["CKKS_PUBLICATION"]
    assert publication.flood_bits(publication.max_decryptions + 1) < 40  # the limit is tight
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ParameterInvalid, match="decryptions"):
            publication.flood_bits(bad)  # type: ignore[arg-type]


def test_the_publication_preset_meets_its_error_bound_and_budget() -> None:
    keys = generate_keys("CKKS_PUBLICATION")
    rng = np.random.default_rng(4)
    n, c = 5000, 4  # class-major: 3 runs of 2048 slots per class, 12 ciphertexts
    xs = [np.clip(rng.normal(0, 3, (n, c)), -8, 8) for _ in range(3)]
    ups = [pack_class_major(keys.public_context, x) for x in xs]
    worst = weighted_sum(ups, [1.0, 0.0, 0.0])  # one weight equal to 1: the stated worst case
    ctx = _private_context(keys)
    raw = unpack_class_major(worst.layout, [_tenseal.decrypt_vector(ctx, v) for v in worst.vectors])
    raw_err = float(np.abs(raw / 2.0**20 - xs[0]).max())
    assert raw_err <= keys.preset.decryption_error_bound
    released = decrypt_aggregate(keys, worst)
    err = float(np.abs(released - xs[0]).max())
    assert raw_err < err <= keys.preset.error_budget  # flooded, within budget
    assert keys.releases == len(worst.vectors) == 12


def test_keys_refuse_the_decryption_beyond_the_sized_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a registered preset sized for t = 4 (the STRICT chain): small enough to exhaust here
    small = replace(
        PRESETS["CKKS_AGGREGATION_STRICT"], name="CKKS_TEST_T4", wire_id=99, max_decryptions=4
    )
    monkeypatch.setattr(
        preset_registry, "PRESETS", MappingProxyType({**PRESETS, small.name: small})
    )
    keys = generate_keys("CKKS_TEST_T4")
    assert keys.preset.max_decryptions == 4 and keys.preset.guaranteed_bits >= 40
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-8, 8, (2048, 2)) for _ in range(2)]  # 2 ciphertexts each
    aggregate = weighted_sum([pack_class_major(keys.public_context, x) for x in xs], [0.5, 0.5])
    decrypt_aggregate(keys, aggregate)
    decrypt_aggregate(keys, aggregate)
    assert keys.releases == 4
    with pytest.raises(ReleaseLimitReached, match="rotate the keys") as refused:
        decrypt_aggregate(keys, aggregate)
    assert refused.value.code == "CRYPTO_RELEASE_LIMIT_REACHED"
    assert keys.releases == 4  # nothing was counted or decrypted

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import tenseal as ts

from crypto.ckks import KeyAuthorityKeys, PublicContext, _tenseal, generate_keys, pack_class_major
from crypto.ckks.keys import _private_context, _public_ts
from crypto.errors import (
    ContextMismatch,
    DecryptionFailed,
    KeyExportRefused,
    KeyInvalid,
    ParameterInvalid,
)
from crypto.sm import sm3_digest


def test_handles_hide_secrets_and_refuse_pickling(agg_keys: KeyAuthorityKeys) -> None:
    text = repr(agg_keys)
    assert "secret=<hidden>" in text and agg_keys.fingerprint.hex()[:16] in text
    with pytest.raises(KeyExportRefused, match="cannot be pickled"):
        pickle.dumps(agg_keys)
    with pytest.raises(KeyExportRefused, match="cannot be copied"):
        copy.deepcopy(agg_keys)
    with pytest.raises(KeyExportRefused, match="cannot be copied"):
        copy.copy(agg_keys)
    with pytest.raises(TypeError, match="distribute PublicContext.data"):
        pickle.dumps(agg_keys.public_context)


def test_handles_cannot_be_built_directly(agg_keys: KeyAuthorityKeys) -> None:
    with pytest.raises(TypeError, match="generate_keys"):
        KeyAuthorityKeys(object(), _private_context(agg_keys), agg_keys.preset)
    with pytest.raises(TypeError, match="from_bytes"):
        PublicContext(object(), None, b"", agg_keys.preset)


def test_unknown_preset_refused() -> None:
    with pytest.raises(
        ParameterInvalid,
        match="allowed: CKKS_AGGREGATION, CKKS_AGGREGATION_STRICT, CKKS_PUBLICATION, CKKS_SCORING",
    ):
        generate_keys("CKKS_BIG")


def test_public_context_is_public_and_fingerprinted(agg_keys: KeyAuthorityKeys) -> None:
    pub = agg_keys.public_context
    assert pub.fingerprint == sm3_digest(pub.data) == agg_keys.fingerprint
    ctx = _public_ts(pub)
    assert ctx.is_public() and not ctx.has_secret_key()
    # aggregation needs no evaluation keys: none are shipped
    assert not ctx.has_relin_keys() and not ctx.has_galois_keys()
    assert len(pub.data) < 200_000


def test_scoring_context_carries_relin_and_galois_keys(score_keys: KeyAuthorityKeys) -> None:
    ctx = _public_ts(score_keys.public_context)
    assert ctx.has_relin_keys() and ctx.has_galois_keys() and ctx.is_public()


def test_public_holder_cannot_decrypt(agg_keys: KeyAuthorityKeys) -> None:
    pub = PublicContext.from_bytes(
        agg_keys.public_context.data,
        preset="CKKS_AGGREGATION",
        expected_fingerprint=agg_keys.fingerprint,
    )
    upload = pack_class_major(pub, np.zeros((5, 2)))
    vector = upload.vectors[0]
    with pytest.raises(ValueError, match="secret_key"):  # TenSEAL's own refusal
        vector.decrypt()
    with pytest.raises(DecryptionFailed, match="public context cannot decrypt") as info:
        _tenseal.decrypt_vector(_public_ts(pub), vector)
    assert info.value.code == "CRYPTO_DECRYPTION_FAILED"
    # the key authority can
    plain = _tenseal.decrypt_vector(_private_context(agg_keys), vector)
    assert np.abs(plain).max() < 1e-6


def test_public_context_loading_checks(
    agg_keys: KeyAuthorityKeys, score_keys: KeyAuthorityKeys
) -> None:
    data = agg_keys.public_context.data
    with pytest.raises(ContextMismatch, match="expected SM3 fingerprint"):
        PublicContext.from_bytes(data, preset="CKKS_AGGREGATION", expected_fingerprint=b"\0" * 32)
    with pytest.raises(KeyInvalid, match="at most 1000 bytes"):
        PublicContext.from_bytes(
            data,
            preset="CKKS_AGGREGATION",
            expected_fingerprint=agg_keys.fingerprint,
            max_bytes=1000,
        )
    with pytest.raises(ContextMismatch, match="not those of preset CKKS_SCORING"):
        PublicContext.from_bytes(
            data, preset="CKKS_SCORING", expected_fingerprint=agg_keys.fingerprint
        )
    garbage = b"not a context" * 10
    with pytest.raises(KeyInvalid, match="does not parse"):
        PublicContext.from_bytes(
            garbage, preset="CKKS_AGGREGATION", expected_fingerprint=sm3_digest(garbage)
        )
    private = bytes(_private_context(agg_keys).serialize(save_secret_key=True))
    with pytest.raises(KeyInvalid, match="must not carry a secret key"):
        PublicContext.from_bytes(
            private, preset="CKKS_AGGREGATION", expected_fingerprint=sm3_digest(private)
        )


def test_scoring_context_without_galois_keys_is_refused(score_keys: KeyAuthorityKeys) -> None:
    ctx = _private_context(score_keys)
    stripped = bytes(ctx.serialize(save_secret_key=False, save_galois_keys=False))
    with pytest.raises(ContextMismatch, match="lacks its Galois keys"):
        PublicContext.from_bytes(
            stripped, preset="CKKS_SCORING", expected_fingerprint=sm3_digest(stripped)
        )


def test_wrong_scale_context_is_refused() -> None:
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, 4096, coeff_mod_bit_sizes=[60, 49])
    ctx.global_scale = 2.0**40
    data = bytes(ctx.serialize(save_secret_key=False))
    with pytest.raises(ContextMismatch, match="scale is not 2\\^35"):
        PublicContext.from_bytes(
            data, preset="CKKS_AGGREGATION", expected_fingerprint=sm3_digest(data)
        )


def test_each_epoch_has_its_own_fingerprint(agg_keys: KeyAuthorityKeys) -> None:
    assert generate_keys("CKKS_AGGREGATION").fingerprint != agg_keys.fingerprint

from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import (
    KeyAuthorityKeys,
    decrypt_aggregate,
    export_secret_key_encrypted,
    generate_keys,
    import_secret_key_encrypted,
    pack_class_major,
    weighted_sum,
)
from crypto.ckks import export as export_mod
from crypto.errors import DecryptionFailed, KeyExportRefused, KeyInvalid, ParameterInvalid
from crypto.sm import SM4GCM
from tests.tolerances import aggregate_tolerance

PASS = "correct horse battery staple"


@pytest.fixture(scope="module")
def sealed_with_passphrase(agg_keys: KeyAuthorityKeys) -> bytes:
    return export_secret_key_encrypted(agg_keys, passphrase=PASS)


def test_passphrase_roundtrip_restores_the_epoch(
    agg_keys: KeyAuthorityKeys, sealed_with_passphrase: bytes
) -> None:
    restored = import_secret_key_encrypted(sealed_with_passphrase, passphrase=PASS)
    assert restored.fingerprint == agg_keys.fingerprint
    pub = agg_keys.public_context
    ups = [pack_class_major(pub, np.full((4, 2), v)) for v in (1.0, 3.0)]
    out = decrypt_aggregate(restored, weighted_sum(ups, [0.5, 0.5]))
    assert np.abs(out - 2.0).max() <= aggregate_tolerance(pub.preset, values=out.size)


def test_blob_names_argon2id_parameters(sealed_with_passphrase: bytes) -> None:
    header = sealed_with_passphrase[: export_mod._HEADER.size]
    magic, kdf, t_cost, m_cost, lanes, *_ = export_mod._HEADER.unpack(header)
    assert (magic, kdf, t_cost, m_cost, lanes) == (b"SFCKSK1", 1, 3, 65536, 1)
    assert b"secret" not in sealed_with_passphrase


def test_caller_key_roundtrip(agg_keys: KeyAuthorityKeys) -> None:
    key = SM4GCM.generate_key()
    blob = export_secret_key_encrypted(agg_keys, key=key)
    assert import_secret_key_encrypted(blob, key=key).fingerprint == agg_keys.fingerprint
    with pytest.raises(DecryptionFailed, match="authentication failed"):
        import_secret_key_encrypted(blob, key=SM4GCM.generate_key())
    with pytest.raises(DecryptionFailed, match="protected by a raw key"):
        import_secret_key_encrypted(blob, passphrase=PASS)


def test_wrong_passphrase_and_tampering_fail(sealed_with_passphrase: bytes) -> None:
    with pytest.raises(DecryptionFailed, match="authentication failed"):
        import_secret_key_encrypted(sealed_with_passphrase, passphrase="wrong passphrase!!")
    tampered = bytearray(sealed_with_passphrase)
    tampered[export_mod._HEADER.size - 1] ^= 1  # the fingerprint is associated data
    with pytest.raises(DecryptionFailed, match="authentication failed"):
        import_secret_key_encrypted(bytes(tampered), passphrase=PASS)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "exactly one of passphrase= or key="),
        ({"passphrase": PASS, "key": b"k" * 16}, "exactly one of passphrase= or key="),
        ({"passphrase": "short"}, "at least 12 characters"),
        ({"key": b"k" * 15}, "key must be 16 bytes"),
    ],
)
def test_export_refusals(
    agg_keys: KeyAuthorityKeys, kwargs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(KeyExportRefused, match=fragment) as info:
        export_secret_key_encrypted(agg_keys, **kwargs)  # type: ignore[arg-type]
    assert info.value.code == "CRYPTO_KEY_EXPORT_REFUSED"


def test_import_refuses_malformed_blobs(sealed_with_passphrase: bytes) -> None:
    with pytest.raises(KeyInvalid, match="wrong type or size"):
        import_secret_key_encrypted(b"short", passphrase=PASS)
    bad = b"XXXXXXX" + sealed_with_passphrase[7:]
    with pytest.raises(KeyInvalid, match="not a secure-fed CKKS secret-key blob"):
        import_secret_key_encrypted(bad, passphrase=PASS)
    with pytest.raises(KeyExportRefused, match="exactly one"):
        import_secret_key_encrypted(sealed_with_passphrase)


def test_export_needs_a_key_handle() -> None:
    with pytest.raises(ParameterInvalid, match="must be KeyAuthorityKeys"):
        export_secret_key_encrypted(object(), key=b"k" * 16)  # type: ignore[arg-type]


def test_scoring_roundtrip_keeps_evaluation_keys_and_epoch(score_keys: KeyAuthorityKeys) -> None:
    key = SM4GCM.generate_key()
    restored = import_secret_key_encrypted(
        export_secret_key_encrypted(score_keys, key=key), key=key
    )
    assert restored.fingerprint == score_keys.fingerprint
    assert restored.public_context.data == score_keys.public_context.data
    ups = [pack_class_major(score_keys.public_context, np.full((6, 2), v)) for v in (1.0, 2.0)]
    out = decrypt_aggregate(restored, weighted_sum(ups, [0.5, 0.5]))
    tolerance = aggregate_tolerance(score_keys.public_context.preset, values=out.size)
    assert np.abs(out - 1.5).max() <= tolerance


def test_secret_key_must_match_the_public_context(agg_keys: KeyAuthorityKeys) -> None:
    from crypto.ckks.keys import _keys_from_context, _private_context

    other = generate_keys("CKKS_AGGREGATION")
    with pytest.raises(KeyInvalid, match="does not match the public context"):
        _keys_from_context(_private_context(other), other.preset, agg_keys.public_context.data)


def test_authenticated_but_malformed_payload_is_refused(agg_keys: KeyAuthorityKeys) -> None:
    key = SM4GCM.generate_key()
    header = export_mod._HEADER.pack(b"SFCKSK1", 0, 0, 0, 0, b"\0" * 16, 1, agg_keys.fingerprint)
    for payload, fragment in [
        (b"\xff\xff\xff\xff" + b"x" * 10, "length prefix"),
        (b"\0\0\0\x03abcdef", "does not parse"),
    ]:
        blob = header + SM4GCM(key).encrypt(payload, associated_data=header)
        with pytest.raises(KeyInvalid, match=fragment):
            import_secret_key_encrypted(blob, key=key)

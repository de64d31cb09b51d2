"""CKKS key handles at their limits: what surviving mutants left unchecked.

``scripts/mutation crypto-ckks`` changed each of these and ``tests/crypto/ckks`` stayed
green (docs/benchmarks.md, "Mutation testing"). The release count a restarted key
authority restores decides how many more ciphertexts the epoch may decrypt: it must
count exactly, refuse beyond the preset's ``max_decryptions`` without counting, and
refuse a count that is no integer >= 0. A distributed public context may use its whole
size limit. Every refusal is matched in full (code and text).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from crypto.ckks import KeyAuthorityKeys, PublicContext, generate_keys, resume_release_count
from crypto.ckks.keys import _TOKEN, _keys_from_context, _private_context, _public_ts
from crypto.errors import (
    ContextMismatch,
    CryptoError,
    KeyInvalid,
    ParameterInvalid,
    ReleaseLimitReached,
)
from crypto.sm import sm3_digest


def _raises(error: type[CryptoError], text: str, call: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(error, match=rf"^\[{re.escape(error.code)}\] {re.escape(text)}$"):
        call(*args, **kwargs)


def test_a_restored_release_count_counts_up_to_the_limit_and_not_beyond() -> None:
    keys = generate_keys("CKKS_AGGREGATION")  # its own handle: the count only grows
    limit = keys.preset.max_decryptions
    resume_release_count(keys, 0)
    assert keys.releases == 0
    resume_release_count(keys, limit - 1)
    assert keys.releases == limit - 1
    text = (
        f"key epoch {keys.fingerprint.hex()[:16]} released {limit - 1} of the {limit} "
        f"ciphertexts {keys.preset.name} is sized for; 2 more would lower its flooding "
        f"below {keys.preset.guaranteed_bits:.0f} bits: rotate the keys"
    )
    _raises(ReleaseLimitReached, text, resume_release_count, keys, 2)
    assert keys.releases == limit - 1  # nothing counted
    resume_release_count(keys, 1)
    assert keys.releases == limit


@pytest.mark.parametrize("count", [-1, True, 1.0, "3"])
def test_a_release_count_that_is_no_integer_of_at_least_0_is_refused(
    agg_keys: KeyAuthorityKeys, count: Any
) -> None:
    text = f"count must be an integer >= 0, got {count!r}"
    before = agg_keys.releases  # a session-wide handle: other tests release under it
    _raises(ParameterInvalid, text, resume_release_count, agg_keys, count)
    assert agg_keys.releases == before  # nothing counted


def test_a_release_count_for_something_else_than_keys_is_refused() -> None:
    text = "keys must be KeyAuthorityKeys, not PublicContext"
    public = generate_keys("CKKS_AGGREGATION").public_context
    _raises(ParameterInvalid, text, resume_release_count, public, 1)


def test_a_public_context_may_use_its_whole_size_limit(agg_keys: KeyAuthorityKeys) -> None:
    data, fingerprint = agg_keys.public_context.data, agg_keys.fingerprint
    loaded = PublicContext.from_bytes(
        data, preset="CKKS_AGGREGATION", expected_fingerprint=fingerprint, max_bytes=len(data)
    )
    assert loaded.fingerprint == fingerprint
    size = len(data) - 1
    _raises(
        KeyInvalid,
        f"public context must be bytes of at most {size} bytes",
        PublicContext.from_bytes,
        data,
        preset="CKKS_AGGREGATION",
        expected_fingerprint=fingerprint,
        max_bytes=size,
    )
    _raises(
        ContextMismatch,
        "public context does not match the expected SM3 fingerprint",
        PublicContext.from_bytes,
        data,
        preset="CKKS_AGGREGATION",
        expected_fingerprint=bytes(32),
    )


def test_bytes_with_the_announced_fingerprint_that_do_not_parse_name_the_failure() -> None:
    garbage = b"not a TenSEAL context"
    _raises(
        KeyInvalid,
        "public context does not parse: ValueError",
        PublicContext.from_bytes,
        garbage,
        preset="CKKS_AGGREGATION",
        expected_fingerprint=sm3_digest(garbage),
    )


def test_handles_and_their_accessors_refuse_the_wrong_thing_by_name(
    agg_keys: KeyAuthorityKeys,
) -> None:
    with pytest.raises(
        TypeError, match=r"^use PublicContext\.from_bytes or KeyAuthorityKeys\.public_context$"
    ):
        PublicContext(object(), None, b"", agg_keys.preset)
    with pytest.raises(
        TypeError, match=r"^use crypto\.ckks\.generate_keys or import_secret_key_encrypted$"
    ):
        KeyAuthorityKeys(object(), _private_context(agg_keys), agg_keys.preset)
    _raises(ParameterInvalid, "keys must be KeyAuthorityKeys, not str", _private_context, "k")
    _raises(ParameterInvalid, "context must be PublicContext, not str", _public_ts, "c")
    public_only = _public_ts(agg_keys.public_context)
    text = "a key-authority context must hold the secret key"
    _raises(KeyInvalid, text, KeyAuthorityKeys, _TOKEN, public_only, agg_keys.preset)


def test_an_imported_key_set_checks_its_public_context(agg_keys: KeyAuthorityKeys) -> None:
    ctx, preset = _private_context(agg_keys), agg_keys.preset
    again = _keys_from_context(ctx, preset, agg_keys.public_context.data)
    assert again.fingerprint == agg_keys.fingerprint
    other = generate_keys("CKKS_AGGREGATION").public_context.data
    text = "the secret key does not match the public context's public key"
    _raises(KeyInvalid, text, _keys_from_context, ctx, preset, other)
    _raises(
        KeyInvalid,
        "public context does not parse: ValueError",
        _keys_from_context,
        ctx,
        preset,
        b"x",
    )
    secret = bytes(ctx.serialize(save_secret_key=True))
    text = "the public context of a key set must not carry a secret key"
    _raises(KeyInvalid, text, _keys_from_context, ctx, preset, secret)
    text = "a public context must not carry a secret key"
    _raises(
        KeyInvalid,
        text,
        PublicContext.from_bytes,
        secret,
        preset="CKKS_AGGREGATION",
        expected_fingerprint=sm3_digest(secret),
    )

"""Share blobs, bundles and reconstruction at their limits: what surviving mutants left unchecked.

``scripts/mutation crypto-shares`` changed each of these and ``tests/crypto/shares``
stayed green (docs/benchmarks.md, "Mutation testing"). The blobs a server parses come
from participants and from the other server: a bundle must survive its own bytes (the
other tests build theirs at import time, where mutmut's runner never switches a mutant
on), each limit must admit its own value (a count of exactly ``max_count``, a label of
512 bytes, 62 fractional bits) and refuse the next, and every refusal is matched in
full (code and text), so a refusal that names the wrong argument or reason fails.
"""

from __future__ import annotations

import logging
import pickle
import re
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from crypto.errors import CryptoError, ParameterInvalid, ShareTampered
from crypto.shares import (
    BeaverParty,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    TripleShare,
    deal_triples,
    expand_seed,
    reconstruct,
    secure_multiply,
    split,
    wire,
)
from crypto.shares._ring import to_ring_int

LABEL = ShareLabel(round_id=5, participant_id="hospital-3", tensor="predictions")
OTHER = ShareLabel(round_id=6, participant_id="hospital-3", tensor="predictions")
SECRET = bytes(range(32))
HEAD = struct.Struct(">4sBBBBQH")  # magic, kind, ring, party, frac_bits, count, label length


def _key(recipient: str = "aggregator") -> ShareMacKey:
    return ShareMacKey.derive(SECRET, recipient=recipient)


def _ring(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def _refused(error: type[CryptoError], text: str, call: Callable[..., Any], *args: Any) -> None:
    """``call(*args)`` must raise ``error`` with exactly ``text`` after its code."""
    with pytest.raises(error, match=rf"^\[{re.escape(error.code)}\] {re.escape(text)}$"):
        call(*args)


def _seal_raw(key: ShareMacKey, head: tuple[Any, ...], rest: bytes) -> bytes:
    """A blob with any header fields, tagged under ``key`` (what a key holder can forge)."""
    body = HEAD.pack(*head) + rest
    return body + key.tag(body)


def test_a_bundle_survives_its_own_bytes_seeded_or_explicit() -> None:
    key0, key1 = _key("aggregator"), _key("helper")
    share0 = _ring(1, 2, 3)
    seed = bytes(range(7, 39))
    b0 = ShareBundle.from_values(share0, label=LABEL, party=0, frac_bits=12)
    b1 = ShareBundle.from_seed(seed, label=LABEL, count=3, frac_bits=12)
    blob0, blob1 = b0.to_bytes(key0), b1.to_bytes(key1)
    assert (blob0[4], blob1[4]) == (wire.KIND_VALUES, wire.KIND_SEED)
    assert len(blob1) == wire.frame_overhead(LABEL) + 32
    got0 = ShareBundle.parse(blob0, key=key0, label=LABEL, party=0, count=3)
    got1 = ShareBundle.parse(blob1, key=key1, label=LABEL, party=1, seeded=True, count=3)
    assert (got0.seeded, got0.party, got0.count, got0.frac_bits) == (False, 0, 3, 12)
    assert (got1.seeded, got1.party, got1.count, got1.frac_bits) == (True, 1, 3, 12)
    assert np.array_equal(got0.values(), share0)
    assert np.array_equal(got1.values(), expand_seed(seed, LABEL, 3))
    assert np.array_equal(reconstruct(got0, got1), share0 + expand_seed(seed, LABEL, 3))


def test_62_fractional_bits_are_kept_and_63_are_refused_in_a_bundle_and_a_blob() -> None:
    for bits in (0, 62):
        assert (
            ShareBundle.from_values(_ring(1), label=LABEL, party=0, frac_bits=bits).frac_bits
            == bits
        )
    for bits in (-1, 63):
        _refused(
            ParameterInvalid,
            f"frac_bits must be an int in [0, 62], got {bits}",
            lambda b=bits: ShareBundle.from_values(_ring(1), label=LABEL, party=0, frac_bits=b),
        )
    key = _key()

    def parse(bits: int) -> ShareBundle:
        blob = wire.seal(
            key,
            kind=wire.KIND_VALUES,
            party=0,
            count=1,
            label=LABEL,
            payload=_ring(9),
            frac_bits=bits,
        )
        return ShareBundle.parse(blob, key=key, label=LABEL, party=0)

    assert parse(62).frac_bits == 62
    _refused(ShareTampered, "share blob frac_bits 63 is out of range", parse, 63)


def test_a_seed_share_of_no_values_is_empty_and_a_negative_count_is_refused() -> None:
    empty = ShareBundle.from_seed(bytes(32), label=LABEL, count=0, frac_bits=12)
    assert empty.values().size == 0
    assert empty.count == ShareBundle.from_values(_ring(), label=LABEL, party=0, frac_bits=12).count
    _refused(
        ParameterInvalid,
        "count must be >= 0, got -1",
        lambda: ShareBundle.from_seed(bytes(32), label=LABEL, count=-1, frac_bits=12),
    )


def test_a_bundle_holding_neither_values_nor_a_seed_yields_no_values() -> None:
    hollow = ShareBundle(label=LABEL, party=0, count=0, frac_bits=0)
    _refused(ParameterInvalid, "share bundle holds neither values nor a seed", hollow.values)


def test_argument_refusals_name_the_argument() -> None:
    floats, ints = np.zeros(2), np.zeros(2, dtype=np.uint64)
    text = "{} must be a numpy uint64 ring array, got float64"
    _refused(
        ParameterInvalid,
        text.format("values"),
        lambda: ShareBundle.from_values(floats, label=LABEL, party=0, frac_bits=0),  # type: ignore[arg-type]
    )
    _refused(ParameterInvalid, text.format("first"), reconstruct, floats, ints)
    _refused(ParameterInvalid, text.format("second"), reconstruct, ints, floats)
    _refused(
        ParameterInvalid,
        "reconstruct: shapes differ, (2,) vs (3,)",
        reconstruct,
        ints,
        _ring(1, 2, 3),
    )
    bundle = ShareBundle.from_values(ints, label=LABEL, party=0, frac_bits=0)
    _refused(
        ParameterInvalid,
        "reconstruct takes two ShareBundle or two ring arrays, not a mix",
        reconstruct,
        bundle,
        ints,
    )


def test_shares_that_do_not_belong_together_are_refused_by_name() -> None:
    b0 = ShareBundle.from_values(_ring(1, 2), label=LABEL, party=0, frac_bits=12)
    b1 = ShareBundle.from_seed(bytes(32), label=OTHER, count=2, frac_bits=12)
    _refused(
        ShareTampered,
        "shares carry different labels (round, participant or tensor)",
        reconstruct,
        b0,
        b1,
    )
    b1 = ShareBundle.from_seed(bytes(32), label=LABEL, count=2, frac_bits=13)
    _refused(ShareTampered, "shares carry different fractional bits", reconstruct, b0, b1)


def test_mac_key_refusals_and_its_recipient() -> None:
    _refused(
        ParameterInvalid,
        "MAC key must be 32 bytes",
        lambda: ShareMacKey(_key=bytes(31), recipient="helper"),
    )
    _refused(
        ParameterInvalid,
        "recipient must be a non-empty name",
        lambda: ShareMacKey.derive(SECRET, recipient=""),
    )
    assert _key("helper").recipient == "helper"
    assert ShareMacKey.generate(recipient="aggregator").recipient == "aggregator"
    with pytest.raises(TypeError, match=r"^ShareMacKey cannot be pickled$"):
        pickle.dumps(_key())


def test_unpack_returns_the_header_it_verified() -> None:
    key = _key()
    blob = wire.seal(
        key,
        kind=wire.KIND_OPENING,
        party=1,
        count=2,
        label=LABEL,
        payload=_ring(1, 2, 3, 4),
        frac_bits=7,
    )
    frame = wire.unpack(blob, key=key, kind=wire.KIND_OPENING, party=1, label=LABEL)
    assert (frame.kind, frame.party, frame.label, frame.count, frame.frac_bits) == (
        wire.KIND_OPENING,
        1,
        LABEL,
        2,
        7,
    )
    assert np.array_equal(frame.words(), _ring(1, 2, 3, 4))


def test_unpack_refusals_are_named() -> None:
    key = _key()
    blob = wire.seal(key, kind=wire.KIND_VALUES, party=0, count=1, label=LABEL, payload=_ring(5))

    def unpack(data: Any, label: ShareLabel = LABEL, with_key: ShareMacKey = key) -> wire.Frame:
        return wire.unpack(data, key=with_key, kind=wire.KIND_VALUES, party=0, label=label)

    _refused(ShareTampered, "share blob must be bytes, got str", unpack, "blob")
    _refused(
        ShareTampered,
        "share blob magic is wrong (not a secure-fed share)",
        unpack,
        b"SFS2" + blob[4:],
    )
    _refused(
        ShareTampered,
        "share blob authentication tag does not verify (tampered or wrong key)",
        unpack,
        blob,
        LABEL,
        _key("helper"),
    )
    _refused(
        ShareTampered,
        "share blob label (round, participant, tensor) is not the expected one",
        unpack,
        blob,
        OTHER,
    )


def test_a_count_of_exactly_max_count_is_accepted_and_one_more_is_not() -> None:
    key = _key()
    blob = wire.seal(
        key, kind=wire.KIND_VALUES, party=0, count=3, label=LABEL, payload=_ring(1, 2, 3)
    )
    args: dict[str, Any] = {"key": key, "kind": wire.KIND_VALUES, "party": 0, "label": LABEL}
    assert wire.unpack(blob, max_count=3, **args).count == 3
    llen = len(LABEL.to_bytes())
    _refused(
        ShareTampered,
        f"share blob count 3 or label length {llen} exceeds limit",
        lambda: wire.unpack(blob, max_count=2, **args),
    )


def test_a_blob_of_exactly_header_and_tag_is_measured_against_its_header() -> None:
    key = _key()
    blob = wire.seal(key, kind=wire.KIND_VALUES, party=0, count=1, label=LABEL, payload=_ring(5))
    size = HEAD.size + wire.TAG_BYTES
    unpack = lambda data: wire.unpack(data, key=key, kind=wire.KIND_VALUES, party=0, label=LABEL)  # noqa: E731
    _refused(
        ShareTampered,
        f"share blob length {size - 1} is shorter than header and tag",
        unpack,
        blob[: size - 1],
    )
    _refused(
        ShareTampered,
        f"share blob length {size} != expected {len(blob)} for its header",
        unpack,
        blob[:size],
    )


def test_a_label_of_512_bytes_is_within_the_limit_and_513_is_not() -> None:
    key = _key()

    def forged(llen: int) -> bytes:
        head = (wire.MAGIC, wire.KIND_VALUES, 64, 0, 0, 0, llen)
        return _seal_raw(key, head, bytes(llen))

    def unpack(blob: bytes) -> wire.Frame:
        return wire.unpack(blob, key=key, kind=wire.KIND_VALUES, party=0, label=LABEL)

    # 512 bytes pass the size limits; only the label comparison refuses them
    _refused(
        ShareTampered,
        "share blob label (round, participant, tensor) is not the expected one",
        unpack,
        forged(512),
    )
    _refused(
        ShareTampered, "share blob count 0 or label length 513 exceeds limit", unpack, forged(513)
    )


def test_ring_refusals_name_what_they_got() -> None:
    ints = np.zeros(2, dtype=np.uint64)
    text = "first must be a numpy uint64 ring array, got {}"
    _refused(ParameterInvalid, text.format("list"), reconstruct, [1, 2], ints)
    _refused(ParameterInvalid, text.format("int32"), reconstruct, ints.astype(np.int32), ints)
    _refused(
        ParameterInvalid, "integer does not fit in a signed 64-bit ring value", to_ring_int, 1 << 64
    )


def test_a_triple_share_survives_its_own_bytes_and_its_count_limit() -> None:
    key = _key("helper")
    seeded, explicit = deal_triples(2, label=LABEL, seeded=True)
    for share, is_seeded in ((seeded, True), (explicit, False)):
        blob = share.to_bytes(key)
        args: dict[str, Any] = {"key": key, "label": LABEL, "party": share.party}
        got = TripleShare.parse(blob, seeded=is_seeded, **args)
        assert (got.label, got.party, got.count) == (LABEL, share.party, 2)
        for mine, theirs in zip(got.parts(), share.parts(), strict=True):
            assert np.array_equal(mine, theirs)
        llen = len(LABEL.to_bytes())
        _refused(
            ShareTampered,
            f"share blob count 2 or label length {llen} exceeds limit",
            lambda b=blob, s=is_seeded, a=args: TripleShare.parse(b, seeded=s, max_count=1, **a),
        )
    hollow = TripleShare(label=LABEL, party=0, count=1)
    _refused(ParameterInvalid, "triple share holds neither values nor a seed", hollow.parts)


def test_beaver_refusals_name_the_argument() -> None:
    channel = _key("aggregator<->helper")
    t0, _ = deal_triples(2, label=LABEL)
    _refused(
        ParameterInvalid,
        "triples must be a TripleShare",
        lambda: BeaverParty(triples="t0", channel_key=channel),  # type: ignore[arg-type]
    )
    party = BeaverParty(triples=t0, channel_key=channel)
    ints, floats = np.zeros(2, dtype=np.uint64), np.zeros(2)
    text = "{} must be a numpy uint64 ring array, got float64"
    _refused(ParameterInvalid, text.format("x_share"), party.open, floats, ints)
    _refused(ParameterInvalid, text.format("y_share"), party.open, ints, floats)
    _refused(
        ParameterInvalid,
        "BeaverParty.open: shapes differ, (2,) vs (3,)",
        party.open,
        ints,
        np.zeros(3, dtype=np.uint64),
    )
    x = split(np.array([3, 4], dtype=np.uint64))
    _refused(
        ParameterInvalid,
        "triples must be given as (party 0, party 1)",
        lambda: secure_multiply(x, x, (t0, t0), channel_key=channel),
    )


def test_a_product_keeps_the_shape_of_its_factors() -> None:
    x = np.arange(1, 7, dtype=np.uint64).reshape(2, 3)
    y = np.arange(7, 13, dtype=np.uint64).reshape(2, 3)
    triples = deal_triples(6, label=LABEL)
    z0, z1 = secure_multiply(split(x), split(y), triples, channel_key=_key("a<->h"))
    assert z0.shape == z1.shape == (2, 3)
    assert np.array_equal(reconstruct(z0, z1), x * y)


def test_a_reconstruction_is_traced_with_its_count_and_tensor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    b0 = ShareBundle.from_values(_ring(1, 2), label=LABEL, party=0, frac_bits=12)
    b1 = ShareBundle.from_seed(bytes(32), label=LABEL, count=2, frac_bits=12)
    with caplog.at_level(logging.DEBUG, logger="crypto.shares.additive"):
        reconstruct(b1, b0)
    assert caplog.messages == ["reconstructing 2 values of predictions"]

"""The range check on shares at its seams: what surviving mutants left unchecked.

``scripts/mutation crypto-shares`` changed each of these and ``tests/crypto/shares``
stayed green (docs/benchmarks.md, "Mutation testing"). The peer server's messages are
untrusted (a one-word message 0 must not be broadcast over every value), a dealer's
triples must fit the circuit exactly, a finished party takes no further message, and
the masks of the opened AND inputs must be uniform: a triple ``(a, c, c)`` still gives
the right verdict while its biased mask leaks the circuit's wires.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from crypto.errors import ParameterInvalid, SharesOutOfRange, ShareTampered
from crypto.shares import (
    RangeCheckParty,
    RangeSpec,
    ShareLabel,
    ShareMacKey,
    deal_range_check,
    range_check,
    range_verdicts,
    require_in_range,
    split,
    wire,
)
from tests.crypto.shares.test_shares_mutants import LABEL, _refused, _ring

CHANNEL = ShareMacKey.derive(bytes(range(40)), recipient="aggregator<->helper")


def _parties(count: int, spec: RangeSpec | None = None) -> tuple[RangeCheckParty, ...]:
    materials = deal_range_check(count, label=LABEL, **({"spec": spec} if spec else {}))
    return tuple(RangeCheckParty(material=m, channel_key=CHANNEL) for m in materials)


def _step_label(step: int) -> ShareLabel:
    return ShareLabel(round_id=5, participant_id="hospital-3", tensor=f"predictions/{step}")


def test_shares_of_any_shape_are_checked_and_refusals_name_the_share() -> None:
    assert range_check(split(np.zeros((2, 3), dtype=np.uint64)), label=LABEL, channel_key=CHANNEL)
    floats, ints = np.zeros(3), np.zeros(3, dtype=np.uint64)
    text = "{} must be a numpy uint64 ring array, got float64"
    _refused(ParameterInvalid, text.format("share"), _parties(3)[0].start, floats)
    _refused(
        ParameterInvalid,
        text.format("share0"),
        lambda: range_verdicts((floats, ints), label=LABEL, channel_key=CHANNEL),  # type: ignore[arg-type]
    )
    _refused(  # the material is dealt for share 0's count; share 1 does not fit it
        ParameterInvalid,
        "share has 2 values, material 3",
        lambda: range_verdicts((ints, ints[:2]), label=LABEL, channel_key=CHANNEL),
    )


def test_a_finished_party_refuses_another_message() -> None:
    p0, p1 = _parties(3)
    ints = np.zeros(3, dtype=np.uint64)
    msg0, msg1 = p0.start(ints), p1.start(ints)
    while True:
        next0, next1 = p0.advance(msg1), p1.advance(msg0)
        if next0 is None or next1 is None:
            break
        msg0, msg1 = next0, next1
    assert p0.stage == p1.stage == "done" and p0.valid
    _refused(ParameterInvalid, "advance called in stage 'done'", p0.advance, b"")


def test_a_peer_message_of_the_wrong_count_is_refused() -> None:
    """A one-word message 0 (correctly tagged) would otherwise broadcast over every value."""
    p0, p1 = _parties(3)
    p0.start(np.zeros(3, dtype=np.uint64))
    short = wire.seal(
        CHANNEL, kind=wire.KIND_VALUES, party=1, count=1, label=_step_label(0), payload=_ring(7)
    )
    _refused(ShareTampered, "share blob count 1 is not the expected count 3", p0.advance, short)


class _OneGateMore(RangeSpec):
    def and_layers(self, count: int) -> list[int]:
        return [*super().and_layers(count), 1]


class _OneLayerLess(RangeSpec):
    def and_layers(self, count: int) -> list[int]:
        return super().and_layers(count)[:-1]


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        (_OneGateMore(lower=-9, upper=9), "dealt AND triples do not match the circuit"),
        (_OneLayerLess(lower=-9, upper=9), "the circuit needs more AND triples than were dealt"),
    ],
)
def test_dealt_and_triples_must_fit_the_circuit(spec: RangeSpec, text: str) -> None:
    shares = split(np.zeros(3, dtype=np.uint64))
    _refused(
        ParameterInvalid,
        text,
        lambda: range_check(shares, label=LABEL, channel_key=CHANNEL, spec=spec),
    )


def test_require_in_range_checks_its_own_bounds_and_names_them() -> None:
    spec = RangeSpec(lower=0, upper=10)
    require_in_range(split(_ring(0, 10)), label=LABEL, channel_key=CHANNEL, spec=spec)
    _refused(  # 11 is far inside the default prediction range
        SharesOutOfRange,
        "predictions: a shared value lies outside [0, 10]",
        lambda: require_in_range(split(_ring(11)), label=LABEL, channel_key=CHANNEL, spec=spec),
    )


def test_the_opened_and_gate_masks_are_uniform() -> None:
    """Every opened AND input is masked by a uniform triple share, whatever the values.

    A triple ``(a, c, c)`` (with ``c = a & b``) still computes the right AND, but ``c`` is
    1 with probability 1/4: the opened ``y ^ c`` then shows the circuit's wires (for
    all-zero values the ``[c_i < r_i]`` wires are nearly all 0, the equalities nearly
    all 1). Each sixteenth of the first opening holds 10,240 bits: 0.03 is 6 standard
    deviations of a uniform one; the leaky mask is off by about 0.2.
    """
    p0, p1 = _parties(640)
    s0, s1 = split(np.zeros(640, dtype=np.uint64))
    start0, start1 = p0.start(s0), p1.start(s1)
    opened = []
    for party, blob in ((0, p0.advance(start1)), (1, p1.advance(start0))):
        assert blob is not None
        frame = wire.unpack(
            blob, key=CHANNEL, kind=wire.KIND_VALUES, party=party, label=_step_label(1)
        )
        opened.append(frame.words())
    words = opened[0] ^ opened[1]  # d = x ^ a, then e = y ^ b
    ones = [float(np.unpackbits(part.view(np.uint8)).mean()) for part in np.split(words, 16)]
    assert max(abs(share - 0.5) for share in ones) < 0.03, ones


def test_a_party_refuses_material_it_cannot_use_by_name() -> None:
    m0, _ = deal_range_check(3, label=LABEL)
    _refused(
        ParameterInvalid,
        "material must be a RangeMaterial",
        lambda: RangeCheckParty(material=b"m0", channel_key=CHANNEL),  # type: ignore[arg-type]
    )
    _refused(
        ParameterInvalid,
        "keep_shared needs per-value verdicts (RangeSpec(each=True))",
        lambda: RangeCheckParty(material=m0, channel_key=CHANNEL, keep_shared=True),
    )


def test_a_verdict_is_traced_with_its_tensor(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="crypto.shares.range_check"):
        range_check(split(_ring(1)), label=LABEL, channel_key=CHANNEL)
    assert caplog.messages == ["range check predictions: verdict reached"] * 2

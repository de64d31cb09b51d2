"""Per-value verdicts of the range check (``RangeSpec(each=True)``): one opened bit per value.

The shares mode's near-duplicate detection compares each hidden pair distance with a
public threshold, one verdict per pair (kept shared, then counted); these tests pin
that the bits are exact at the bounds, independent of each other (no AND), that the
material and messages of the per-value circuit are bound to it, that the verdicts can
stay XOR-shared, and that the one-bit check is unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from crypto.errors import ParameterInvalid, ShareTampered
from crypto.shares import (
    RangeCheckParty,
    RangeMaterial,
    RangeSpec,
    ShareLabel,
    ShareMacKey,
    deal_range_check,
    range_check,
    range_cost,
    range_verdicts,
    split,
)

RING = 1 << 64
LABEL = ShareLabel(round_id=5, participant_id="compare", tensor="copies-1")
CHANNEL = ShareMacKey.derive(bytes(range(40)), recipient="aggregator<->helper")
DEALER = ShareMacKey.generate(recipient="dealer-helper")
EACH = [
    RangeSpec(lower=0, upper=1000, each=True),
    RangeSpec(lower=0, upper=1000, layout="ripple", each=True),
]


def ring(values: list[int]) -> np.ndarray:
    return np.array([v % RING for v in values], dtype=np.uint64)


@pytest.mark.parametrize("spec", EACH, ids=lambda s: s.layout)
@pytest.mark.parametrize("count", [1, 3, 64, 65, 130])
def test_each_value_gets_its_own_exact_verdict(spec: RangeSpec, count: int) -> None:
    edges = [0, 1, 999, 1000, 1001, -1, 1 << 40, RING - 1000]
    values = [edges[i % len(edges)] for i in range(count)]
    found = range_verdicts(split(ring(values)), label=LABEL, channel_key=CHANNEL, spec=spec)
    signed = [v - RING if v >= 1 << 63 else v for v in (x % RING for x in values)]
    assert found.tolist() == [0 <= v <= 1000 for v in signed]
    assert range_check(split(ring(values)), label=LABEL, channel_key=CHANNEL, spec=spec) is all(
        0 <= v <= 1000 for v in signed
    )


def test_the_one_bit_check_still_opens_one_and() -> None:
    spec = RangeSpec(lower=0, upper=1000)
    found = range_verdicts(split(ring([5, 2000])), label=LABEL, channel_key=CHANNEL, spec=spec)
    assert found.tolist() == [False]  # the AND of both verdicts, nothing per value


def test_cost_and_material_of_the_per_value_circuit() -> None:
    """The output message is one bit per value; no AND tree is dealt or run."""
    for spec in EACH:
        values = ring(list(range(0, 2000, 10)))  # 200 values, 4 words
        m0, m1 = deal_range_check(values.size, label=LABEL, spec=spec)
        p0 = RangeCheckParty(material=m0, channel_key=CHANNEL)
        p1 = RangeCheckParty(material=m1, channel_key=CHANNEL)
        s0, s1 = split(values)
        sent0, sent1 = [p0.start(s0)], [p1.start(s1)]
        while (n0 := p0.advance(sent1[-1])) is not None:
            n1 = p1.advance(sent0[-1])
            assert n1 is not None
            sent0.append(n0)
            sent1.append(n1)
        assert p1.advance(sent0[-1]) is None
        assert (
            p0.verdicts.tolist() == p1.verdicts.tolist() == [v <= 1000 for v in range(0, 2000, 10)]
        )
        cost = range_cost(values.size, spec=spec, label=LABEL)
        assert cost.rounds == len(sent0)
        assert cost.exchange_bytes == sum(map(len, sent0))
        one_bit = range_cost(
            values.size, spec=RangeSpec(lower=0, upper=1000, layout=spec.layout), label=LABEL
        )
        assert cost.and_gates < one_bit.and_gates and cost.rounds < one_bit.rounds


def test_material_is_bound_to_the_per_value_circuit() -> None:
    """Material dealt for the one-bit check (or other bounds) does not parse as per-value."""
    each, one = EACH[0], RangeSpec(lower=0, upper=1000)
    _, m1 = deal_range_check(100, label=LABEL, spec=one)
    with pytest.raises(ShareTampered):
        RangeMaterial.parse(
            m1.to_bytes(DEALER), key=DEALER, label=LABEL, party=1, count=100, spec=each
        )
    assert each.domain() != one.domain()
    assert each.domain() != RangeSpec(lower=0, upper=999, each=True).domain()
    with pytest.raises(ParameterInvalid, match="each must be a bool"):
        RangeSpec(lower=0, upper=1, each=1)  # type: ignore[arg-type]


def test_no_verdict_before_the_end() -> None:
    m0, _ = deal_range_check(3, label=LABEL, spec=EACH[0])
    party = RangeCheckParty(material=m0, channel_key=CHANNEL)
    with pytest.raises(ParameterInvalid, match="no verdict"):
        _ = party.verdicts


def test_verdicts_can_stay_shared() -> None:
    """``keep_shared``: nothing is opened; the XOR of the two parties' shares is each verdict."""
    spec = EACH[0]
    values = ring([0, 1000, 1001, 7, -3])
    m0, m1 = deal_range_check(values.size, label=LABEL, spec=spec)
    p0 = RangeCheckParty(material=m0, channel_key=CHANNEL, keep_shared=True)
    p1 = RangeCheckParty(material=m1, channel_key=CHANNEL, keep_shared=True)
    s0, s1 = split(values)
    out0, out1 = p0.start(s0), p1.start(s1)
    sent = 1
    while (n0 := p0.advance(out1)) is not None:
        n1 = p1.advance(out0)
        assert n1 is not None
        out0, out1, sent = n0, n1, sent + 1
    assert p1.advance(out0) is None
    opened = range_cost(values.size, spec=spec, label=LABEL).rounds
    assert sent == opened - 1  # no output message
    assert (p0.verdict_shares ^ p1.verdict_shares).tolist() == [True, True, False, True, False]
    with pytest.raises(ParameterInvalid, match="no verdict"):
        _ = p0.verdicts
    m2, _ = deal_range_check(3, label=LABEL, spec=RangeSpec(lower=0, upper=1))
    with pytest.raises(ParameterInvalid, match="keep_shared needs per-value"):
        RangeCheckParty(material=m2, channel_key=CHANNEL, keep_shared=True)

"""Authenticated shares (crypto.shares.mac): input masks, MACs, checked openings."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from crypto.errors import MacCheckFailed, ShareTampered
from crypto.shares import RING_PREDICTIONS, ShareLabel, ShareMacKey
from crypto.shares.mac import (
    MAC_LANES,
    PUBLICATION_BITS,
    InputMaskDealer,
    MacOpening,
    authenticate,
    helper_mask,
    mask_label,
    parse_mask,
    participant_mask,
    soundness_bits,
)

N = 500
LABEL = ShareLabel(round_id=1, participant_id="mac", tensor="publication")


def _authenticated(dealer: InputMaskDealer, x: np.ndarray) -> tuple[tuple[np.ndarray, ...], ...]:
    key = ShareMacKey.generate(recipient="dealer-aggregator")
    label = mask_label("p0", "u1")
    d = x - participant_mask(dealer.participants["p0"], label, x.size)
    r0, m0 = parse_mask(dealer.deal("p0", "u1", x.size, key=key), key=key, label=label, count=N)
    r1, m1 = helper_mask(dealer.helper_secret, label, x.size)
    return (
        authenticate(d, r0, m0, key=dealer.key_share(0)),
        authenticate(d, r1, m1, key=dealer.key_share(1)),
    )


def _open(
    dealer: InputMaskDealer,
    shares: tuple[tuple[np.ndarray, ...], ...],
    *,
    offset0: tuple[int, int] = (0, 0),
    offset1: tuple[int, int] = (0, 0),
    mac_offset1: int = 0,
) -> tuple[MacOpening, MacOpening]:
    """Run the protocol; ``offsetI = (index, e)`` is what party I adds to its share."""
    (x0, m0), (x1, m1) = shares
    agg = MacOpening(key=dealer.key_share(0), share=x0, macs=m0, label=LABEL, bound=1 << 32)
    hlp = MacOpening(key=dealer.key_share(1), share=x1, macs=m1, label=LABEL, bound=1 << 32)
    sent0, sent1 = x0.copy(), x1.copy()
    sent0[offset0[0] : offset0[0] + 1] += np.uint64(offset0[1] % (1 << 64))  # mod 2^64
    sent1[offset1[0] : offset1[0] + 1] += np.uint64(offset1[1] % (1 << 64))
    hlp.macs = hlp.macs.copy()
    hlp.macs[0, offset1[0] : offset1[0] + 1] += np.uint64(mac_offset1 % (1 << 64))
    hlp.expect_seed(agg.seed_commitment())
    hlp.open(sent0)
    agg.open(sent1)
    agg.receive_seed(hlp.own_seed())
    hlp.receive_seed(agg.own_seed())
    hlp.expect_sigma(agg.sigma_commitment())
    agg.check(hlp.reveal_sigma())
    hlp.check(agg.sigma_opening())
    return agg, hlp


@pytest.fixture
def dealer() -> InputMaskDealer:
    return InputMaskDealer.generate(["p0"])


@pytest.fixture
def values() -> np.ndarray:
    rng = np.random.default_rng(3)
    return RING_PREDICTIONS.encode_clipped(np.clip(rng.normal(0, 2, N), -8, 8))


def test_masked_input_reconstructs_with_valid_macs(dealer, values) -> None:  # type: ignore[no-untyped-def]
    (x0, m0), (x1, m1) = _authenticated(dealer, values)
    assert np.array_equal(x0 + x1, values)
    agg, hlp = _open(dealer, ((x0, m0), (x1, m1)))
    assert agg.passed and hlp.passed
    assert agg.opened is not None and hlp.opened is not None
    assert np.array_equal(agg.opened, values) and np.array_equal(hlp.opened, values)


@pytest.mark.parametrize("e", [1, 4096, 5 << 28, -(1 << 20), 1 << 31])
def test_an_offset_on_either_partys_share_is_detected(dealer, values, e: int) -> None:  # type: ignore[no-untyped-def]
    shares = _authenticated(dealer, values)
    with pytest.raises(MacCheckFailed, match="MAC check failed"):
        _open(dealer, shares, offset0=(7, e))  # the aggregator's: the helper's check fails
    with pytest.raises(MacCheckFailed, match="MAC check failed"):
        _open(dealer, shares, offset1=(7, e))  # the helper's: the aggregator's check fails


def test_offsetting_the_mac_share_by_its_own_key_share_does_not_help(dealer, values) -> None:  # type: ignore[no-untyped-def]
    """The best a party can do alone: shift its MAC share by alpha_i e (it lacks alpha_j e)."""
    shares = _authenticated(dealer, values)
    e = 5 << 28
    own = int(dealer.key_share(1).words()[0])
    with pytest.raises(MacCheckFailed):
        _open(dealer, shares, offset1=(3, e), mac_offset1=own * e)


def test_an_opened_value_outside_its_bound_is_refused(dealer, values) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MacCheckFailed, match="outside its public bound"):
        _open(dealer, _authenticated(dealer, values), offset0=(0, 1 << 40))


def test_commitments_bind_the_seed_and_the_check_values(dealer, values) -> None:  # type: ignore[no-untyped-def]
    (x0, m0), (x1, m1) = _authenticated(dealer, values)
    agg = MacOpening(key=dealer.key_share(0), share=x0, macs=m0, label=LABEL, bound=1 << 32)
    hlp = MacOpening(key=dealer.key_share(1), share=x1, macs=m1, label=LABEL, bound=1 << 32)
    hlp.expect_seed(agg.seed_commitment())
    hlp.open(x0)
    with pytest.raises(MacCheckFailed, match="does not open its commitment"):
        hlp.receive_seed(bytes(32))  # another seed than the committed one
    with pytest.raises(MacCheckFailed, match="no check value"):
        hlp.reveal_sigma()  # the helper reveals only after the aggregator committed
    agg.open(x1)
    agg.receive_seed(hlp.own_seed())
    hlp.receive_seed(agg.own_seed())
    hlp.expect_sigma(agg.sigma_commitment())
    agg.check(hlp.reveal_sigma())
    opened = agg.sigma_opening()
    forged = bytes([opened[0] ^ 1]) + opened[1:]
    with pytest.raises(MacCheckFailed, match="do not open its commitment"):
        hlp.check(forged)
    assert not hlp.passed


def test_party_zero_opens_its_check_values_only_after_its_own_check(dealer, values) -> None:  # type: ignore[no-untyped-def]
    (x0, m0), _ = _authenticated(dealer, values)
    agg = MacOpening(key=dealer.key_share(0), share=x0, macs=m0, label=LABEL, bound=1 << 32)
    with pytest.raises(MacCheckFailed, match="only after its own check"):
        agg.sigma_opening()


def test_the_mac_key_exists_whole_only_in_the_dealer(dealer) -> None:  # type: ignore[no-untyped-def]
    a0, a1 = dealer.key_share(0).words(), dealer.key_share(1).words()
    whole = a0 + a1
    assert a0.shape == (MAC_LANES,) and not np.array_equal(a0, whole)
    assert not np.array_equal(a1, whole)
    assert "lanes=<hidden>" in repr(dealer.key_share(0))
    for secret in (dealer, dealer.key_share(0)):
        with pytest.raises(TypeError, match="pickled"):
            pickle.dumps(secret)


def test_a_tampered_mask_blob_is_refused(dealer) -> None:  # type: ignore[no-untyped-def]
    key = ShareMacKey.generate(recipient="dealer-aggregator")
    blob = bytearray(dealer.deal("p0", "u1", N, key=key))
    blob[100] ^= 1
    with pytest.raises(ShareTampered):
        parse_mask(bytes(blob), key=key, label=mask_label("p0", "u1"), count=N)
    with pytest.raises(ShareTampered):  # another upload's label
        parse_mask(
            dealer.deal("p0", "u1", N, key=key), key=key, label=mask_label("p0", "u2"), count=N
        )


def test_the_publication_bound_gives_at_least_40_bits() -> None:
    assert soundness_bits(PUBLICATION_BITS) >= 40
    assert soundness_bits(PUBLICATION_BITS, lanes=1) < 40  # why two lanes
    assert soundness_bits(40) >= 40 > soundness_bits(41)

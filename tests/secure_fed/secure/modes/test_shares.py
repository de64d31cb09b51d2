from __future__ import annotations

import pickle

import numpy as np
import pytest

from secure_fed.errors import (
    AggregationInvalid,
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    OpeningRefused,
    UploadMalformed,
)
from secure_fed.secure.modes.shares import (
    SharesAggregator,
    SharesEncoder,
    SharesEnrolment,
    SharesKeys,
)
from secure_fed.wire import SHARES_UPLOAD, decode_frame
from tests.secure_fed.secure.conftest import IDS, C, N
from tests.secure_fed.secure.helpers import BOUND, population
from tests.secure_fed.secure.signed_requests import signed
from tests.tolerances import shares_tolerance


def _payload(dep, pid: str, matrix: np.ndarray) -> bytes:  # type: ignore[no-untyped-def]
    return dep.encoder(pid, bound=BOUND).encode(matrix)


def test_upload_is_under_one_megabyte_per_10k_values(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    payload = _payload(dep, "p00", population(1, N, C)["p00"])
    assert len(payload) < 8 * N * C + 1024  # one 8-byte share per value + framing, seed, tags


def test_tampered_share_and_sealed_seed_are_detected(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    agg = dep.aggregator(bound=BOUND)
    payload = bytearray(_payload(dep, "p00", population(1, N, C)["p00"]))
    head, body = decode_frame(bytes(payload), SHARES_UPLOAD)
    offset = len(payload) - len(body)
    cases = ((offset + 100, "aggregator share"), (len(payload) - 5, "helper share"))
    for position, fragment in cases:
        bad = bytearray(payload)
        bad[position] ^= 1
        with pytest.raises(UploadMalformed, match=fragment):
            agg.load(bytes(bad))


def test_shares_from_another_participant_are_refused(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    agg = dep.aggregator(bound=BOUND)
    payload = _payload(dep, "p00", population(1, N, C)["p00"])
    handle = agg.load(payload)
    with pytest.raises(AggregationInvalid, match="p01"):
        agg.weighted_sum({"p01": handle}, {"p01": 1.0})
    stranger = SharesEncoder(shape=(N, C), bound=BOUND, enrolment=SharesEnrolment.generate("zz"))
    with pytest.raises(UploadMalformed, match="zz"):
        agg.load(stranger.encode(population(1, N, C)["p00"]))


def test_dropout_contributes_nothing_and_small_openings_are_refused(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    preds = population(4, N, C, seed=5)
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(_payload(dep, p, m)) for p, m in preds.items() if p != "p03"}
    out = agg.reveal(agg.weighted_sum(handles, {p: 1.0 for p in handles}), round_id=1)
    err = np.abs(out - np.mean([preds[p] for p in handles], axis=0)).max()
    assert err <= shares_tolerance(len(handles))
    two = {p: handles[p] for p in ("p00", "p01")}
    released = len(dep.helper.log)
    with pytest.raises(OpeningRefused, match="needs 3 participants"):
        agg.reveal(agg.weighted_sum(two, {p: 0.5 for p in two}), round_id=2)
    assert len(dep.helper.log) == released  # the aggregator holds itself to the plan first


def test_helper_refuses_unknown_ops_and_uploads(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    with pytest.raises(AuthorityRequestMalformed, match="unknown"):
        dep.helper.handle(signed(dep, {"op": "reveal_one"}))
    with pytest.raises(AuthorityRequestMalformed, match="no share"):
        dep.helper.handle(
            signed(dep, {"op": "linear", "uids": ["nope"], "weights": [1.0], "round_id": 0})
        )
    with pytest.raises(AuthorityRequestMalformed, match="HELPER_MAGIC|SFHR"):
        dep.helper.handle(b"SFKR" + bytes(20))


def test_setup_errors(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    with pytest.raises(ModeSetupInvalid, match="participant_id"):
        SharesEnrolment(participant_id="", aggregator_secret=b"a" * 32, helper_secret=b"h" * 32)
    with pytest.raises(ModeSetupInvalid, match="helper_secret"):
        SharesEnrolment(participant_id="a", aggregator_secret=b"a" * 32, helper_secret=b"short")
    with pytest.raises(ModeSetupInvalid, match="enrolment"):
        SharesEncoder(shape=(N, C), bound=BOUND, enrolment=b"a" * 32)  # type: ignore[arg-type]
    with pytest.raises(ModeSetupInvalid, match="keys"):
        SharesAggregator(shape=(N, C), bound=BOUND, keys={"a": b"x" * 32})  # type: ignore[arg-type]
    keys = dep.server_keys()
    with pytest.raises(ModeSetupInvalid, match="ShareMacKey"):
        SharesKeys(
            secrets=keys.secrets,
            helper=keys.helper,
            dealer=keys.dealer,
            dealer_key=b"k" * 32,
            channel_key=keys.channel_key,
        )  # type: ignore[arg-type]
    with pytest.raises(ModeSetupInvalid, match="exceeds"):
        SharesEncoder(shape=(N, C), bound=9.0, enrolment=dep.enrolment("p00"))
    assert set(IDS) >= {"p00"}


def test_enrolment_and_server_keys_are_never_shown_or_pickled(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    enrolment, keys = dep.enrolment("p00"), dep.server_keys()
    for secret in (enrolment.aggregator_secret, enrolment.helper_secret):
        assert secret.hex() not in repr(enrolment) and repr(secret) not in repr(enrolment)
    assert enrolment.aggregator_secret.hex() not in repr(keys)
    for obj in (enrolment, keys):
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(obj)
    assert enrolment.helper_secret not in keys.secrets.values()  # no helper secret

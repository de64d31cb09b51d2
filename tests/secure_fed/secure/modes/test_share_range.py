"""Shares mode: an upload with any value outside the public bound is refused at load.

The attacker is a participant holding a real enrolment that skips its encoder's clip
(the project's own encoder with a wider codec swapped in): its shares reconstruct to
1000 in one cell. The aggregator and the helper find it with the range check on the
shares; it is refused with ``UPLOAD_OUT_OF_RANGE``, audited, and the round goes on.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from crypto.shares import FixedPointCodec
from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, UploadOutOfRange
from secure_fed.federation.messages import decode_publication
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes import shares_keys as shares_mode
from secure_fed.secure.parties.helper import reply_array
from secure_fed.wire import SHARES_UPLOAD, decode_frame
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, Harness, population
from tests.secure_fed.secure.signed_requests import signed

WIDE = FixedPointCodec(name="attacker", clip_bound=4096.0, frac_bits=12, max_participants=2)


def crafted(dep, pid: str, matrix: np.ndarray, monkeypatch) -> bytes:  # type: ignore[no-untyped-def]
    """The participant's own encoder, its clip widened: one cell reconstructs to 1000."""
    evil = np.array(matrix, dtype=np.float64)
    evil[3, 1] = 1000.0
    encoder = dep.encoder(pid, bound=BOUND)
    encoder.bound = 4096.0
    with monkeypatch.context() as patch:
        patch.setattr(shares_mode, "CODEC", WIDE)
        return bytes(encoder.encode(evil))


def _uid(payload: bytes) -> str:
    head, _ = decode_frame(payload, SHARES_UPLOAD)
    return str(head["upload_id"])


def test_out_of_range_upload_is_refused_at_load(shares, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    agg = dep.aggregator(bound=BOUND)
    preds = population(4, N, C, seed=5)
    for pid in ("p00", "p01", "p02"):
        agg.load(dep.encoder(pid, bound=BOUND).encode(preds[pid]))
    bad = crafted(dep, "p03", preds["p03"], monkeypatch)
    with pytest.raises(UploadOutOfRange) as caught:
        agg.load(bad)
    assert caught.value.code == "UPLOAD_OUT_OF_RANGE" and "1000" not in caught.value.message
    assert dep.helper.range_checks.verdicts[_uid(bad)] is False
    edge = np.full((N, C), -8.0)
    edge[0, 0] = 8.0
    agg.load(dep.encoder("p03", bound=BOUND).encode(edge))  # exactly at the bound passes


def test_the_helper_opens_nothing_of_an_unchecked_or_failed_upload(
    shares_plain, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """An aggregator that skips the check cannot get the upload opened by the helper."""
    dep, _ = shares_plain
    agg = dep.aggregator(bound=BOUND)
    preds = population(4, N, C, seed=6)
    good = [dep.encoder(p, bound=BOUND).encode(preds[p]) for p in ("p00", "p01")]
    for payload in good:
        agg.load(payload)
    bad = crafted(dep, "p02", preds["p02"], monkeypatch)
    with pytest.raises(UploadOutOfRange):
        agg.load(bad)
    skipped = dep.encoder("p03", bound=BOUND).encode(preds["p03"])
    head, body = decode_frame(skipped, SHARES_UPLOAD)
    parts = cast(list[int], head["parts"])
    load = {"op": "load", "participant_id": "p03", "upload_id": head["upload_id"]}
    dep.helper.handle(signed(dep, {**load, "parts": [parts[1]]}, body[parts[0] :]))
    for extra in (bad, skipped):
        uids = [_uid(p) for p in good] + [_uid(extra)]
        request = {"op": "linear", "uids": uids, "weights": [1 / 3] * 3, "round_id": 1}
        with pytest.raises(OpeningRefused, match="range check"):
            reply_array(dep.helper.handle(signed(dep, request)))


def test_helper_refuses_unknown_checks_and_foreign_material(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    step = {"op": "range", "check": "nope", "parts": [0]}
    with pytest.raises(AuthorityRequestMalformed, match="no running range check"):
        dep.helper.handle(signed(dep, step))
    agg = dep.aggregator(bound=BOUND)
    payload = dep.encoder("p00", bound=BOUND).encode(population(1, N, C)["p00"])
    agg.load(payload)
    start = {"op": "range", "check": "c1", "upload_id": "unknown", "parts": [1, 1]}
    with pytest.raises(AuthorityRequestMalformed, match="no share"):
        dep.helper.handle(signed(dep, start, b"xy"))
    head, _ = decode_frame(payload, SHARES_UPLOAD)
    repeat = {**start, "upload_id": head["upload_id"]}  # already checked: the verdict, no rerun
    reply, _ = decode_frame(dep.helper.handle(signed(dep, repeat, b"xy")), b"SFHA")
    assert reply["verdict"] is True


def test_round_goes_on_without_the_out_of_range_upload(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Through the envelope gate and the round engine: refused, audited, round published."""
    ids = ["a", "b", "c", "e", "f", "d"]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares", shape=(40, 4), participant_ids=ids, min_participants=3, audit=sink
    )
    h = Harness(dep, tmp_path, ids=ids, min_participants=3, audit=sink)
    preds = dict(zip(ids, population(6, 40, 4, seed=8).values(), strict=True))
    h.engine.open(h.config(1))
    h.engine.start_collecting(1)
    for pid in ("a", "b", "c", "e", "f"):
        h.verifier.accept(h.envelope(pid, preds[pid], 1), round_id=1)
    h.encoders["d"] = _Crafting(dep, monkeypatch)
    with pytest.raises(UploadOutOfRange):
        h.verifier.accept(h.envelope("d", preds["d"], 1), round_id=1)
    rejected = sink.named("upload.rejected")
    assert [e["code"] for e in rejected] == ["UPLOAD_OUT_OF_RANGE"]
    assert "d" not in h.engine.state(1).uploads
    h.engine.close(1)
    h.engine.filter(1)
    publication = decode_publication(h.engine.publish(1), max_bytes=1 << 24)
    assert "d" not in publication.weights
    assert float(np.abs(publication.aggregate).max()) <= BOUND


class _Crafting:
    """Stands in for participant d's encoder: always sends the crafted upload."""

    def __init__(self, dep, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        self.dep, self.monkeypatch = dep, monkeypatch

    def encode(self, matrix: np.ndarray) -> bytes:
        return crafted(self.dep, "d", matrix, self.monkeypatch)

"""One cluster of honest participants: these attackers move no published cell beyond 2 B w_max.

``2 B w_max`` is not the general bound. With two clusters of honest participants, one
that joins a cluster shrinks the robust covariance and lowers the other cluster's
factors, so the bound that holds is ``2 B min(1, w_max (1 + M))``, ``M`` the
participants whose terms its presence lowers; that worst case is
``test_influence_bound.py``'s. Here the honest participants form one cluster, and the
cells are held to ``2 B w_max``.

Each case runs two real rounds through the round engine, signed envelope gate
and outlier policy of one mode: the honest participants alone, and the same
honest uploads plus one attacker that declares 1e9 private rows. Every
published cell may differ by at most ``2 * bound * w_max`` (plus the mode's
numeric tolerance). Attackers: maximal/minimal logits against the consensus in
every cell; the honest mean pushed towards the wrong classes (it scores as the
most typical participant, so its weight hits the cap); a near-copy of an honest
participant. In shares mode an upload whose shares reconstruct outside the
public bound is the range check's to refuse.
"""

from __future__ import annotations

import dataclasses
import secrets

import numpy as np
import pytest

from crypto.shares import ShareBundle, ShareLabel, split_with_seed
from crypto.sm import sm3_digest
from secure_fed.federation.envelope import seal_upload
from secure_fed.federation.messages import UploadHeader, decode_publication, encode_upload
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.shares import CODEC, SharesEncoder
from secure_fed.wire import SHARES_UPLOAD, encode_frame
from tests.secure_fed.secure.helpers import BOUND, Harness, population

N, C = 48, 4
HONEST = ["a", "b", "c", "d"]
ATTACKER = "x"
W_MAX = 1 / 3  # 1 / min_participants
TOLERANCE = {"plaintext": 1e-5, "ckks": 5e-3, "shares": 1e-3}


def _round(mode: str, tmp_path, uploads: dict[str, np.ndarray], raw: bool = False) -> np.ndarray:  # type: ignore[no-untyped-def]
    ids = sorted(uploads)
    dep = SecureDeployment.create(
        mode=mode, shape=(N, C), participant_ids=ids, min_participants=3, audit=MemoryAuditSink()
    )
    h = Harness(dep, tmp_path / f"{mode}-{len(ids)}", ids=ids, min_participants=3, audit=None)
    if raw and ATTACKER in ids:
        h.encoders[ATTACKER] = _UnclippedSharesEncoder(h.encoders[ATTACKER])
    h.engine.open(dataclasses.replace(h.config(1), max_weight=W_MAX))
    h.engine.start_collecting(1)
    for pid in ids:
        payload = h.encoders[pid].encode(uploads[pid])
        header = UploadHeader(
            round_id=1,
            participant_id=pid,
            mode=mode,
            schema=h.model,
            schema_hash=h.round_schema.schema_hash(),
            num_samples=10**9 if pid == ATTACKER else 100,
            nonce=secrets.token_hex(16),
            payload_sm3=sm3_digest(payload).hex(),
        )
        envelope = seal_upload(encode_upload(header, payload), key=h.keys[pid], params=h.params)
        try:
            h.verifier.accept(envelope, round_id=1)
        except Exception:
            if pid != ATTACKER:
                raise
    h.engine.close(1)
    h.engine.filter(1)
    publication = decode_publication(h.engine.publish(1), max_bytes=1 << 24)
    assert max(publication.weights.values()) <= W_MAX * (1 + 1e-12)
    return publication.aggregate.astype(np.float64)


class _UnclippedSharesEncoder(SharesEncoder):
    """A participant's own encoder with the clipping removed: any ring value it likes."""

    def __init__(self, honest: SharesEncoder) -> None:
        self.__dict__.update(honest.__dict__)

    def encode(self, predictions: np.ndarray) -> bytes:
        uid = secrets.token_hex(8)
        label = ShareLabel(round_id=0, participant_id=self.pid, tensor=f"pred-{uid}")
        f = CODEC.frac_bits
        fixed = np.round(np.asarray(predictions, dtype=np.float64) * (1 << f)).astype(np.int64)
        ring = fixed.reshape(-1).astype(np.uint64)
        share0, seed = split_with_seed(ring, label=label)
        blob0 = ShareBundle.from_values(share0, label=label, party=0, frac_bits=f).to_bytes(
            self._agg_key
        )
        bundle1 = ShareBundle.from_seed(seed, label=label, count=ring.size, frac_bits=f)
        sealed = self._seal.encrypt(
            bundle1.to_bytes(self._helper_key), associated_data=f"{self.pid}|{uid}".encode()
        )
        head: dict[str, object] = {
            "participant_id": self.pid,
            "upload_id": uid,
            "parts": [len(blob0), len(sealed)],
        }
        return encode_frame(SHARES_UPLOAD, head, blob0 + sealed)


def _honest() -> dict[str, np.ndarray]:
    preds = population(len(HONEST), N, C, seed=11)
    return {p: m.astype(np.float32) for p, m in zip(HONEST, preds.values(), strict=True)}


def _worst(kind: str, honest: dict[str, np.ndarray]) -> np.ndarray:
    mean = np.mean(list(honest.values()), axis=0)
    top = np.zeros_like(mean, dtype=bool)
    top[np.arange(N), mean.argmax(axis=1)] = True
    if kind == "extreme":  # minimal logit on the consensus class, maximal elsewhere
        return np.where(top, -BOUND, BOUND).astype(np.float32)
    if kind == "central":  # scores as the most typical participant; nudged to the wrong class
        nudged = np.clip(mean + np.where(top, -0.3, 0.1), -BOUND, BOUND)
        return np.asarray(nudged, dtype=np.float32)
    rng = np.random.default_rng(3)  # "copy": a near-copy of a, which the cap keeps at w_max
    copy = np.clip(honest["a"] + rng.normal(0, 1e-3, size=(N, C)), -BOUND, BOUND)
    return np.asarray(copy, dtype=np.float32)


def _check(mode: str, tmp_path, attacker: np.ndarray, *, raw: bool = False) -> None:  # type: ignore[no-untyped-def]
    honest = _honest()
    without = _round(mode, tmp_path, honest)
    with_it = _round(mode, tmp_path, {**honest, ATTACKER: attacker}, raw=raw)
    moved = float(np.max(np.abs(with_it - without)))
    assert moved <= 2 * BOUND * W_MAX + TOLERANCE[mode], moved


@pytest.mark.parametrize("kind", ["extreme", "central", "copy"])
@pytest.mark.parametrize("mode", ["plaintext", "ckks", "shares"])
def test_the_worst_in_range_participant_stays_within_the_bound(mode, kind, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _check(mode, tmp_path, _worst(kind, _honest()))


def test_shares_reconstructing_outside_the_bound_stay_within_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Out-of-range shares are refused by the range check at load, so the bound holds."""
    attacker = np.where(np.eye(C, dtype=bool)[np.zeros(N, dtype=int)], 1000.0, -1000.0)
    _check("shares", tmp_path, attacker.astype(np.float32), raw=True)

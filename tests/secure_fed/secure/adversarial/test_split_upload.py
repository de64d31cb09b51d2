"""A split ckks upload: the values scored must be the values published.

In the ``ckks`` mode each upload carries its matrix under two key epochs: the scoring
part is scored, compared and read for evidence; the publication part is summed for the
publication. The attacker is a participant who has read this code: it encrypts its
honest matrix under the scoring epoch (so it scores as typical and keeps its weight) and
a matrix of its choosing under the publication epoch, bypassing its own encoder's clip.
Each round runs through the real round engine, signed envelope gate, outlier policy and
key authority. The key authority compares the publication with its scoring-epoch witness
before releasing anything: the publication is refused (``KEY_AUTHORITY_PUBLICATION_
INCONSISTENT``), audited, nothing is released, and the round's publication is spent.
The same harness with every participant honest publishes, so the check is what refuses.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from crypto.ckks import EncryptedMatrix, PublicContext, pack_class_major
from secure_fed.errors import DecryptionRefused, PublicationInconsistent
from secure_fed.federation.messages import decode_publication
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.ckks import CkksEncoder
from secure_fed.secure.modes.ckks_upload import encode_upload
from tests.secure_fed.secure.helpers import BOUND, Harness, population

N, C = 64, 4
IDS = ["a", "b", "c", "d", "x"]
ATTACKER = "x"


def _unclipped(public: PublicContext, matrix: np.ndarray) -> EncryptedMatrix:
    """Encrypt values beyond the clip bound, as a participant can with the public key alone.

    The part beyond the bound is encrypted scaled down by ``2^k`` and doubled ``k`` times
    homomorphically (additions only), then added to the clipped part.
    """
    base = np.clip(matrix, -BOUND, BOUND)
    k = max(0, math.ceil(math.log2(max(float(np.abs(matrix).max()), BOUND) / BOUND)))
    enc = pack_class_major(public, base)
    if k == 0:
        return enc
    extra = pack_class_major(public, (matrix - base) / 2.0**k)
    vectors = []
    for vb, ve in zip(enc.vectors, extra.vectors, strict=True):
        for _ in range(k):
            ve = ve + ve
        vectors.append(vb + ve)
    return EncryptedMatrix(
        kind="upload",
        preset=enc.preset,
        fingerprint=enc.fingerprint,
        layout=enc.layout,
        vectors=vectors,
    )


class _SplitEncoder(CkksEncoder):
    """The attacker's encoder: ``score(m)`` as scoring part, ``publish(m)`` as publication part."""

    def __init__(
        self,
        honest: CkksEncoder,
        publish: Callable[[np.ndarray], np.ndarray],
        score: Callable[[np.ndarray], np.ndarray] = lambda m: np.clip(m, -BOUND, BOUND),
    ) -> None:
        self.__dict__.update(honest.__dict__)
        self.publish, self.score = publish, score

    def encode(self, predictions: np.ndarray) -> bytes:
        assert self.publication is not None
        scoring = _unclipped(self.public, self.score(predictions))
        chosen = _unclipped(self.publication, self.publish(predictions))
        return encode_upload(scoring.to_bytes(), chosen.to_bytes(), self.public, self.publication)


def _one_cell(value: float) -> Callable[[np.ndarray], np.ndarray]:
    def publish(m: np.ndarray) -> np.ndarray:
        out = np.clip(m, -BOUND, BOUND).copy()
        out[0, 0] = value
        return out

    return publish


def _target(m: np.ndarray) -> np.ndarray:
    """A chosen in-range matrix: every row confidently the class after its argmax."""
    out = np.full(m.shape, -BOUND)
    out[np.arange(m.shape[0]), (m.argmax(axis=1) + 1) % m.shape[1]] = BOUND
    return out


ATTACKS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sign-flipped": lambda m: -np.clip(m, -BOUND, BOUND),
    "chosen in-range target": _target,
    "small shift of every cell": lambda m: np.clip(m, -BOUND, BOUND) + 0.05,
    "one cell 1e3": _one_cell(1e3),
    "one cell 1e6": _one_cell(1e6),
    "one cell 1e8 (wraps)": _one_cell(1e8),
}


def _harness(tmp_path, sink: MemoryAuditSink) -> Harness:  # type: ignore[no-untyped-def]
    dep = SecureDeployment.create(
        mode="ckks", shape=(N, C), participant_ids=IDS, min_participants=3, audit=sink
    )
    return Harness(dep, tmp_path, ids=IDS, min_participants=3, audit=sink)


def _run(h: Harness, round_id: int) -> bytes:
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=round_id).values(), strict=True))
    h.engine.open(h.config(round_id))
    h.engine.start_collecting(round_id)
    for pid, matrix in preds.items():
        h.verifier.accept(h.envelope(pid, matrix, round_id), round_id=round_id)
    h.engine.close(round_id)
    h.engine.filter(round_id)
    return h.engine.publish(round_id)


def _released(sink: MemoryAuditSink, round_id: int) -> list[dict[str, object]]:
    return [
        e
        for e in sink.named("decryption.released")
        if e["round_id"] == round_id and e["purpose"] == "aggregate"
    ]


def test_an_honest_round_passes_the_witness_check(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    h = _harness(tmp_path, sink)
    publication = decode_publication(_run(h, 1), max_bytes=1 << 24)
    assert np.abs(publication.aggregate).max() <= BOUND
    assert len(_released(sink, 1)) == 1
    assert not [e for e in sink.named("access.denied") if e.get("round_id") == 1]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_split_upload_is_refused_before_release(tmp_path, attack: str) -> None:  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    h = _harness(tmp_path, sink)
    h.encoders[ATTACKER] = _SplitEncoder(h.encoders[ATTACKER], ATTACKS[attack])
    with pytest.raises(PublicationInconsistent):
        _run(h, 1)
    assert not _released(sink, 1)
    denied = [e for e in sink.named("access.denied") if e.get("round_id") == 1]
    assert [e["code"] for e in denied] == ["KEY_AUTHORITY_PUBLICATION_INCONSISTENT"]
    assert denied[0]["party"] == "key_authority"
    # the round's one publication is spent: asking again, even honestly, releases nothing
    with pytest.raises(DecryptionRefused):
        h.engine.publish(1)
    assert not _released(sink, 1)


@pytest.mark.parametrize("value", [1e3, 1e4, 1e5, 1e6])
def test_an_out_of_range_cell_in_both_parts_never_leaves_the_bound(tmp_path, value: float) -> None:  # type: ignore[no-untyped-def]
    """Consistent but out of range: excluded by its score, or refused; never published beyond B.

    Measured: 1e3 and 1e4 are excluded by the filter; at 1e5 the score can wrap small and
    the upload joins the publication, whose publication-epoch sum then wraps while the
    witness does not: refused. At 1e6 a wrapped score can come out negative: excluded (it
    used to stop the round's filter with ``OUTLIER_CONFIG_INVALID``).
    """
    sink = MemoryAuditSink()
    h = _harness(tmp_path, sink)
    cell = _one_cell(value)
    h.encoders[ATTACKER] = _SplitEncoder(h.encoders[ATTACKER], cell, score=cell)
    try:
        publication = decode_publication(_run(h, 1), max_bytes=1 << 24)
    except PublicationInconsistent:
        assert not _released(sink, 1)
        return
    assert np.abs(publication.aggregate).max() <= BOUND + 1e-3

"""A payload an earlier round accepted is refused for that upload alone; the round goes on.

The attacker is a participant (or anyone who captured its traffic) who resends the
payload of an earlier round inside a fresh, validly signed envelope of the current
round: a new nonce, the current round id, the right schema. In shares mode this stalled
the round before: the upload loaded, every scoring opening was then refused as
belonging to another round, and the round stayed in ``filtering``. Now the engine
refuses it at submission with ``UPLOAD_PAYLOAD_STALE`` (an ``upload.rejected`` event);
the sender's fresh upload and everybody else's are accepted and the round publishes.
The refusal survives a restart of the aggregator: the accepted payloads' digests are
read back from the round store.
"""

from __future__ import annotations

import pytest

from secure_fed.errors import UploadPayloadStale
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.envelope import seal_upload
from secure_fed.federation.messages import encode_upload
from tests.secure_fed.secure.adversarial.binding import IDS, C, N, harness, inner_upload
from tests.secure_fed.secure.helpers import Harness, population


def _resend(h: Harness, pid: str, payload: bytes, round_id: int) -> bytes:
    """``payload`` in a fresh envelope of ``round_id``, signed by ``pid`` (a new nonce)."""
    header = h.upload_header(pid, payload, round_id)
    return seal_upload(encode_upload(header, payload), key=h.keys[pid], params=h.params)


def _first_round(h: Harness) -> bytes:
    """Publish round 1 (already collecting) and return the payload ``a`` uploaded."""
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=1).values(), strict=True))
    envelopes = {pid: h.envelope(pid, preds[pid], 1) for pid in IDS}
    for envelope in envelopes.values():
        h.verifier.accept(envelope, round_id=1)
    h.engine.close(1)
    h.engine.filter(1)
    h.engine.publish(1)
    return inner_upload(envelopes["a"])[1]


def _second_round(h: Harness, stale: bytes) -> None:
    h.engine.open(h.config(2))
    h.engine.start_collecting(2)
    with pytest.raises(UploadPayloadStale, match="accepted in round 1"):
        h.verifier.accept(_resend(h, "a", stale, 2), round_id=2)
    assert "a" not in h.engine.state(2).uploads
    preds = dict(zip(IDS, population(len(IDS), N, C, seed=2).values(), strict=True))
    for pid in IDS:  # the sender's fresh upload and everybody else's go through
        h.verifier.accept(h.envelope(pid, preds[pid], 2), round_id=2)
    h.engine.close(2)
    h.engine.filter(2)
    h.engine.publish(2)
    assert sorted(h.engine.state(2).weights) == IDS


@pytest.mark.parametrize("mode", ["shares", "ckks", "plaintext"])
def test_a_payload_of_an_earlier_round_is_refused_and_the_round_publishes(tmp_path, mode) -> None:  # type: ignore[no-untyped-def]
    h, sink = harness(mode, tmp_path)
    stale = _first_round(h)
    _second_round(h, stale)
    codes = [e["code"] for e in sink.named("upload.rejected")]
    assert codes == ["UPLOAD_PAYLOAD_STALE"]


def test_the_refusal_survives_a_restart_of_the_aggregator(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h, _ = harness("shares", tmp_path)
    stale = _first_round(h)
    # a new engine on the same round store, as a restarted aggregator builds it
    h.engine = RoundEngine(
        store=h.engine.store,
        aggregator=h.dep.aggregator(bound=h.engine.aggregator.bound),
        mode=h.dep.mode,
        registry=h.engine.registry,
        outlier_filter=h.policy,
        clock=h.clock,
    )
    h.verifier.submit = h.engine.submit
    _second_round(h, stale)

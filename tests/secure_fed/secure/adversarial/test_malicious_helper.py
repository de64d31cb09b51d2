"""A cheating helper: the aggregator runs the same plan and refuses replies outside it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from secure_fed.errors import OpeningRefused
from secure_fed.secure.modes.shares import SharesAggregator
from secure_fed.wire import HELPER_REPLY, decode_frame, encode_frame
from tests.secure_fed.secure.conftest import C, N
from tests.secure_fed.secure.helpers import BOUND, population


@pytest.mark.parametrize(
    "forge",
    [{"step": "moments"}, {"round_id": 7}, {"op_id": "someone-else"}],
)
def test_a_reply_for_another_step_round_or_operation_is_refused(shares, forge) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares

    def lying_helper(request: bytes) -> bytes:
        head, payload = decode_frame(dep.helper.handle(request), HELPER_REPLY)
        if "step" in head:  # a Beaver reply: claim it answers something else
            head = {**head, **forge}
        return encode_frame(HELPER_REPLY, head, payload)

    keys = replace(dep.server_keys(), helper=lying_helper)
    agg = SharesAggregator(shape=(N, C), bound=BOUND, keys=keys, min_participants=3)
    preds = population(4, N, C, seed=9)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    with pytest.raises(OpeningRefused, match="helper reply"):
        agg.score(handles, round_id=1)

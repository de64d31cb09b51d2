"""The shares aggregator's side of the helper channel: its handles, calls and openings.

:class:`_ShareUpload` and :class:`_ShareAggregate` are party 0's opaque handles;
``_call`` sends one tagged request to the helper (:class:`SharesKeys.tagged`),
``_open_linear`` opens a weighted sum the round's plan allows, and
:func:`run_checked` runs a MAC-checked opening (authenticated shares,
:mod:`crypto.shares.mac`). Used by :mod:`secure_fed.secure.modes.shares_aggregator`
and :mod:`secure_fed.secure.modes.shares_scoring`.
"""

from __future__ import annotations

import numpy as np

from crypto.errors import MacCheckFailed
from crypto.shares import ShareLabel
from crypto.shares.mac import PUBLICATION_BITS, MacOpening
from secure_fed.errors import OpeningRefused, SharesOpeningForged
from secure_fed.secure.mode import AggregateHandle, UploadHandle
from secure_fed.secure.modes.shares_keys import CODEC, SharesKeys
from secure_fed.secure.protocol.helper_requests import (
    MAC_PUBLICATION,
    MAC_REVEAL,
    MAC_SEED,
    MAC_SEED_COMMIT,
    MAC_SIGMA,
    MAC_SIGMA_COMMIT,
    MAC_STAGE,
    MAC_STEP,
    MAC_TOSS,
    hex_bytes,
)
from secure_fed.secure.protocol.helper_wire import reply_array
from secure_fed.secure.protocol.vocabulary import AuditEvent, HelperOp, Key, Purpose
from secure_fed.secure.release_plan import PlanTracker
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.wire import encode_array

__all__ = ["run_checked"]


class _ShareUpload(UploadHandle):
    __slots__ = ("macs", "pid", "share", "uid")

    def __init__(
        self, pid: str, uid: str, share: np.ndarray, macs: np.ndarray | None = None
    ) -> None:
        self.pid, self.uid, self.share, self.macs = pid, uid, share, macs


class _ShareAggregate(AggregateHandle):
    __slots__ = ("macs", "pids", "share", "uids", "weights")

    def __init__(
        self,
        pids: list[str],
        uids: list[str],
        weights: list[float],
        share: np.ndarray,
        macs: np.ndarray | None = None,
    ) -> None:
        self.pids, self.uids, self.weights, self.share = pids, uids, weights, share
        self.macs = macs


def _call(
    keys: SharesKeys, header: dict[str, object], *parts: bytes, round_id: int
) -> tuple[dict[str, object], object]:
    header = {**header, "parts": [len(p) for p in parts]}
    return reply_array(keys.helper(keys.tagged(header, b"".join(parts), round_id=round_id)))


def _open_linear(
    keys: SharesKeys, aggregate: _ShareAggregate, tracker: PlanTracker, round_id: int
) -> np.ndarray:
    ask = ReleaseRequest(
        round_id=round_id,
        purpose=Purpose.AGGREGATE,
        contributors=tuple(aggregate.pids),
        value_kind="aggregate",
        shape=(),
        weights=tuple(aggregate.weights),
    )
    _plan_check(tracker, ask)
    header: dict[str, object] = {
        Key.OP: HelperOp.LINEAR,
        Key.PURPOSE: Purpose.AGGREGATE,
        "uids": aggregate.uids,
        "weights": aggregate.weights,
        "round_id": round_id,
    }
    if keys.mac_key is not None:
        total = _open_checked(keys, aggregate, header, round_id).reshape(aggregate.share.shape)
    else:
        _, other = _call(keys, header, round_id=round_id)
        total = aggregate.share + np.asarray(other, dtype=np.uint64)
    tracker.record(ask, None)
    return CODEC.decode(total, frac_bits=CODEC.frac_bits + 16)


def _open_checked(
    keys: SharesKeys, aggregate: _ShareAggregate, header: dict[str, object], round_id: int
) -> np.ndarray:
    """Open the publication with the helper and check its MACs (:func:`run_checked`)."""
    assert keys.mac_key is not None and aggregate.macs is not None
    opening = MacOpening(
        key=keys.mac_key,
        share=aggregate.share.reshape(-1),
        macs=aggregate.macs.reshape(aggregate.macs.shape[0], -1),
        label=ShareLabel(round_id=round_id, participant_id="mac", tensor=MAC_PUBLICATION),
        bound=1 << (PUBLICATION_BITS - 1),
    )
    meta, raw = encode_array(aggregate.share, "u8")
    _, total = run_checked(
        keys, opening, {**header, Key.ARRAY: meta}, raw, round_id=round_id, step=MAC_PUBLICATION
    )
    return total


def run_checked(
    keys: SharesKeys,
    opening: MacOpening,
    header: dict[str, object],
    raw: bytes,
    *,
    round_id: int,
    step: str,
) -> tuple[dict[str, object], np.ndarray]:
    """Run a MAC-checked opening with the helper; return its first reply and the values.

    Three requests: ``header`` (the opening: this side's share ``raw`` and a coin-toss
    commitment; the helper answers with its share and seed), this side's seed and
    check-value commitment (the helper answers with its check values), and this
    side's check values once its own check passed (the helper checks and releases).

    Raises
    ------
    SharesOpeningForged
        If the check fails here (the helper's share, MACs or check values were
        offset): nothing is returned, and ``access.denied`` names the helper.
    """
    first = {**header, MAC_SEED_COMMIT: opening.seed_commitment().hex()}
    reply, other = _call(keys, first, raw, round_id=round_id)
    try:
        total = opening.open(np.asarray(other, dtype=np.uint64))
        opening.receive_seed(hex_bytes(reply.get(MAC_SEED), 32, "the helper's seed"))
        toss: dict[str, object] = {
            Key.OP: HelperOp.MAC_CHECK,
            MAC_STAGE: MAC_TOSS,
            MAC_STEP: step,
            Key.ROUND_ID: round_id,
            MAC_SEED: opening.own_seed().hex(),
            MAC_SIGMA_COMMIT: opening.sigma_commitment().hex(),
        }
        checked, _ = _call(keys, toss, round_id=round_id)
        opening.check(hex_bytes(checked.get(MAC_SIGMA), 16, "the helper's check values"))
    except MacCheckFailed as exc:
        if keys.audit is not None:
            keys.audit.record(
                AuditEvent.ACCESS_DENIED,
                {
                    "party": "aggregator",
                    "op": HelperOp.MAC_CHECK,
                    "step": step,
                    "peer": "helper",
                    "round_id": round_id,
                    "code": SharesOpeningForged.code,
                    "reason": str(exc),
                },
            )
        raise SharesOpeningForged(
            f"the helper's share of the {step} (or this side's own): {exc}"
        ) from exc
    reveal: dict[str, object] = {
        Key.OP: HelperOp.MAC_CHECK,
        MAC_STAGE: MAC_REVEAL,
        MAC_STEP: step,
        Key.ROUND_ID: round_id,
        MAC_SIGMA: opening.sigma_opening().hex(),
    }
    _call(keys, reveal, round_id=round_id)  # the helper checks and releases, or refuses
    return reply, total


def _plan_check(tracker: PlanTracker, ask: ReleaseRequest) -> None:
    """Hold this side (and so the helper's replies) to the round's plan."""
    tracker.require(ask, OpeningRefused)

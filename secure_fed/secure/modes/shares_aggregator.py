"""The ``shares`` mode's aggregator: uploads, linear openings, the round's plan, scoring.

:class:`SharesAggregator` holds party 0's share of every upload and opens values
only with the helper. Importable from :mod:`secure_fed.secure.modes.shares`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    ShareBundle,
    ShareLabel,
    ShareMacKey,
)
from crypto.shares.mac import MAC_LANES, MacOpening, authenticate, mask_label, parse_mask
from secure_fed.errors import (
    AggregationInvalid,
    ModeSetupInvalid,
    OpeningRefused,
    UploadMalformed,
)
from secure_fed.secure.computation.evidence import evidence_sums, open_sums, slice_fields
from secure_fed.secure.computation.share_copies import run_copies
from secure_fed.secure.computation.share_ops import (
    evidence_bound,
    weighted_share,
)
from secure_fed.secure.computation.share_range import check_upload
from secure_fed.secure.mode import (
    AggregateHandle,
    UploadHandle,
    normalized_weights,
)
from secure_fed.secure.modes.planned import PlannedAggregator
from secure_fed.secure.modes.shares_channel import (
    _call,
    _open_linear,
    _ShareAggregate,
    _ShareUpload,
    run_checked,
)
from secure_fed.secure.modes.shares_keys import SharesKeys
from secure_fed.secure.modes.shares_scoring import SharesScoringRound
from secure_fed.secure.protocol.helper_requests import MAC_EVIDENCE
from secure_fed.secure.protocol.helper_wire import (
    plan_request,
    reply_array,
)
from secure_fed.secure.protocol.vocabulary import HelperOp, Key, Step
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
)
from secure_fed.wire import (
    SHARES_UPLOAD,
    decode_frame,
    encode_array,
)

__all__ = ["SharesAggregator"]


class SharesAggregator(PlannedAggregator):
    """Party 0 of the shares mode; opens only through the helper's gate.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    keys
        Enrolment secrets, helper and dealer channels, MAC keys.
    scoring
        Robust pooled Mahalanobis parameters (defaults when ``None``).
    min_participants
        The helper's minimum (a default release plan asks for it).
    detect_copies
        Ask the engine's plans for the ``copies`` step (one near-duplicate count
        per member of the accepted set, opened to both servers; no distance, no
        pair's bit):
        ``u_k = 1 / (1 + copies_k)`` applies as in the other modes. ``None``
        (default): when ``keys`` has a comparison dealer (``compare_dealer``).
    """

    def __init__(
        self,
        *,
        shape: tuple[int, int],
        bound: float,
        keys: SharesKeys,
        scoring: ScoringConfig | None = None,
        min_participants: int = 2,
        detect_copies: bool | None = None,
    ) -> None:
        if not isinstance(keys, SharesKeys):
            raise ModeSetupInvalid("keys must be SharesKeys (secrets, helper, dealer, MAC keys)")
        self.shape, self.bound, self.keys = shape, bound, keys
        self._macs = {
            p: ShareMacKey.derive(s, recipient="aggregator") for p, s in keys.secrets.items()
        }
        self.scoring = scoring or ScoringConfig()
        self.min_participants = min_participants
        found = keys.compare_dealer is not None if detect_copies is None else detect_copies
        self.detects_copies = bool(found)
        self._plans: dict[int, PlanTracker] = {}

    def begin_round(self, plan: ReleasePlan) -> None:
        """Fix ``plan`` with the helper and run the same plan state machine here."""
        if plan.min_participants < self.min_participants:  # never below the gatekeeper's
            plan = replace(plan, min_participants=self.min_participants)
        if self.keys.request_key is None:
            raise ModeSetupInvalid("request_key is needed to fix a release plan with the helper")
        _, fixed = reply_array(self.keys.helper(plan_request(plan, key=self.keys.request_key)))
        if not isinstance(fixed, bytes):
            raise OpeningRefused("the helper did not return the plan it fixed")
        plan = ReleasePlan.from_bytes(fixed)  # the helper's plan is the one that holds
        self._plans[plan.round_id] = PlanTracker(plan=plan, enrolled=frozenset(self.keys.secrets))

    def load(self, payload: bytes) -> UploadHandle:
        """Verify the aggregator's share tag and hand the sealed seed to the helper."""
        try:
            limit = 16 * self.shape[0] * self.shape[1] + (1 << 16)
            head, body = decode_frame(payload, SHARES_UPLOAD, max_bytes=limit)
        except Exception as exc:
            raise UploadMalformed(f"shares upload frame refused: {exc}") from exc
        pid, uid, parts = head.get("participant_id"), head.get("upload_id"), head.get("parts")
        if pid not in self._macs or not isinstance(uid, str):
            raise UploadMalformed(f"shares upload names an unknown participant {pid!r}")
        if not isinstance(parts, list) or len(parts) != 2:
            raise UploadMalformed("shares upload needs two parts")
        if not all(isinstance(p, int) and p >= 0 for p in parts) or sum(parts) != len(body):
            raise UploadMalformed("shares upload parts do not match the payload")
        label = ShareLabel(round_id=0, participant_id=str(pid), tensor=f"pred-{uid}")
        count = self.shape[0] * self.shape[1]
        if bool(head.get("masked", False)) != (self.keys.mac_key is not None):
            raise UploadMalformed(
                "shares upload is masked for authenticated shares"
                if self.keys.mac_key is None
                else "authenticated shares need a masked upload (x - r)"
            )
        try:
            bundle = ShareBundle.parse(
                body[: parts[0]],
                key=self._macs[str(pid)],
                label=label,
                party=0,
                count=count,
            )
        except CryptoError as exc:
            raise UploadMalformed(f"aggregator share of {pid!r} refused: {exc}") from exc
        round_id = max(self._plans, default=0)  # the newest round whose plan is fixed
        share, macs = bundle.values(), None
        if self.keys.mac_key is not None:
            share, macs = self._authenticate(str(pid), uid, share, round_id)
        load: dict[str, object] = {
            Key.OP: HelperOp.LOAD,
            Key.PARTICIPANT_ID: pid,
            Key.UPLOAD_ID: uid,
        }
        forwarded = [body[parts[0] :]]
        if macs is not None:  # the helper checks d against the participant's sealed tag
            forwarded.append(bundle.values().astype("<u8").tobytes())
        _call(self.keys, load, *forwarded, round_id=round_id)
        check_upload(self.keys, pid=str(pid), uid=uid, share=share, round_id=round_id)
        return _ShareUpload(str(pid), uid, share.reshape(self.shape), macs)

    def _authenticate(
        self, pid: str, uid: str, masked: np.ndarray, round_id: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``[x]_0`` and ``[alpha_l x]_0`` from ``d = x - r`` and the dealer's mask shares."""
        assert self.keys.mac_key is not None
        blob = self.keys.deal_masks(
            round_id=round_id, participant_id=pid, upload_id=uid, count=masked.size
        )
        try:
            r0, m0 = parse_mask(
                blob, key=self.keys.dealer_key, label=mask_label(pid, uid), count=masked.size
            )
        except CryptoError as exc:
            raise UploadMalformed(f"the dealer's input mask of {pid!r} refused: {exc}") from exc
        return authenticate(masked, r0, m0, key=self.keys.mac_key)

    def _uploads(self, handles: Mapping[str, UploadHandle]) -> dict[str, _ShareUpload]:
        out = {}
        for pid, h in handles.items():
            if not isinstance(h, _ShareUpload) or h.pid != pid:
                raise AggregationInvalid(f"handle of {pid!r} is not that participant's upload")
            out[pid] = h
        return out

    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Local weighted sum of party 0's shares (weights renormalised, zeros dropped)."""
        ids, w = normalized_weights(handles, weights)
        ups = self._uploads(handles)
        share = weighted_share([ups[p].share for p in ids], w)
        macs = None
        if self.keys.mac_key is not None:
            found = [ups[p].macs for p in ids]
            if any(m is None for m in found):
                raise AggregationInvalid("an upload of an authenticated deployment has no MACs")
            macs = weighted_share([m for m in found if m is not None], w)
        return _ShareAggregate(ids, [ups[p].uid for p in ids], w, share, macs)

    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:
        """Open the round's one publication with the helper (both check it against the plan)."""
        if not isinstance(aggregate, _ShareAggregate):
            raise AggregationInvalid("aggregate is not a shares aggregate")
        tracker = self._tracker(round_id, scored=False)
        return _open_linear(self.keys, aggregate, tracker, round_id).astype(np.float32)

    def evidence(
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float]:
        """Open the evidence of correctness per upload with the helper, one scalar each.

        Each party applies the slice's integer mask to its own shares (local); the
        request names the plan's slice and carries this side's sums, the helper
        applies its own plan's mask and replies with its sums (a symmetric opening).

        Raises
        ------
        ScoringInvalid, OpeningRefused
            No slice in the plan, another mask, or a release the plan refuses.
        """
        tracker, piece, asks = self.evidence_asks(
            handles, mask, round_id=round_id, refusal=OpeningRefused
        )
        ids = [ask.contributors[0] for ask in asks]
        ups = self._uploads(handles)
        mine = evidence_sums([ups[p].share for p in ids], piece)
        meta, raw = encode_array(mine, "u8")
        head: dict[str, object] = {
            Key.OP: HelperOp.EVIDENCE,
            "uids": [ups[p].uid for p in ids],
            "round_id": round_id,
            "array": meta,
            **slice_fields(piece),
        }
        if self.keys.mac_key is not None:  # MAC-checked: the helper releases only after
            reply, total = self._evidence_checked(ids, ups, piece, mine, head, raw, round_id)
            theirs: object = np.zeros_like(total)
            mine = total
        else:
            reply, theirs = _call(self.keys, head, raw, round_id=round_id)
        if reply.get(Key.STEP) != Step.EVIDENCE or reply.get("round_id") != round_id:
            raise OpeningRefused(f"helper reply does not answer the evidence of round {round_id}")
        values = open_sums(
            mine, np.asarray(theirs, dtype=np.uint64), rows=len(piece.rows), classes=self.shape[1]
        )
        for ask, value in zip(asks, values, strict=True):
            tracker.record(ask, np.array([value]))
        return dict(zip(ids, values, strict=True))

    def _evidence_checked(
        self,
        ids: list[str],
        ups: dict[str, _ShareUpload],
        piece: EvidenceSlice,
        mine: np.ndarray,
        head: dict[str, object],
        raw: bytes,
        round_id: int,
    ) -> tuple[dict[str, object], np.ndarray]:
        """Open the evidence scalars MAC-checked (:func:`run_checked`)."""
        assert self.keys.mac_key is not None
        n, c = self.shape
        found = [ups[p].macs for p in ids]
        if any(m is None for m in found):
            raise AggregationInvalid("an upload of an authenticated deployment has no MACs")
        lanes = [
            [m[lane].reshape(n, c) for m in found if m is not None] for lane in range(MAC_LANES)
        ]
        opening = MacOpening(
            key=self.keys.mac_key,
            share=mine,
            macs=np.stack([evidence_sums(lane, piece) for lane in lanes]),
            label=ShareLabel(round_id=round_id, participant_id="mac", tensor=MAC_EVIDENCE),
            bound=evidence_bound(len(piece.rows), c),
        )
        return run_checked(self.keys, opening, head, raw, round_id=round_id, step=MAC_EVIDENCE)

    def copies(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> dict[str, int] | None:
        """Near-duplicate count per accepted upload; only the counts are opened.

        Both servers compute each pair's ``D_jk`` as shares (one batch of Beaver
        products on ``x_j - x_k``), compare it with the threshold they each
        derive from the plan and sum the comparison bits per participant, all on
        shares (:mod:`~secure_fed.secure.computation.share_copies`); only the counts
        are opened, to both. ``None`` when the round's plan has no ``copies`` step.

        Raises
        ------
        OpeningRefused, ScoringInvalid
            A pair the plan refuses, or counts the helper does not confirm.
        """
        found = self.distance_asks(handles, round_id=round_id, refusal=OpeningRefused)
        if found is None:
            return None
        tracker, asks = found
        ups = self._uploads(handles)
        ids = sorted(ups)
        opened, last = run_copies(
            self.keys,
            uids=[ups[p].uid for p in ids],
            shares=[ups[p].share for p in ids],
            tracker=tracker,
            round_id=round_id,
        )
        counts = dict(zip(ids, opened, strict=True))
        if last.get("copies") != opened:
            raise OpeningRefused("the helper's near-duplicate counts differ from this side's")
        for ask in asks:
            tracker.record(ask, None)
        tracker.copies = dict(counts)
        return counts

    def scoring_round(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> SharesScoringRound:
        """Return a fresh scoring backend on this round's shares."""
        return SharesScoringRound(
            keys=self.keys,
            shape=self.shape,
            uploads=self._uploads(handles),
            round_id=round_id,
            tracker=self._tracker(round_id, scored=True),
        )

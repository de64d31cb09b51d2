"""Shares mode: the range check every upload passes before it is stored, scored or summed.

A participant's encoder clips to the public bound, but a malicious participant
can share any ring element. At load the aggregator (party 0) and the helper
(party 1) run :mod:`crypto.shares.range_check` on the upload's two shares with
material the key authority deals; they learn one bit, whether every value lies
in ``[-B * 2^f, B * 2^f]``. An upload that fails is refused with
:class:`~secure_fed.errors.UploadOutOfRange` (the envelope gate writes the
``upload.rejected`` event) and the round goes on with the others. The helper
keeps its own verdict per upload and opens nothing of an upload that has not
passed (:meth:`HelperRangeChecks.require_passed`), so skipping the check on the
aggregator's side does not let an upload through either.

Messages are ``helper_request`` frames with ``op: "range"``: the first carries
the helper's dealt material and the aggregator's message 0; each reply carries
the helper's message of the same index (the helper computes one step ahead).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    RING_PREDICTIONS,
    RangeCheckParty,
    RangeMaterial,
    RangeSpec,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
)
from crypto.shares.wire import open_sealed
from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, UploadOutOfRange
from secure_fed.secure.protocol.vocabulary import HelperOp, Key
from secure_fed.wire import HELPER_REPLY, decode_frame

__all__ = [
    "COMPARE_PARTICIPANT",
    "RANGE_PARTICIPANT",
    "RANGE_SPEC",
    "HelperRangeChecks",
    "RangeDealer",
    "check_upload",
    "compare_spec",
]

_log = logging.getLogger(__name__)

RANGE_SPEC = RangeSpec.for_codec(RING_PREDICTIONS)
"""The public bound of every shares-mode upload value: ``[-2^15, 2^15]`` (8.0 at f = 12)."""
RANGE_PARTICIPANT = "range-check"
"""Participant field of the labels of range-check material and messages."""

COMPARE_PARTICIPANT = "compare"
"""Participant field of the labels of per-value comparison material (the copies step)."""

Reply = tuple[dict[str, object], bytes]


def compare_spec(upper: int) -> RangeSpec:
    """Return the per-value comparison ``0 <= v <= upper``: one opened bit per value.

    The copies step runs it on the hidden pair distances (``v >= 0`` always: a sum of
    squares that cannot wrap), so each bit says "within the threshold".
    """
    return RangeSpec(lower=0, upper=upper, each=True)


class RangeDealer(Protocol):
    """Byte channel to the range-check dealer: a signed request in, two blobs out.

    The request is :func:`~secure_fed.secure.protocol.authority_requests.deal_request`
    with ``purpose="range"``; the reply is (blob for the aggregator, blob for the helper).
    """

    def __call__(self, request: bytes) -> tuple[bytes, bytes]:
        """Deal the range-check material a signed ``request`` asks for."""
        ...


class _Keys(Protocol):
    """What the aggregator's side needs of ``SharesKeys``."""

    @property
    def helper(self) -> Callable[[bytes], bytes]: ...

    @property
    def range_dealer(self) -> RangeDealer | None: ...

    @property
    def dealer_key(self) -> ShareMacKey: ...

    @property
    def channel_key(self) -> ShareMacKey: ...

    def tagged(self, header: Mapping[str, object], payload: bytes, *, round_id: int) -> bytes: ...

    def deal_range(self, *, round_id: int, tensor: str, count: int) -> tuple[bytes, bytes]: ...


def _label(check: str) -> ShareLabel:
    return ShareLabel(round_id=0, participant_id=RANGE_PARTICIPANT, tensor=check)


def _request(keys: _Keys, header: dict[str, object], *parts: bytes, round_id: int) -> Reply:
    header = {**header, Key.OP: HelperOp.RANGE, Key.PARTS: [len(p) for p in parts]}
    reply = keys.helper(keys.tagged(header, b"".join(parts), round_id=round_id))
    return decode_frame(reply, HELPER_REPLY)


def check_upload(keys: _Keys, *, pid: str, uid: str, share: np.ndarray, round_id: int = 0) -> None:
    """Run the range check on one upload with the helper (the aggregator's side).

    Raises
    ------
    UploadOutOfRange
        If a value of the upload lies outside the public bound.
    AuthorityRequestMalformed
        If no range dealer is configured or the helper's messages are refused.
    """
    if keys.range_dealer is None:
        raise AuthorityRequestMalformed("shares mode needs a range dealer (the key authority)")
    values = np.asarray(share, dtype=np.uint64).reshape(-1)
    check = f"{uid}-{secrets.token_hex(4)}"
    blob0, blob1 = keys.deal_range(round_id=round_id, tensor=check, count=values.size)
    try:
        material = RangeMaterial.parse(
            blob0, key=keys.dealer_key, label=_label(check), party=0, count=values.size
        )
        party = RangeCheckParty(material=material, channel_key=keys.channel_key)
        head, theirs = _request(
            keys, {"upload_id": uid, "check": check}, blob1, party.start(values), round_id=round_id
        )
        valid = head.get("verdict")
        while valid is None and (mine := party.advance(theirs)) is not None:
            head, theirs = _request(keys, {"check": check}, mine, round_id=round_id)
    except CryptoError as exc:
        raise AuthorityRequestMalformed(f"range check of {uid} failed: {exc}") from exc
    if not (party.valid if valid is None else valid is True):
        raise UploadOutOfRange(
            f"upload {uid} of {pid!r} has a value outside the public bound "
            f"[-{RING_PREDICTIONS.clip_bound}, {RING_PREDICTIONS.clip_bound}]"
        )


@dataclass
class _Running:
    uid: str
    party: RangeCheckParty
    ahead: bytes


@dataclass
class HelperRangeChecks:
    """The helper's side: one state machine per running check, one verdict per upload."""

    verdicts: dict[str, bool] = field(default_factory=dict)
    _running: dict[str, _Running] = field(default_factory=dict, repr=False)

    def handle(
        self,
        header: Mapping[str, object],
        payload: bytes,
        *,
        seeds: Mapping[str, tuple[str, ShareBundle]],
        dealer_key: ShareMacKey,
        channel_key: ShareMacKey,
    ) -> Reply:
        """Serve one ``range`` request (start a check, or take its next step).

        Raises
        ------
        AuthorityRequestMalformed
            On an unknown check or upload, refused material or a refused message.
        """
        check = header.get("check")
        if not isinstance(check, str):
            raise AuthorityRequestMalformed("range request needs a 'check' name")
        try:
            if "upload_id" in header:
                return self._start(check, header, payload, seeds, (dealer_key, channel_key))
            return self._step(check, payload)
        except CryptoError as exc:
            self._running.pop(check, None)
            raise AuthorityRequestMalformed(f"range check {check} refused: {exc}") from exc

    def _start(
        self,
        check: str,
        header: Mapping[str, object],
        payload: bytes,
        seeds: Mapping[str, tuple[str, ShareBundle]],
        keys: tuple[ShareMacKey, ShareMacKey],
    ) -> Reply:
        uid = header.get("upload_id")
        if not isinstance(uid, str) or uid not in seeds:
            raise AuthorityRequestMalformed(f"helper holds no share of upload {uid!r}")
        if uid in self.verdicts:  # a reload after a restart: one check per upload
            return {"check": check, "verdict": self.verdicts[uid]}, b""
        if check in self._running or any(r.uid == uid for r in self._running.values()):
            raise AuthorityRequestMalformed(f"a range check of upload {uid} is already running")
        material, first = _parts(header, payload)
        share = seeds[uid][1].values()
        parsed = RangeMaterial.parse(
            open_sealed(keys[0], material),
            key=keys[0],
            label=_label(check),
            party=1,
            count=share.size,
        )
        party = RangeCheckParty(material=parsed, channel_key=keys[1])
        mine = party.start(share)
        ahead = party.advance(first)
        assert ahead is not None  # the circuit has at least one AND layer
        self._running[check] = _Running(uid, party, ahead)
        return {"check": check}, mine

    def _step(self, check: str, payload: bytes) -> Reply:
        running = self._running.get(check)
        if running is None:
            raise AuthorityRequestMalformed(f"no running range check {check!r}")
        reply, ahead = running.ahead, running.party.advance(payload)
        if ahead is None:
            del self._running[check]
            self.verdicts[running.uid] = running.party.valid
            if not running.party.valid:
                _log.warning(
                    "upload %s failed the range check; it will never be opened", running.uid
                )
        else:
            running.ahead = ahead
        return {"check": check}, reply

    def require_passed(self, uids: list[str]) -> None:
        """Refuse to open anything of an upload that has not passed the range check.

        Raises
        ------
        OpeningRefused
            If an upload was never checked or failed its check.
        """
        unchecked = [u for u in uids if not self.verdicts.get(u, False)]
        if unchecked:
            raise OpeningRefused(f"uploads {unchecked} have not passed the range check")


def _parts(header: Mapping[str, object], payload: bytes) -> tuple[bytes, bytes]:
    sizes = header.get("parts")
    if (
        not isinstance(sizes, list)
        or len(sizes) != 2
        or not all(isinstance(s, int) and s >= 0 for s in sizes)
        or sum(sizes) != len(payload)
    ):
        raise AuthorityRequestMalformed("range start needs two parts: material and message 0")
    return payload[: sizes[0]], payload[sizes[0] :]

"""The helper's uploads: each participant's sealed share loaded, authenticated, bound to a round.

:class:`HelperUploads` is the part of
:class:`~secure_fed.secure.parties.helper.HelperParty` that takes in uploads
(op ``load``): the participant's seed, sealed with SM4-GCM under the key the
helper shares with that participant, and the HMAC-SM3 tag of the share frame;
with authenticated shares (:mod:`crypto.shares.mac`), the masked values
``d = x - r`` checked against the participant's sealed tag, and the helper's
shares of ``x`` and of its MACs. An upload is bound to one round at its first
opening, after the round's upload notices
(:class:`~secure_fed.secure.upload_notices.NoticeBook`).
"""

from __future__ import annotations

import hmac

import numpy as np

from crypto.errors import CryptoError, ShareTampered
from crypto.shares import ShareBundle, ShareLabel, ShareMacKey
from crypto.shares.mac import (
    MacKeyShare,
    authenticate,
    helper_mask,
    mask_label,
    masked_message,
)
from crypto.sm import SM4GCM
from secure_fed.errors import UploadMalformed
from secure_fed.secure.parties.helper_copies import Reply
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.protocol.codecs import split_parts
from secure_fed.secure.protocol.helper_requests import LoadRequest
from secure_fed.secure.protocol.helper_wire import seal_key
from secure_fed.secure.protocol.vocabulary import Key
from secure_fed.secure.release_policy import DecryptionRecord, ReleasePolicy, ReleaseRequest
from secure_fed.secure.upload_notices import NoticeBook

__all__ = ["HelperUploads"]


class HelperUploads:
    """The uploads of the helper (a base of ``HelperParty``, which holds the state).

    The attributes below are the helper's fields this part reads and writes.
    """

    shape: tuple[int, int]
    secrets: dict[str, bytes]
    registry: HelperRegistry
    mac_key: MacKeyShare | None
    mask_secret: bytes | None
    log: list[DecryptionRecord]
    policy: ReleasePolicy
    notices: NoticeBook
    _seeds: dict[str, tuple[str, ShareBundle]]
    _round_uploads: dict[int, dict[str, str]]
    _mac_shares: dict[str, np.ndarray]

    def _bind(self, ask: ReleaseRequest, uids: list[str]) -> None:
        """Bind the uploads to the round: an upload is opened in one round only.

        First the round's upload notices: no noticed participant left out of the
        roster, no upload other than the noticed one (the SM3 of its sealed share).
        """
        shares = self.notices.share_digests((self._seeds[u][0], u) for u in uids)
        self.notices.require(ask, shares, log=self.log)
        stale = [u for u in uids if not self.registry.bind_upload(u, ask.round_id)]
        if stale:
            self.policy.refuse(ask, f"uploads {stale} belong to another round")
        first = self._round_uploads.setdefault(ask.round_id, {})
        for uid in uids:  # the upload each participant's first opening of the round used
            first.setdefault(self._seeds[uid][0], uid)

    def _load(self, header: dict[str, object], payload: bytes) -> Reply:
        load = LoadRequest.from_wire(header)
        pid, uid = load.participant_id, load.upload_id
        if pid not in self.secrets:
            raise UploadMalformed(f"helper does not know participant {pid!r}")
        if uid in self._seeds:
            if self._seeds[uid][0] != pid:
                raise UploadMalformed(f"upload id {uid} was already used by another participant")
            return {Key.OK: True}, b""  # idempotent reload after a restart
        secret = self.secrets[pid]
        label = ShareLabel(round_id=0, participant_id=pid, tensor=f"pred-{uid}")
        masked = b""
        if self.mac_key is not None:  # the sealed tag, then the masked values d = x - r
            parts = header.get(Key.PARTS)
            if not isinstance(parts, list) or len(parts) != 2:
                raise UploadMalformed("an authenticated load carries the sealed tag and d")
            payload, masked = split_parts(header, payload)
        try:
            blob = SM4GCM(seal_key(secret)).decrypt(
                payload, associated_data=f"{pid}|{uid}".encode()
            )
            if self.mac_key is not None:
                bundle = self._authenticated(pid, uid, blob, masked, label)
            else:
                bundle = ShareBundle.parse(
                    blob,
                    key=ShareMacKey.derive(secret, recipient="helper"),
                    label=label,
                    party=1,
                    seeded=True,
                    count=self.shape[0] * self.shape[1],
                )
        except CryptoError as exc:
            raise UploadMalformed(f"helper share of {pid!r} refused: {exc}") from exc
        self._seeds[uid] = (pid, bundle)
        self.notices.loaded_share(uid, payload)  # what a notice to the helper names
        return {Key.OK: True}, b""

    def _authenticated(
        self, pid: str, uid: str, tag: bytes, masked: bytes, label: ShareLabel
    ) -> ShareBundle:
        """Keep ``[x]_1`` and ``[alpha_l x]_1`` of the masked upload ``d = x - r``.

        ``d`` is the aggregator's copy; the participant's tag under the key it shares
        with the helper (sealed) proves the helper sees the same ``d``.

        Raises
        ------
        ShareTampered
            If ``d`` has another size or does not match the participant's tag.
        """
        assert self.mac_key is not None and self.mask_secret is not None
        count = self.shape[0] * self.shape[1]
        key = ShareMacKey.derive(self.secrets[pid], recipient="helper")
        if len(masked) != 8 * count or not hmac.compare_digest(
            tag, key.tag(masked_message(label, masked))
        ):
            raise ShareTampered("the masked upload does not match the participant's tag")
        d = np.frombuffer(masked, dtype="<u8").astype(np.uint64)
        r1, m1 = helper_mask(self.mask_secret, mask_label(pid, uid), count)
        share, macs = authenticate(d, r1, m1, key=self.mac_key)
        self._mac_shares[uid] = macs
        return ShareBundle.from_values(share, label=label, party=1, frac_bits=12)

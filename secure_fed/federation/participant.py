"""A federated-distillation participant: DP-SGD locally, predictions out, soft labels in.

One participant's side of a round (docs/federation.md, section 1; FedMD, Li
and Wang 2019; FedDF, Lin et al. 2020):

1. private DP-SGD on its own data through a
   :class:`~secure_fed.learning.private_training.PrivateTrainer`,
   which reserves budget before every step; a refused reservation stops the
   participant's private training for good, with the ledger's message, and
   the participant keeps taking part through distillation on public data;
2. predictions on the public set (centered logits clipped to the public
   bound, ``secure_fed.learning.distill.predict_public``), optionally poisoned by an
   evaluation attack, encoded by the mode's :class:`UploadEncoder` and framed
   as upload bytes;
3. on publication bytes: soft labels at the scheduled temperature, then
   distillation with the decaying weight ``lambda_t``.

Only bytes cross the boundary; the participant never sees another's upload.
:class:`~secure_fed.federation.handlers.ParticipantHandler` adds the signing
key and exposes the participant as a message handler.
"""

from __future__ import annotations

import logging
import secrets
import struct
from typing import Protocol

import numpy as np
from torch import nn

from crypto.sm import SM2PrivateKey
from crypto.sm.sm3 import sm3_digest
from secure_fed.errors import RoundConfigInvalid, UploadMalformed
from secure_fed.evaluation.attacks import Attack
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.messages import (
    UploadHeader,
    decode_publication,
    decode_upload,
    encode_upload,
)
from secure_fed.federation.schema import ModelSchema
from secure_fed.federation.stages import RoundConfig
from secure_fed.learning.distill import (
    distill,
    distill_weight,
    predict_public,
    soft_labels_from_aggregate,
    temperature_schedule,
)
from secure_fed.learning.private_training import TrainReport
from secure_fed.secure.mode import UploadEncoder
from secure_fed.secure.protocol.upload_notice import notice_digest, sign_notice
from secure_fed.wire import ENVELOPE, decode_frame

__all__ = ["LocalTrainer", "Participant", "public_set_digest", "upload_notice"]

_log = logging.getLogger(__name__)

_MAX_PUBLICATION = 64 * 1024 * 1024


class LocalTrainer(Protocol):
    """Private training of one participant (``PrivateTrainer`` or a baseline)."""

    def train_round(self, round_id: str) -> TrainReport:
        """Train one round (reserving budget first when private)."""
        ...


def public_set_digest(public_x: np.ndarray) -> str:
    """Hex SM3 of the public set (float32, C order, shape-prefixed)."""
    arr = np.ascontiguousarray(public_x, dtype="<f4")
    return sm3_digest(repr(arr.shape).encode("ascii") + arr.tobytes()).hex()


def upload_notice(
    envelope: bytes, *, key: SM2PrivateKey, party: str, receipt_required: bool = False
) -> bytes | None:
    """Return the signed upload notice of ``envelope`` to gatekeeper ``party``, or ``None``.

    Sent to the round's opening gatekeeper before the envelope goes to the aggregator
    (:mod:`secure_fed.secure.upload_notices`): from then on no roster of the round may
    leave this participant out, nor list another upload of it. A participant notices
    only an upload it stands behind: ``None`` when ``receipt_required`` and the envelope
    carries no budget receipt (the aggregator refuses it; noticed, it would abort the
    round).

    Raises
    ------
    UploadMalformed, UploadNoticeMalformed
        If ``envelope`` is not a sealed upload envelope (``seal_upload``).
    """
    head, body = decode_frame(envelope, ENVELOPE, max_bytes=len(envelope))
    if receipt_required and head.get("receipt") is None:
        return None
    # the envelope's payload: u16 signature length | DER signature | upload frame
    (sig_len,) = struct.unpack_from(">H", body) if len(body) >= 2 else (len(body),)
    upload = body[2 + sig_len :]
    header, payload = decode_upload(upload, max_bytes=len(upload))
    return sign_notice(
        key,
        round_id=header.round_id,
        participant_id=header.participant_id,
        party=party,
        upload_sm3=notice_digest(payload, party=party),
    )


class Participant:
    """One party: its model, private trainer, public set, and upload encoder.

    Parameters
    ----------
    participant_id
        Unique id (also the ledger participant id).
    model
        Any Opacus-compatible torch module producing ``C`` logits.
    schema
        The declared model schema.
    trainer
        DP-SGD trainer on the private data, or None for no private training.
    public_x
        The public reference set.
    num_samples
        Private sample count, declared as the public weight.
    encoder
        Participant side of the aggregation mode.
    mode
        Mode name written into upload headers.
    distill_settings
        Distillation knobs.
    attack
        Evaluation-only poisoning of what is sent; None for an honest party.
    seed
        Seed for distillation shuffling.
    """

    def __init__(
        self,
        *,
        participant_id: str,
        model: nn.Module,
        schema: ModelSchema,
        trainer: LocalTrainer | None,
        public_x: np.ndarray,
        num_samples: int,
        encoder: UploadEncoder,
        mode: str,
        distill_settings: DistillSettings | None = None,
        attack: Attack | None = None,
        seed: int = 0,
    ) -> None:
        self.participant_id = participant_id
        self.model, self.schema, self.trainer = model, schema, trainer
        self.public_x = np.asarray(public_x, dtype=np.float32)
        self.public_sm3 = public_set_digest(self.public_x)
        self.num_samples, self.encoder, self.mode = num_samples, encoder, mode
        self.settings = distill_settings if distill_settings is not None else DistillSettings()
        self.attack, self.seed = attack, seed
        self.stop_reason: str | None = None

    @property
    def private_training_stopped(self) -> bool:
        """True once a budget refusal ended this participant's private training."""
        return self.stop_reason is not None

    def train_private(self, round_id: str) -> TrainReport | None:
        """Run one round of DP-SGD (reserving budget first); None when stopped or absent."""
        if self.trainer is None or self.stop_reason is not None:
            return None
        report = self.trainer.train_round(round_id)
        if not report.trained:
            self.stop_reason = report.refused_reason or "budget reservation refused"
            _log.warning(
                "participant %s stops private training: %s", self.participant_id, self.stop_reason
            )
        return report

    def upload(self, config: RoundConfig) -> bytes:
        """Predict on the public set and return signed-ready upload bytes for ``config``.

        Raises
        ------
        RoundConfigInvalid
            If the round names another public set (SM3 mismatch) or output spec.
        """
        if config.public_set_sm3 != self.public_sm3:
            raise RoundConfigInvalid(
                f"round {config.round_id} names public set {config.public_set_id!r} whose SM3 "
                f"differs from the one {self.participant_id!r} holds"
            )
        preds = predict_public(self.model, self.public_x)
        if self.attack is not None:
            preds = self.attack(preds)
        payload = self.encoder.encode(preds)
        header = UploadHeader(
            round_id=config.round_id,
            participant_id=self.participant_id,
            mode=self.mode,
            schema=self.schema,
            schema_hash=config.schema.schema_hash(),
            num_samples=self.num_samples,
            nonce=secrets.token_hex(16),
            payload_sm3=sm3_digest(payload).hex(),
        )
        return encode_upload(header, payload)

    def learn(self, publication: bytes, *, total_rounds: int) -> float:
        """Distill from published soft labels; return the temperature used.

        Rounds are numbered from 1, so the publication of round ``r`` is step
        ``t = r - 1`` of the schedules: the temperature follows the cosine
        schedule over ``total_rounds`` and the distillation weight decays like
        ``1 / sqrt(t + 1)``.
        """
        pub = decode_publication(publication, max_bytes=_MAX_PUBLICATION)
        if pub.aggregate.shape[0] != len(self.public_x):
            rows, expected = pub.aggregate.shape[0], len(self.public_x)
            raise UploadMalformed(f"publication has {rows} rows, the public set {expected}")
        round_index = pub.round_id - 1
        temperature = temperature_schedule(round_index, total_rounds)
        soft = soft_labels_from_aggregate(pub.aggregate, temperature=temperature)
        distill(
            self.model,
            self.public_x,
            soft,
            temperature=temperature,
            weight=distill_weight(round_index),
            epochs=self.settings.epochs,
            lr=self.settings.lr,
            batch_size=self.settings.batch_size,
            seed=self.seed + round_index,
            logit_adjustment=self.settings.logit_adjustment,
        )
        return float(temperature)

"""The two roles of a round as message handlers: message in, message out, no transport.

* :class:`AggregatorHandler` is the aggregator: it opens a round from a
  :class:`~secure_fed.federation.stages.RoundConfig`, takes signed upload
  envelopes (bytes) and returns the publication (bytes).
* :class:`ParticipantHandler` is one participant: a round config in, private
  training and a signed upload envelope (bytes) out; the publication (bytes) in,
  distillation.

:class:`~secure_fed.federation.federation.Federation` runs both in one process
and only moves the bytes between them; a deployment runs the same handlers
behind a network transport. Neither handler sees the other's objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from crypto.sm import SM2PrivateKey
from privacy_ledger.budget.receipts import DPPlan
from privacy_ledger.errors import LedgerError
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.envelope import EnvelopeVerifier, seal_upload
from secure_fed.federation.messages import training_label
from secure_fed.federation.stages import RoundConfig

if TYPE_CHECKING:  # the aggregator's process loads neither torch nor Opacus
    from secure_fed.federation.participant import Participant
    from secure_fed.learning.private_training import TrainReport

__all__ = ["AggregatorHandler", "ParticipantHandler"]

_log = logging.getLogger(__name__)


class AggregatorHandler:
    """The aggregator as a message handler over a :class:`RoundEngine`.

    Parameters
    ----------
    engine
        The round engine (stages, scoring, weighting, publication).
    gate
        The envelope verifier in front of ``engine.submit``.
    """

    def __init__(self, *, engine: RoundEngine, gate: EnvelopeVerifier) -> None:
        self.engine, self.gate = engine, gate

    def open_round(self, config: RoundConfig) -> RoundConfig:
        """Open round ``config.round_id`` and start collecting; return the config to send out."""
        self.engine.open(config)
        self.engine.start_collecting(config.round_id)
        return config

    def handle_upload(self, envelope: bytes, *, round_id: int) -> str:
        """Verify and store one signed upload envelope; return its sender.

        Raises
        ------
        SecureFedError
            Whatever the envelope gate or the round engine refuse (typed, with a code).
        """
        return self.gate.accept(envelope, round_id=round_id)

    def finish_round(self, round_id: int) -> bytes:
        """Close collection, filter, aggregate and return the publication bytes.

        Raises
        ------
        TooFewParticipants
            When too few uploaded or the filter left too few (the round is aborted).
        """
        self.engine.close(round_id)
        self.engine.filter(round_id)
        return self.engine.publish(round_id)


class ParticipantHandler:
    """One participant as a message handler.

    Parameters
    ----------
    participant
        The participant (model, private trainer, public set, encoder).
    signing_key
        The participant's SM2 key; the aggregator holds the public half.
    params
        The mode's envelope parameter label (``SecureDeployment.params``).
    total_rounds
        Length of the distillation schedules.
    receipts
        Asks the privacy ledger for the budget receipt of this participant's
        committed charge under a round label (``r<round>``); None when the
        aggregator requires no receipts.
    delta
        The DP delta of the participant's private training (part of the plan
        the receipt binds).
    """

    def __init__(
        self,
        *,
        participant: Participant,
        signing_key: SM2PrivateKey,
        params: str,
        total_rounds: int,
        receipts: Callable[[str], bytes] | None = None,
        delta: float = 1e-5,
    ) -> None:
        self.participant, self.params, self.total_rounds = participant, params, total_rounds
        self._key = signing_key
        self.receipts, self.delta = receipts, delta
        self.report: TrainReport | None = None

    def __repr__(self) -> str:
        return f"ParticipantHandler({self.participant.participant_id!r})"

    def handle_round(self, config: RoundConfig) -> bytes:
        """Train privately for the round, then return the signed upload envelope.

        The training report (None when private training stopped or is absent)
        stays in :attr:`report`, for the participant's own records.

        Raises
        ------
        RoundConfigInvalid
            If the round names a public set this participant does not hold.
        """
        self.report = None
        label = training_label(config.round_id)
        self.report = self.participant.train_private(label)
        upload = self.participant.upload(config)
        plan, receipt = self._charge(label)
        return seal_upload(upload, key=self._key, params=self.params, plan=plan, receipt=receipt)

    def _charge(self, label: str) -> tuple[DPPlan | None, bytes | None]:
        """Return the DP plan run for ``label`` and the ledger's receipt of its charge.

        Without private training this round (refused, stopped, or absent) there
        is neither: an aggregator that requires receipts then refuses the upload.
        """
        report = self.report
        if report is None or not report.trained or self.receipts is None:
            return None, None
        plan = DPPlan(
            noise_multiplier=report.noise_multiplier,
            sample_rate=report.sample_rate,
            steps=report.steps,
            delta=self.delta,
        )
        try:
            return plan, self.receipts(label)
        except LedgerError as exc:
            _log.warning("%r has no budget receipt for %s: %s", self, label, exc)
            return plan, None

    def handle_publication(self, publication: bytes) -> float:
        """Distill from the publication bytes; return the temperature used."""
        return self.participant.learn(publication, total_rounds=self.total_rounds)

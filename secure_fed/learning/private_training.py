"""Private local training: DP-SGD stated as goals, with per-model clipping.

DP-SGD (Abadi et al. 2016) clips every example's gradient to norm ``C`` and
adds Gaussian noise of standard deviation ``sigma * C`` to the sum; Opacus
(Yousefpour et al. 2021) implements it with Poisson sampling, whose privacy is
accounted by Renyi DP (Mironov 2017; Mironov, Talwar and Zhang 2019).

*Privacy unit*: one training example (one row) of a participant's private
data. The accountant bounds add/remove-one-row neighbours; because the row
count is published (upload header, and the sample rate is computed from it),
the guarantee to quote is replacement of one row, at most
``(2 epsilon, (1 + e^epsilon) delta)`` (``docs/learning.md``, section 3). The
public set ``D_pub`` and the published soft labels are public; training on
them (distillation) is not charged. Opacus ``secure_mode`` is off (no
torchcsprng): every ledger event records ``secure_rng: false``.

*Goals, not knobs*: a participant states ``DPGoal(epsilon,
delta, rounds)``; :class:`PrivateTrainer` asks the budget gate, which knows the
participant's whole mechanism history, for the noise multiplier, reserves the
round's mechanism before touching data, and commits after.

*Clipping scaled per model*: each participant clips at
``C_k = C_ref * sqrt(P_k / P_ref)`` (:mod:`secure_fed.learning.clipping`).
"""

from __future__ import annotations

import logging
import math
import secrets
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

import numpy as np
import opacus
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privacy_ledger.budget.mechanism import MechanismEvent
from secure_fed.errors import LearningParameterInvalid, PrivateTrainingFailed
from secure_fed.learning.budget_gate import BudgetGate, refusal_errors
from secure_fed.learning.clipping import (
    CLIPPING_MODES,
    P_REF,
    clipping_norm,
    per_layer_clipping_norms,
)
from secure_fed.learning.logit_adjustment import (
    LogitAdjustment,
    ReleasedPrior,
    adjusted_cross_entropy,
    release_prior,
    resume_prior,
)
from secure_fed.learning.models import check_private_compatible
from secure_fed.learning.privacy_audit import AuditResult, CanaryAudit

__all__ = [
    "DPGoal",
    "InsecureSeededNoise",
    "PrivateTrainer",
    "TrainReport",
    "evaluate",
    "train_nonprivate",
]

logger = logging.getLogger(__name__)

#: Observer of one private run: (private module, DP optimizer, Poisson loader).
PrivateRunObserver = Callable[
    [nn.Module, torch.optim.Optimizer, DataLoader[tuple[torch.Tensor, ...]]], None
]


@dataclass(frozen=True, kw_only=True)
class DPGoal:
    """What a participant wants: "epsilon 8 at delta 1e-5 over 10 rounds".

    Parameters
    ----------
    epsilon
        Total epsilon over all rounds (> 0).
    delta
        Delta (0 < delta < 1); typically below 1 / (number of private rows).
    rounds
        Number of private training rounds the goal covers (>= 1).
    """

    epsilon: float
    delta: float
    rounds: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise LearningParameterInvalid(f"epsilon must be finite and > 0, got {self.epsilon!r}")
        if not 0 < self.delta < 1:
            raise LearningParameterInvalid(f"delta must be in (0, 1), got {self.delta!r}")
        if self.rounds < 1:
            raise LearningParameterInvalid(f"rounds must be >= 1, got {self.rounds!r}")


def _tensors(x: np.ndarray, y: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    xt = torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32))
    yt = torch.as_tensor(np.asarray(y if y is not None else [], dtype=np.int64))
    return xt, yt


def check_xy(x: np.ndarray, y: np.ndarray) -> None:
    """Validate a feature/label pair (same length, non-empty, finite)."""
    if len(x) == 0 or len(x) != len(y):
        raise LearningParameterInvalid(
            f"x and y must be non-empty and of equal length, got {len(x)} and {len(y)}"
        )
    if not np.isfinite(np.asarray(x)).all():
        raise LearningParameterInvalid("x has NaN or infinite values")


def check_positive(**values: float) -> None:
    """Raise :class:`LearningParameterInvalid` naming the first value that is not > 0."""
    for name, value in values.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise LearningParameterInvalid(f"{name} must be a finite number > 0, got {value!r}")


#: Total gradient norm the non-private path clips every batch gradient to.
NONPRIVATE_MAX_GRAD_NORM = 1.0


def train_nonprivate(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    max_grad_norm: float = NONPRIVATE_MAX_GRAD_NORM,
) -> None:
    """Train without privacy (baselines only: local-only without DP, centralized).

    Parameters
    ----------
    model
        Trained in place with SGD (momentum 0.9) and cross-entropy.
    x, y
        Features and integer labels.
    epochs, lr, batch_size
        Usual meaning (all > 0).
    seed
        Seed of the shuffling order.
    max_grad_norm
        Each batch gradient is clipped to this total L2 norm before the step
        (Pascanu, Mikolov and Bengio 2013), so one step moves the weights by
        at most about ``lr * max_grad_norm`` (times the momentum gain), as a
        DP-SGD step does: without it, the federation's nominal lr 0.3 left some
        models at chance level after one round (``docs/benchmarks.md``).
    """
    check_xy(x, y)
    check_positive(epochs=epochs, lr=lr, batch_size=batch_size, max_grad_norm=max_grad_norm)
    xt, yt = _tensors(x, y)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    model.train()
    for _ in range(int(epochs)):
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), int(batch_size)):
            idx = order[start : start + int(batch_size)]
            optimizer.zero_grad()
            torch.autograd.backward(nn.functional.cross_entropy(model(xt[idx]), yt[idx]))
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()


@torch.no_grad()
def predict_logits(model: nn.Module, x: np.ndarray, *, batch_size: int = 1024) -> np.ndarray:
    """Raw logits ``float32 [N, C]`` in eval mode (the training mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        xt, _ = _tensors(x)
        chunks = [model(xt[i : i + batch_size]) for i in range(0, len(xt), batch_size)]
        return torch.cat(chunks).numpy().astype(np.float32)
    finally:
        model.train(was_training)


def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of ``model`` on ``(x, y)``, in [0, 1].

    Parameters
    ----------
    model
        Any classifier returning logits.
    x, y
        Features and integer labels (non-empty, same length).

    Returns
    -------
    float
        Fraction of rows whose arg-max logit equals the label.
    """
    check_xy(x, y)
    predicted = predict_logits(model, x).argmax(axis=1)
    return float((predicted == np.asarray(y)).mean())


def fresh_generator() -> torch.Generator:
    """Torch generator seeded from ``secrets`` (never from the public run seed).

    DP noise and Poisson sampling must not be reproducible from a seed an
    adversary may know: a known noise draw could be subtracted.
    """
    return torch.Generator().manual_seed(secrets.randbits(63))


@dataclass(frozen=True, kw_only=True)
class InsecureSeededNoise:
    """INSECURE: DP noise and Poisson sampling drawn from a generator seeded by ``seed``.

    Only for demos and tests that need identical numbers run after run
    (``secure-fed demo --reproducible``). Anyone who knows the seed can
    regenerate the noise and subtract it, which voids the DP guarantee, so a
    trainer given this records ``noise_rng: insecure-seeded`` in every ledger
    event it reserves. Never the default.

    Parameters
    ----------
    seed
        Seed of the participant's noise; combined with the round and purpose.
    """

    seed: int

    #: What the ledger events record for this source.
    label = "insecure-seeded"

    def generator(self, rounds_trained: int, purpose: int) -> torch.Generator:
        """Return the generator for one round (``purpose`` 0: sampling, 1: noise)."""
        return torch.Generator().manual_seed((self.seed * 1_000 + rounds_trained) * 2 + purpose)


@dataclass(frozen=True, kw_only=True)
class TrainReport:
    """Outcome of one private training round of one participant.

    Attributes
    ----------
    round_id
        The round.
    trained
        ``False`` when the budget refused: nothing was trained or spent.
    refused_reason
        The refusal message, or ``None``.
    noise_multiplier, sample_rate, steps, max_grad_norm
        The mechanism reserved and run (``noise_multiplier`` is 0.0 and
        ``steps`` 0 when refused before calibration).
    epsilon_spent
        Total epsilon of the participant's committed history after the round,
        as the gate recomputes it.
    loss
        Mean training loss over the round's non-empty batches (nan if none).
    secure_rng
        Always ``False``: Opacus ``secure_mode`` needs torchcsprng, which does
        not install on current torch (``docs/learning.md``, section 5).
    """

    round_id: str
    trained: bool
    refused_reason: str | None
    noise_multiplier: float
    sample_rate: float
    steps: int
    max_grad_norm: float
    epsilon_spent: float
    loss: float = float("nan")
    secure_rng: bool = False


class PrivateTrainer:
    """DP-SGD rounds of one participant, gated by a privacy budget.

    Parameters
    ----------
    model
        The participant's plain module (never left wrapped: each round wraps it
        in an Opacus ``GradSampleModule`` and removes the hooks afterwards, so
        distillation and prediction use the same module in between).
    x, y
        The participant's private training data.
    goal
        The participant's privacy goal.
    budget
        A :class:`~secure_fed.learning.budget_gate.BudgetGate` (the privacy ledger, or the
        in-memory gate in tests and benchmarks).
    participant_id, asset_id
        Whose budget is charged.
    batch_size
        Expected Poisson batch size ``B``; Opacus samples each row with
        probability ``q = 1 / ceil(N / B)`` (about ``B / N``).
    lr
        Learning rate in units of the clipping norm: SGD (momentum 0.9) runs
        with ``lr / C_k``, because the size of a DP-SGD step (signal and noise
        alike) is proportional to ``lr * C`` (De et al. 2022). 0.1 works well
        on digits with 5 epochs per round.
    epochs_per_round
        Passes over the data per round (``ceil(N/B)`` steps each, as Opacus counts).
    steps_per_round
        Alternative to ``epochs_per_round``: exact number of DP-SGD steps.
    seed
        Kept for symmetry with the baselines (``self.seed``) but deliberately
        unused: the only randomness of private training is the DP noise and
        the Poisson sampling, and both come from ``secrets`` so that nobody
        who knows the (public) run seed can reproduce them.
    clipping
        ``"flat"`` (one norm ``C_k``) or ``"per_layer"`` (norms from
        :func:`~secure_fed.learning.clipping.per_layer_clipping_norms`, same total).
    c_ref, p_ref
        Clipping rule parameters (:func:`~secure_fed.learning.clipping.clipping_norm`).
    max_noise_multiplier
        Refuse the round (train nothing, spend nothing) when the budget left
        would need more noise than this: such a round only damages the model.
    insecure_noise
        ``None`` (the default): noise and sampling from :func:`fresh_generator`.
        An :class:`InsecureSeededNoise` makes them reproducible from its seed,
        which voids the DP guarantee; every reserved event then records
        ``noise_rng: insecure-seeded``. Demos and tests only.
    logit_adjustment
        ``None`` (plain cross-entropy) or a
        :class:`~secure_fed.learning.logit_adjustment.LogitAdjustment`: before
        the first round the participant's class counts are released by a
        Gaussian mechanism charged to the same budget (event round id
        ``<round>-label-prior``), and every DP-SGD step minimises the
        cross-entropy of ``logits + tau * log(noisy prior)`` (Menon et al. 2021).
    audit
        ``None`` (no audit) or a :class:`~secure_fed.learning.privacy_audit.CanaryAudit`:
        its included canaries are appended to ``x, y`` before anything else, so
        the row count, the Poisson sample rate the ledger is told and the label
        prior are those of the rows actually trained on; after every committed
        round the model is audited over the rounds trained so far
        (:attr:`audits`, :attr:`on_audit`).
    test_noise_scale
        TEST ONLY. Fraction of the reserved noise multiplier actually applied
        (1.0, the default: all of it). Below 1 the ledger still charges the
        reserved multiplier while DP-SGD adds less (0.0: no noise at all), which
        voids the guarantee; every reserved event then records
        ``noise_applied``. It exists so that a test can show the audit catch
        a run whose accounting is false.

    Attributes
    ----------
    on_private
        Optional observer, called once per round with the private module, the
        ``DPOptimizer`` and the Poisson data loader exactly as Opacus built them,
        before the first step. It lets tests read the noise multiplier and
        clipping norm Opacus actually applies (not the trainer's report) and
        compare them with the ledger's recorded event. ``None`` by default.
    prior, on_prior
        The label prior once released (a
        :class:`~secure_fed.learning.logit_adjustment.ReleasedPrior`), and an
        optional callback that keeps it, called before its charge is committed
        and again after (a deployed node's state directory). A restarted
        participant hands the kept prior to :meth:`adopt_prior`: it is reused,
        never released or charged a second time.
    audits, on_audit, audit_from
        The audit results so far (one per committed round, each over rounds
        ``audit_from..this``), an optional callback given each one as it is made
        (the ledger writer), and the ledger label of the first charge the audits
        span (set by the first audit; a restarted participant that kept its
        canaries sets it to the label of its first run).

    Raises
    ------
    ModelUnsupported
        The model has layers Opacus cannot train privately (checked here,
        before any round).
    LearningParameterInvalid
        Any other argument is out of range (the message names it).

    Notes
    -----
    ``goal.epsilon`` is the total epsilon of the asset's whole history once
    the goal's rounds are done. Noise calibration is history-aware and redone
    every round: the gate is asked for the smallest noise multiplier such that
    the committed history plus the *remaining* rounds of the goal add at most
    ``goal.epsilon - epsilon_spent`` (and stay within the gate's budget). If
    other mechanisms were charged meanwhile, later rounds get more noise
    rather than overrunning the goal. Once the goal's rounds are done (or its
    epsilon is spent) the trainer reports a refusal and trains nothing: rounds
    beyond the goal would only get noise large enough to destroy the model.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        x: np.ndarray,
        y: np.ndarray,
        goal: DPGoal,
        budget: BudgetGate,
        participant_id: str,
        asset_id: str,
        batch_size: int,
        lr: float,
        epochs_per_round: int | None = 1,
        steps_per_round: int | None = None,
        seed: int = 0,
        clipping: str = "flat",
        c_ref: float = 1.0,
        p_ref: int = P_REF,
        max_noise_multiplier: float = 20.0,
        insecure_noise: InsecureSeededNoise | None = None,
        logit_adjustment: LogitAdjustment | None = None,
        audit: CanaryAudit | None = None,
        test_noise_scale: float = 1.0,
    ) -> None:
        check_private_compatible(model)
        check_xy(x, y)
        check_positive(batch_size=batch_size, lr=lr, max_noise_multiplier=max_noise_multiplier)
        if not (math.isfinite(test_noise_scale) and 0 <= test_noise_scale <= 1):
            raise LearningParameterInvalid(
                f"test_noise_scale must be in [0, 1], got {test_noise_scale!r}"
            )
        if audit is not None:
            x, y = audit.training_rows(x, y)
        if (epochs_per_round is None) == (steps_per_round is None):
            raise LearningParameterInvalid(
                "give exactly one of epochs_per_round and steps_per_round, got "
                f"{epochs_per_round!r} and {steps_per_round!r}"
            )
        check_positive(per_round=epochs_per_round or steps_per_round or 0)
        if clipping not in CLIPPING_MODES:
            raise LearningParameterInvalid(
                f"clipping must be one of {', '.join(CLIPPING_MODES)}, got {clipping!r}"
            )
        if not participant_id or not asset_id:
            raise LearningParameterInvalid("participant_id and asset_id must be non-empty")
        self.model, self.goal, self.budget = model, goal, budget
        self.participant_id, self.asset_id = participant_id, asset_id
        self.x, self.y = x, y
        self.batch_size, self.lr = int(batch_size), float(lr)
        self.seed, self.clipping = seed, clipping
        self.max_grad_norm = clipping_norm(model, c_ref=c_ref, p_ref=p_ref)
        self._layer_norms = per_layer_clipping_norms(model, c_ref=c_ref, p_ref=p_ref)
        batches = math.ceil(len(x) / self.batch_size)
        self.sample_rate = 1 / batches  # exactly as DPDataLoader.from_data_loader computes it
        per_epoch = int(1 / self.sample_rate)
        self.steps = per_epoch * epochs_per_round if epochs_per_round else int(steps_per_round or 0)
        self.max_noise_multiplier = float(max_noise_multiplier)
        self.rounds_trained = 0
        self.on_private: PrivateRunObserver | None = None
        self.insecure_noise = insecure_noise
        self._versions = dict(_VERSIONS)
        if insecure_noise is not None:
            self._versions["noise_rng"] = insecure_noise.label
        self.audit, self.test_noise_scale = audit, float(test_noise_scale)
        if self.test_noise_scale != 1.0:
            self._versions["noise_applied"] = (
                f"{self.test_noise_scale!r} of the charged (TEST ONLY)"
            )
        self.audits: list[AuditResult] = []
        self.on_audit: Callable[[AuditResult], None] | None = None
        #: Ledger label of the first charge the audits span (a restarted participant
        #: whose canaries were kept sets it to the one of its first run).
        self.audit_from: str | None = None
        self.logit_adjustment = logit_adjustment
        #: ``tau * log(noisy prior)`` once released (None: not yet, or no adjustment).
        self.logit_offset: torch.Tensor | None = None
        #: The released prior (:meth:`adopt_prior` after a restart); ``on_prior`` keeps it.
        self.prior: ReleasedPrior | None = None
        self.on_prior: Callable[[ReleasedPrior], None] | None = None

    def train_round(self, round_id: str) -> TrainReport:
        """Calibrate, reserve, run DP-SGD, commit; or report a refusal.

        Parameters
        ----------
        round_id
            Round this training belongs to (recorded with the reservation).

        Returns
        -------
        TrainReport
            ``trained=False`` with the reason when the budget refused; the
            model is then untouched and nothing was spent.

        Raises
        ------
        PrivateTrainingFailed
            Opacus built a sampling plan different from the one reserved
            (the reservation is aborted first).

        Notes
        -----
        If training fails, or the gate refuses the commit (e.g. the ledger's
        ``LEDGER_RESERVATION_EXPIRED``: "do not release anything"), the model's
        weights are restored to their state before the round, so nothing derived
        from an uncharged mechanism can leave the participant; the error propagates.
        """
        refused = refusal_errors()
        remaining = self.goal.rounds - self.rounds_trained
        if remaining < 1:
            reason = (
                f"the goal's {self.goal.rounds} private round(s) are done; state a new "
                "goal to train further"
            )
            return self._report(round_id, trained=False, refused_reason=reason, sigma=0.0)
        if self.logit_adjustment is not None and self.logit_offset is None:
            refusal = self._release_prior(round_id, self.logit_adjustment)
            if refusal is not None:
                return self._report(round_id, trained=False, refused_reason=refusal, sigma=0.0)
        room = self.goal.epsilon - float(
            self.budget.epsilon_spent(self.participant_id, self.asset_id)
        )
        if room < _MIN_ROOM:
            reason = (
                f"the goal's epsilon {self.goal.epsilon:g} is already spent by this "
                f"asset's history; no further private training"
            )
            return self._report(round_id, trained=False, refused_reason=reason, sigma=0.0)
        try:
            sigma = self.budget.calibrate_noise(
                self.participant_id,
                self.asset_id,
                rounds=remaining,
                steps_per_round=self.steps,
                sample_rate=self.sample_rate,
                max_grad_norm=self.max_grad_norm,
                epsilon=_decimal_floor(room),
            )
            if sigma > self.max_noise_multiplier:
                reason = (
                    f"the budget left needs noise multiplier {sigma:.4g} > "
                    f"max_noise_multiplier {self.max_noise_multiplier:g}; training "
                    "would only add noise, so nothing is trained or spent"
                )
                return self._report(round_id, trained=False, refused_reason=reason, sigma=0.0)
            event = MechanismEvent(
                noise_multiplier=sigma,
                sample_rate=self.sample_rate,
                steps=self.steps,
                delta=self.goal.delta,
                max_grad_norm=self.max_grad_norm,
                versions=self._versions,
            )
            reservation = self.budget.reserve(
                self.participant_id, self.asset_id, event, round_id=round_id
            )
        except refused as exc:
            logger.warning(
                "participant %s refused in round %s: %s", self.participant_id, round_id, exc
            )
            return self._report(round_id, trained=False, refused_reason=str(exc), sigma=0.0)
        reservation_id = reservation.id
        snapshot = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        try:
            loss = self._run(sigma)
        except BaseException:
            self.model.load_state_dict(snapshot)  # nothing trained may be released later
            try:
                self.budget.abort(reservation_id, released_anything=False)
            except Exception:  # keep the original error; the ledger expires the hold
                logger.exception("abort of reservation %s failed", reservation_id)
            raise
        try:
            self.budget.commit(reservation_id)
        except BaseException:
            # Uncharged training must not be released: roll the model back.
            self.model.load_state_dict(snapshot)
            raise
        self.rounds_trained += 1
        if self.audit is not None:
            self._audit(self.audit, round_id)
        return self._report(round_id, trained=True, refused_reason=None, sigma=sigma, loss=loss)

    def _audit(self, audit: CanaryAudit, round_id: str) -> None:
        """Audit the model over the charges made so far; keep and hand on the result.

        The span starts at the first charge of rows with canaries: the label
        prior's (``r1-label-prior``) when it was released with them, else the
        first DP-SGD round.
        """
        if self.audit_from is None:
            prior = self.prior
            self.audit_from = prior.round_id if prior is not None else round_id
        result = audit.run(
            self.model,
            participant=self.participant_id,
            asset=self.asset_id,
            rounds=(self.audit_from, round_id),
            epsilon_accounted=self.budget.epsilon_spent(self.participant_id, self.asset_id),
        )
        self.audits.append(result)
        if self.on_audit is not None:
            self.on_audit(result)

    def adopt_prior(self, prior: ReleasedPrior) -> None:
        """Reuse a prior released before (a restarted participant): never released twice.

        A committed prior is applied at once; one kept before its commit is
        committed (or replaced, if the ledger never charged it) by the next round.

        Raises
        ------
        LearningParameterInvalid
            The prior was released with other settings or for other classes.
        """
        if self.logit_adjustment is None:
            return
        prior.check(self.logit_adjustment, predict_logits(self.model, self.x[:1]).shape[1])
        self.prior = prior
        self.logit_offset = prior.offset() if prior.committed else None

    def _release_prior(self, round_id: str, adjustment: LogitAdjustment) -> str | None:
        """Charge and release the noisy class prior once; return a refusal message or None."""
        classes = predict_logits(self.model, self.x[:1]).shape[1]
        try:
            kept = self.prior
            prior = (
                None if kept is None else resume_prior(kept, gate=self.budget, keep=self.on_prior)
            )
            if prior is None:
                prior = release_prior(
                    adjustment,
                    gate=self.budget,
                    event=adjustment.event(delta=self.goal.delta, versions=self._versions),
                    participant_id=self.participant_id,
                    asset_id=self.asset_id,
                    round_id=round_id,
                    counts=lambda: adjustment.noisy_counts(self.y, classes, self._generator(2)),
                    keep=self.on_prior,
                )
        except refusal_errors() as exc:
            logger.warning(
                "participant %s: label prior refused in round %s: %s",
                self.participant_id,
                round_id,
                exc,
            )
            return str(exc)
        self.prior, self.logit_offset = prior, prior.offset()
        return None

    def _report(
        self,
        round_id: str,
        *,
        trained: bool,
        refused_reason: str | None,
        sigma: float,
        loss: float = float("nan"),
    ) -> TrainReport:
        spent = float(self.budget.epsilon_spent(self.participant_id, self.asset_id))
        return TrainReport(
            round_id=round_id,
            trained=trained,
            refused_reason=refused_reason,
            noise_multiplier=sigma,
            sample_rate=self.sample_rate,
            steps=self.steps if trained else 0,
            max_grad_norm=self.max_grad_norm,
            epsilon_spent=spent,
            loss=loss,
        )

    def _generator(self, purpose: int) -> torch.Generator:
        """Secure-seeded generator, or the INSECURE seeded one when configured."""
        if self.insecure_noise is None:
            return fresh_generator()
        return self.insecure_noise.generator(self.rounds_trained, purpose)

    def _run(self, sigma: float) -> float:
        """One round of Opacus DP-SGD on the private data; returns the mean loss."""
        xt, yt = _tensors(self.x, self.y)
        loader = DataLoader(
            TensorDataset(xt, yt), batch_size=self.batch_size, generator=self._generator(0)
        )
        optimizer = torch.optim.SGD(
            self.model.parameters(), lr=self.lr / self.max_grad_norm, momentum=0.9
        )
        with warnings.catch_warnings():  # "Secure RNG turned off": recorded as secure_rng=false
            warnings.filterwarnings("ignore", message="Secure RNG turned off")
            engine = PrivacyEngine(accountant="rdp", secure_mode=False)
        norm: float | list[float] = (
            self._layer_norms if self.clipping == "per_layer" else self.max_grad_norm
        )
        private, dp_optimizer, dp_loader = engine.make_private(
            module=self.model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=sigma * self.test_noise_scale,
            max_grad_norm=norm,
            poisson_sampling=True,
            clipping=self.clipping,
            noise_generator=self._generator(1),
        )
        try:
            if self.on_private is not None:
                self.on_private(private, dp_optimizer, dp_loader)
            if not (
                getattr(dp_loader, "sample_rate", None) == self.sample_rate
                and len(dp_loader) == int(1 / self.sample_rate)
            ):
                raise PrivateTrainingFailed(
                    "Opacus' Poisson plan differs from the reserved one (sample rate "
                    f"{getattr(dp_loader, 'sample_rate', None)} vs {self.sample_rate})"
                )
            with warnings.catch_warnings():  # Opacus' hooks on a module whose input needs no grad
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                return _dp_steps(
                    private, dp_optimizer, dp_loader, self.steps, offset=self.logit_offset
                )
        finally:
            private.cleanup()
            self.model.zero_grad(set_to_none=True)


def _dp_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: DataLoader[tuple[torch.Tensor, ...]],
    steps: int,
    *,
    offset: torch.Tensor | None = None,
) -> float:
    """Run exactly ``steps`` DP-SGD steps, cycling over Poisson-sampled passes.

    ``offset`` is the logit adjustment added to every example's logits in the
    loss (a constant: per-example gradients and their clipping are unchanged).
    """
    model.train()
    losses: list[float] = []
    done = 0
    while done < steps:
        for xb, yb in loader:
            optimizer.zero_grad()
            # An empty Poisson batch still takes a (noise-only) step: the accounting
            # assumes every step is noised. Its per-sample gradients are zero-size.
            reduction = "mean" if len(xb) else "sum"
            loss = adjusted_cross_entropy(model(xb), yb, offset, reduction=reduction)
            torch.autograd.backward(loss)
            optimizer.step()
            if len(xb):
                losses.append(float(loss.detach()))
            done += 1
            if done == steps:
                break
    return float(np.mean(losses)) if losses else float("nan")


def _decimal_floor(value: float) -> str:
    """Exact decimal string of ``value`` rounded down to 1e-6 (less room is safe)."""
    return str(Decimal(value).quantize(Decimal("0.000001"), rounding=ROUND_FLOOR))


_MIN_ROOM = 1e-6
_VERSIONS = {"opacus": opacus.__version__, "torch": torch.__version__, "secure_rng": "false"}

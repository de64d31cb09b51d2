"""Wire the parties of a secure mode: key authority, helper, key material per participant.

In a real deployment each party runs in its own process and these values are
exchanged at enrolment (CKKS public context by SM3 fingerprint once per key
epoch; one 32-byte secret per participant and server for the shares mode).
:class:`SecureDeployment` does that enrolment in one process for the demo,
tests and benchmarks, and hands out the keyword arguments each side's factory
(``AggregationMode.encoder`` / ``.aggregator``) needs. The aggregator never
receives a CKKS secret key or a helper secret.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from crypto.ckks import PublicContext
from crypto.shares import ShareMacKey
from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.mode import SecureAggregator, UploadEncoder, get_mode
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.parties.key_authority import CentralDP, KeyAuthority
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.secure.scoring.outlier import AuditSink

__all__ = ["SecureDeployment"]


@dataclass
class SecureDeployment:
    """All key material and server parties of one mode (``plaintext``, ``ckks``, ``shares``)."""

    mode: str
    shape: tuple[int, int]
    authority: KeyAuthority | None = None
    helper: HelperParty | None = None
    public_context: PublicContext | None = None
    participant_secrets: dict[str, dict[str, bytes]] = field(default_factory=dict, repr=False)
    server_keys: dict[str, ShareMacKey] = field(default_factory=dict, repr=False)
    scoring: ScoringConfig | None = None

    @classmethod
    def create(cls, *, mode: str, shape: tuple[int, int], participant_ids: Sequence[str],
               min_participants: int, audit: AuditSink | None = None,
               central_dp: CentralDP | None = None, budget: object = None,
               scoring: ScoringConfig | None = None) -> SecureDeployment:  # fmt: skip
        """Enrol every participant and build the servers of ``mode``.

        Raises
        ------
        UnknownMode
            If ``mode`` is not registered.
        ModeSetupInvalid
            If the participant ids are empty or repeated.
        """
        get_mode(mode)
        ids = list(participant_ids)
        if not ids or len(set(ids)) != len(ids):
            raise ModeSetupInvalid(f"participant_ids must be distinct and non-empty, got {ids}")
        dep = cls(mode=mode, shape=shape, scoring=scoring)
        if mode == "ckks":
            dep.authority = KeyAuthority.for_ckks(min_participants=min_participants, audit=audit,
                                                  central_dp=central_dp, budget=budget)
            dep.public_context = PublicContext.from_bytes(
                dep.authority.public_context, preset=dep.authority._keys().preset.name,
                expected_fingerprint=dep.authority.fingerprint)
        elif mode == "shares":
            dep.authority = KeyAuthority(min_participants=min_participants, audit=audit)
            dep.participant_secrets = {p: {"aggregator": secrets.token_bytes(32),
                                           "helper": secrets.token_bytes(32)} for p in ids}
            dep.server_keys = {name: ShareMacKey.generate(recipient=name)
                               for name in ("dealer-aggregator", "dealer-helper", "channel")}
            dep.helper = HelperParty(
                shape=shape, min_participants=min_participants, audit=audit,
                secrets={p: s["helper"] for p, s in dep.participant_secrets.items()},
                dealer_key=dep.server_keys["dealer-helper"], channel_key=dep.server_keys["channel"])
        return dep

    @property
    def params(self) -> str:
        """Crypto parameters uploads declare in their signed envelope."""
        if self.mode == "ckks" and self.public_context is not None:
            return self.public_context.preset.name
        if self.mode == "shares":
            return "Z2^64/f12"
        return "float32"

    def encoder_kwargs(self, participant_id: str) -> dict[str, object]:
        """Return what a participant's encoder factory needs (public material, own secrets)."""
        if self.mode == "ckks":
            return {"public_context": self.public_context}
        if self.mode == "shares":
            if participant_id not in self.participant_secrets:
                raise ModeSetupInvalid(f"participant {participant_id!r} is not enrolled")
            return {"participant_id": participant_id,
                    "secrets_by_party": self.participant_secrets[participant_id]}
        return {}

    def aggregator_kwargs(self) -> dict[str, object]:
        """Return what the aggregator factory needs (never a CKKS secret or helper secret)."""
        extra: dict[str, object] = {} if self.scoring is None else {"scoring": self.scoring}
        if self.mode == "ckks":
            assert self.authority is not None  # noqa: S101
            return {"public_context": self.public_context, "authority": self.authority.handle,
                    **extra}
        if self.mode == "shares":
            assert self.authority is not None and self.helper is not None  # noqa: S101
            dealer = partial(self.authority.deal,
                             key_aggregator=self.server_keys["dealer-aggregator"],
                             key_helper=self.server_keys["dealer-helper"])
            return {"secrets": {p: s["aggregator"] for p, s in self.participant_secrets.items()},
                    "helper": self.helper.handle, "dealer": dealer,
                    "dealer_key": self.server_keys["dealer-aggregator"],
                    "channel_key": self.server_keys["channel"], **extra}
        return {}

    def encoder(self, participant_id: str, *, bound: float) -> UploadEncoder:
        """Build a participant's encoder."""
        return get_mode(self.mode).encoder(shape=self.shape, bound=bound,
                                           **self.encoder_kwargs(participant_id))

    def aggregator(self, *, bound: float) -> SecureAggregator:
        """Build the aggregator."""
        return get_mode(self.mode).aggregator(shape=self.shape, bound=bound,
                                              **self.aggregator_kwargs())

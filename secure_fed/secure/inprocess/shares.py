"""The ``shares`` mode deployed in one process: enrolments, the helper, the triple dealer.

:class:`SharesDeployment` generates every participant's enrolment secrets and the
MAC keys, starts the :class:`~secure_fed.secure.parties.helper.HelperParty`
(party 1) with its replay :class:`~secure_fed.secure.parties.registry.HelperRegistry`,
and the :class:`~secure_fed.secure.parties.key_authority.KeyAuthority` as the
Beaver-triple dealer; it hands the aggregator (party 0,
:mod:`secure_fed.secure.modes.shares`) byte channels to both. :data:`SharesMode`
registers the mode with this deployment as its ``deploy`` hook.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from crypto.shares import ShareMacKey
from crypto.shares.mac import InputMaskDealer
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import AggregationMode, register_mode
from secure_fed.secure.modes.shares import (
    SharesAggregator,
    SharesEncoder,
    SharesEnrolment,
    SharesKeys,
)
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.parties.key_authority import KeyAuthority
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.server_auth import ChannelKey, ServerSigningKey

__all__ = ["SharesDeployment", "SharesMode"]

_log = logging.getLogger(__name__)


def _registry(plan: DeploymentPlan) -> HelperRegistry:
    """Open the helper's replay registry: the plan's file, else in memory (warned)."""
    if plan.registry_path is None:
        _log.warning("the helper's triple-label registry is in memory: a restart forgets it")
        return HelperRegistry()
    return HelperRegistry(plan.registry_path)


class SharesDeployment(SecureDeployment):
    """Enrolment secrets, the helper (party 1) and the key authority as triple dealer.

    Parameters
    ----------
    plan
        What it was deployed from.
    authority
        Deals Beaver triples; holds no shares.
    helper
        Party 1 (holds each upload's seed share and gates every opening).
    enrolments
        Each participant's secrets.
    dealer_keys
        MAC keys of the dealer's blobs (``"aggregator"``, ``"helper"``) and of the
        aggregator-helper channel (``"channel"``).
    request_key
        HMAC-SM3 key of the aggregator's signed requests to the helper (enrolled
        by :meth:`DeploymentPlan.enrol_channel`; only these two servers hold it).
    signing_key
        The aggregator's SM2 key (:meth:`DeploymentPlan.enrol_server`); the key
        authority deals triples only for requests it signed.
    """

    def __init__(
        self,
        *,
        plan: DeploymentPlan,
        authority: KeyAuthority,
        helper: HelperParty,
        enrolments: Mapping[str, SharesEnrolment],
        dealer_keys: Mapping[str, ShareMacKey],
        request_key: ChannelKey,
        signing_key: ServerSigningKey,
        masks: InputMaskDealer | None = None,
    ) -> None:
        super().__init__(mode=SharesMode.name, plan=plan)
        self.authority, self.helper = authority, helper
        self._request_key, self._signing_key = request_key, signing_key
        self._enrolments, self._macs = dict(enrolments), dict(dealer_keys)
        self._masks = masks

    @classmethod
    def deploy(cls, plan: DeploymentPlan, *, authenticated: bool = True) -> SharesDeployment:
        """Enrol every participant, generate the MAC keys, start the helper.

        ``authenticated`` (the default): SPDZ-style MACs on every share, the key
        authority's dealer holding the whole MAC key and each server one share of it
        (:mod:`crypto.shares.mac`); the publication is MAC-checked before either
        server releases it. ``False``: unauthenticated shares (the measured baseline).
        """
        ids = list(plan.participant_ids)
        masks = InputMaskDealer.generate(ids) if authenticated else None
        enrolments = {
            p: SharesEnrolment.generate(
                p, dealer_secret=None if masks is None else masks.participants[p]
            )
            for p in ids
        }
        macs = {
            "aggregator": ShareMacKey.generate(recipient="dealer-aggregator"),
            "helper": ShareMacKey.generate(recipient="dealer-helper"),
            "channel": ShareMacKey.generate(recipient="channel"),
        }
        link = plan.enrol_channel("aggregator")
        signing = plan.enrol_server("aggregator")
        helper = HelperParty(
            shape=plan.shape,
            min_participants=plan.min_participants,
            audit=plan.audit,
            secrets={p: e.helper_secret for p, e in enrolments.items()},
            dealer_key=macs["helper"],
            channel_key=macs["channel"],
            request_key=link,
            registry=_registry(plan),
            consortium=plan.consortium_pin("helper"),
            mac_key=None if masks is None else masks.key_share(1),
            mask_secret=None if masks is None else masks.helper_secret,
        )
        authority = KeyAuthority(
            min_participants=plan.min_participants,
            audit=plan.audit,
            aggregator=signing.identity,
        )
        return cls(
            plan=plan,
            authority=authority,
            helper=helper,
            enrolments=enrolments,
            dealer_keys=macs,
            request_key=link,
            signing_key=signing,
            masks=masks,
        )

    @property
    def params(self) -> str:
        """The ring and its fixed-point resolution."""
        return "Z2^64/f12"

    def enrolment(self, participant_id: str) -> SharesEnrolment:
        """Return an enrolled participant's secrets (only that participant receives them)."""
        self.plan.require_enrolled(participant_id)
        return self._enrolments[participant_id]

    def encoder(self, participant_id: str, *, bound: float) -> SharesEncoder:
        """Build an enrolled participant's encoder."""
        return SharesEncoder(
            shape=self.shape, bound=bound, enrolment=self.enrolment(participant_id)
        )

    def _deal(self, request: bytes) -> tuple[bytes, bytes]:
        """Serve the dealer's end of the channel: deal only for a signed, fresh request."""
        return self.authority.handle_deal(
            request, key_aggregator=self._macs["aggregator"], key_helper=self._macs["helper"]
        )

    def server_keys(self) -> SharesKeys:
        """Return the aggregator's key material (no helper secret, no helper MAC key)."""
        return SharesKeys(
            secrets={p: e.aggregator_secret for p, e in self._enrolments.items()},
            helper=self.helper.handle,
            dealer=self._deal,
            range_dealer=partial(
                self.authority.handle_deal_range,
                key_aggregator=self._macs["aggregator"],
                key_helper=self._macs["helper"],
            ),
            compare_dealer=partial(
                self.authority.handle_deal_compare,
                key_aggregator=self._macs["aggregator"],
                key_helper=self._macs["helper"],
            ),
            dealer_key=self._macs["aggregator"],
            channel_key=self._macs["channel"],
            request_key=self._request_key,
            signing_key=self._signing_key,
            mac_key=None if self._masks is None else self._masks.key_share(0),
            mask_dealer=None
            if self._masks is None
            else partial(
                self.authority.handle_deal_masks,
                masks=self._masks,
                key_aggregator=self._macs["aggregator"],
            ),
            audit=self.plan.audit,
        )

    def aggregator(self, *, bound: float) -> SharesAggregator:
        """Build party 0."""
        return SharesAggregator(
            shape=self.shape,
            bound=bound,
            keys=self.server_keys(),
            scoring=self.plan.scoring,
            min_participants=self.plan.min_participants,
        )


#: The ``shares`` mode: the helper gates every opening; the key authority deals triples.
SharesMode = AggregationMode(
    name="shares",
    insecure=False,
    central_dp=False,
    description="two additive shares (aggregator + helper), Beaver triples from the key authority",
    deploy=SharesDeployment.deploy,
)
register_mode(SharesMode)

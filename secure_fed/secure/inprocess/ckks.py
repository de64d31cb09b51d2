"""The ``ckks`` mode deployed in one process: a key authority and the aggregator's keys.

:class:`CkksDeployment` generates the key epoch in a
:class:`~secure_fed.secure.parties.key_authority.KeyAuthority` (with optional
central DP on the published aggregate), hands out the public context, and, when
the plan asks for verified releases, enrols a
:class:`~secure_fed.secure.verifier.CkksVerifier`. :data:`CkksMode` registers the
mode with this deployment as its ``deploy`` hook. The aggregator side it hands
keys to is :mod:`secure_fed.secure.modes.ckks`.
"""

from __future__ import annotations

from crypto.ckks import PublicContext
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import AggregationMode, register_mode
from secure_fed.secure.modes.ckks import PRESET, CkksAggregator, CkksEncoder, CkksKeys
from secure_fed.secure.parties.key_authority import KeyAuthority
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.secure.verifier import CkksVerifier, UploadOpener

__all__ = ["CkksDeployment", "CkksMode"]


class CkksDeployment(SecureDeployment):
    """A key authority holding a fresh CKKS key epoch; participants get its public context.

    Parameters
    ----------
    plan
        What it was deployed from.
    authority
        The key authority (secret key, decryption policy, optional central DP).
    public_context
        The epoch's public context, loaded by fingerprint as a participant would.
    signer
        The aggregator's SM2 key, enrolled with the key authority.
    """

    def __init__(
        self,
        *,
        plan: DeploymentPlan,
        authority: KeyAuthority,
        public_context: PublicContext,
        signer: ServerSigningKey,
    ) -> None:
        super().__init__(mode=CkksMode.name, plan=plan)
        self.authority, self.public_context = authority, public_context
        self._signer = signer
        #: The publication epoch's public context (``None``: opted out).
        self.publication_context: PublicContext | None = None
        #: The verifier the key authority enrolled (``None``: releases are not attested).
        self.verifier: CkksVerifier | None = None

    @classmethod
    def deploy(cls, plan: DeploymentPlan) -> CkksDeployment:
        """Generate the key epoch and load its public context by SM3 fingerprint."""
        signer = plan.enrol_server("aggregator")
        attesting = plan.enrol_server("verifier") if plan.verifies_releases else None
        authority = KeyAuthority.for_ckks(
            min_participants=plan.min_participants,
            preset=PRESET,
            publication_preset=plan.publication_preset,
            audit=plan.audit,
            central_dp=plan.central_dp,
            budget=plan.budget,
            aggregator=signer.identity,
            enrolled=frozenset(plan.participant_ids),
            upload_shape=plan.shape,
            consortium=plan.consortium_pin("key_authority"),
            verifier=None if attesting is None else attesting.identity,
        )
        public = PublicContext.from_bytes(
            authority.public_context, preset=PRESET, expected_fingerprint=authority.fingerprint
        )
        dep = cls(plan=plan, authority=authority, public_context=public, signer=signer)
        if plan.publication_preset is not None:
            dep.publication_context = PublicContext.from_bytes(
                authority.publication_context,
                preset=plan.publication_preset,
                expected_fingerprint=authority.publication_fingerprint,
            )
        if attesting is not None:
            dep.verifier = CkksVerifier(
                signer=attesting,
                aggregator=signer.identity,
                public_context=public,
                publication_context=dep.publication_context,
                participant_ids=frozenset(plan.participant_ids),
                shape=plan.shape,
                audit=plan.audit,
            )
        return dep

    def link_upload_verifier(self, opener: UploadOpener) -> bool:
        """Give the verifier the envelope verification it checks forwarded uploads with."""
        if self.verifier is None:
            return False
        self.verifier.opener = opener
        return True

    @property
    def params(self) -> str:
        """The CKKS preset name."""
        return self.public_context.preset.name

    def encoder(self, participant_id: str, *, bound: float) -> CkksEncoder:
        """Build an enrolled participant's encoder (public context only)."""
        self.plan.require_enrolled(participant_id)
        return CkksEncoder(
            shape=self.shape,
            bound=bound,
            public_context=self.public_context,
            publication_context=self.publication_context,
        )

    def server_keys(self) -> CkksKeys:
        """Return the aggregator's key material: public context and authority channel."""
        return CkksKeys(
            public_context=self.public_context,
            authority=self.authority.handle,
            signer=self._signer,
            plans=self.authority.install_plan,
            publication_context=self.publication_context,
            attest=None if self.verifier is None else self.verifier.attest,
            forward=None if self.verifier is None else self.verifier.receive,
        )

    def aggregator(self, *, bound: float) -> CkksAggregator:
        """Build the aggregator (no secret key)."""
        return CkksAggregator(
            shape=self.shape,
            bound=bound,
            keys=self.server_keys(),
            scoring=self.plan.scoring,
            min_participants=self.plan.min_participants,
        )


#: The ``ckks`` mode: a key authority decrypts aggregates and single scores.
CkksMode = AggregationMode(
    name="ckks",
    insecure=False,
    central_dp=True,
    description="CKKS (TenSEAL) class-major uploads; key authority decrypts aggregates and scores",
    deploy=CkksDeployment.deploy,
)
register_mode(CkksMode)

"""Deploy a mode: look it up in the registry, let it build its own parties and keys.

In a real deployment each party runs in its own process and key material is
exchanged at enrolment (the CKKS public context by SM3 fingerprint once per key
epoch; one 32-byte secret per participant and server for the shares mode).
A :class:`SecureDeployment` does that enrolment in one process for the demo,
tests and benchmarks. Each registered mode subclasses it (the gatekept ones in
:mod:`secure_fed.secure.inprocess`, the plaintext reference in
:mod:`secure_fed.secure.modes.plaintext`) and hands each side a typed key object:
a participant gets only public material and its own secrets, the aggregator
never receives a CKKS secret key or a helper secret.

:meth:`SecureDeployment.create` is the only entry point: it validates the
:class:`DeploymentPlan`, looks the mode up with
:func:`~secure_fed.secure.mode.get_mode` and calls the mode's ``deploy``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crypto.sm import SM2PrivateKey, SM2PublicKey
from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy, PolicyPin, SignedPolicy
from secure_fed.secure.mode import MODE_REGISTRY, SecureAggregator, UploadEncoder, get_mode
from secure_fed.secure.parties.central_dp import CentralDP, ChargeGate
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.secure.server_auth import ChannelKey, ServerSigningKey

__all__ = ["DeploymentPlan", "SecureDeployment"]


@dataclass(frozen=True, kw_only=True)
class DeploymentPlan:
    """What every mode is deployed from (validated; the parameter is named in errors).

    Parameters
    ----------
    shape
        ``(N_pub, C)`` of every upload.
    participant_ids
        The enrolled participants (distinct, non-empty).
    min_participants
        Smallest set whose aggregate may be revealed (the round quorum).
    audit
        Where the parties record key, decryption and refusal events.
    central_dp, budget
        Optional central DP noise on the published aggregate and the gate it is
        charged to (both or neither).
    scoring
        Robust pooled Mahalanobis parameters (the mode's default when ``None``).
    registry_path
        SQLite file of the gatekeeper's replay registry (shares mode: used
        Beaver-triple labels and upload rounds), so that a replay is refused after
        a restart too. ``None`` keeps it in memory (tests and one-process demos;
        a warning is logged).
    publication_preset
        ``ckks`` mode: the CKKS preset of the second key epoch the published
        weighted sum is encrypted, computed and decrypted under
        (``"CKKS_PUBLICATION"`` by default: flooding at ``s >= 40`` bits for its
        16,384 ciphertexts, about 5.1 MB more per 10,000 x 10 upload). ``None``
        opts out, which is **weaker**: the publication is then computed on the
        scoring ciphertexts and flooded as little as the scores (negative ``s``
        at the default round, ``docs/audit/threat-model.md``). Other modes ignore it.
    policy, participant_keys
        The consortium's signed policy and every participant's SM2 public key
        (:mod:`secure_fed.secure.consortium_policy`); both gatekeepers pin it and
        refuse any plan outside it. A deployment built without a key ceremony
        (tests, benchmarks) may give an unsigned
        :class:`~secure_fed.secure.consortium_policy.ConsortiumPolicy` (no keys)
        or nothing (the default policy of the roster, shape and quorum); it is
        then signed with keys generated here for the in-process participants,
        and pinned the same way.
    verified_release
        ``ckks`` mode: enrol a verifier (:mod:`secure_fed.secure.verifier`) with the
        key authority, which then decrypts nothing the verifier has not recomputed
        from the participants' signed uploads and attested. ``None`` (the default):
        on when ``participant_keys`` are given (a consortium whose envelope keys the
        verifier checks forwarded uploads against), off otherwise (no envelope keys:
        a forgery is then only detected afterwards, by ``ledger verify --recompute``).
        Other modes ignore it.
    """

    shape: tuple[int, int]
    participant_ids: tuple[str, ...]
    min_participants: int
    audit: AuditSink | None = None
    central_dp: CentralDP | None = None
    budget: ChargeGate | None = field(default=None, repr=False)
    scoring: ScoringConfig | None = None
    registry_path: str | Path | None = None
    publication_preset: str | None = "CKKS_PUBLICATION"
    policy: SignedPolicy | ConsortiumPolicy | None = field(default=None, repr=False)
    participant_keys: Mapping[str, SM2PublicKey] | None = field(default=None, repr=False)
    verified_release: bool | None = None

    def __post_init__(self) -> None:
        ids = self.participant_ids
        if not ids or len(set(ids)) != len(ids) or not all(isinstance(p, str) and p for p in ids):
            raise ModeSetupInvalid(f"participant_ids must be distinct and non-empty, got {ids}")
        shape = self.shape
        if not (len(shape) == 2 and all(isinstance(s, int) and s >= 1 for s in shape)):
            raise ModeSetupInvalid(f"shape must be two integers >= 1, got {shape!r}")
        if not isinstance(self.min_participants, int) or self.min_participants < 1:
            raise ModeSetupInvalid(
                f"min_participants must be an integer >= 1, got {self.min_participants!r}"
            )
        if (self.central_dp is None) != (self.budget is None):
            raise ModeSetupInvalid("central_dp and budget go together: give both or neither")
        if self.registry_path is not None and not (
            isinstance(self.registry_path, str | Path) and str(self.registry_path)
        ):
            raise ModeSetupInvalid(
                f"registry_path must be a file path or None, got {self.registry_path!r}"
            )
        if self.publication_preset is not None:
            _check_publication_preset(self.publication_preset)
        if isinstance(self.policy, SignedPolicy) != (self.participant_keys is not None):
            raise ModeSetupInvalid("a signed policy and participant_keys go together")

    @property
    def verifies_releases(self) -> bool:
        """Whether a verifier is enrolled (``verified_release``, or its default)."""
        if self.verified_release is None:
            return self.participant_keys is not None
        return bool(self.verified_release)

    def consortium_pin(self, party: str) -> PolicyPin:
        """Pin the consortium's policy for gatekeeper ``party`` (``policy.pinned`` event).

        Raises
        ------
        PolicyInvalid
            If a participant's signature is missing or wrong.
        """
        given, keys = self.policy, self.participant_keys
        if isinstance(given, SignedPolicy) and keys is not None:
            signed = given
        else:
            policy = given if isinstance(given, ConsortiumPolicy) else None
            policy = policy or ConsortiumPolicy(
                participant_ids=self.participant_ids,
                shape=self.shape,
                quorum=max(2, self.min_participants),
            )
            own = {p: SM2PrivateKey.generate() for p in policy.participant_ids}
            signed = SignedPolicy.sign(policy, own)
            keys = {p: k.public_key for p, k in own.items()}
        # the gatekeeper checks the policy's roster, shape and quorum against its own
        # (consortium_checks.check_consortium)
        return PolicyPin(signed, keys, party=party, audit=self.audit)

    def enrol_server(self, name: str) -> ServerSigningKey:
        """Generate server ``name``'s SM2 key pair and record its public key (``key.generated``).

        The key object is opaque and unpicklable; the servers that check this
        server's requests receive only :attr:`ServerSigningKey.identity`.
        """
        key = ServerSigningKey.generate(name)
        if self.audit is not None:
            public = key.identity.public_key
            self.audit.record(
                "key.generated",
                {
                    "kind": "sm2-server",
                    "server": name,
                    "fingerprint": public.fingerprint(),
                    "public_key": public.to_der().hex(),
                },
            )
        return key

    def enrol_channel(self, name: str) -> ChannelKey:
        """Generate the HMAC-SM3 key of ``name``'s requests on a two-server link.

        Both ends of the link receive the same opaque, unpicklable key object;
        the audit records only that it was generated (``key.generated``), never
        the key or a digest of it.
        """
        key = ChannelKey.generate(name)
        if self.audit is not None:
            self.audit.record("key.generated", {"kind": "hmac-sm3-channel", "server": name})
        return key

    def require_enrolled(self, participant_id: str) -> None:
        """Raise ``ModeSetupInvalid`` unless ``participant_id`` is enrolled."""
        if participant_id not in self.participant_ids:
            raise ModeSetupInvalid(f"participant {participant_id!r} is not enrolled")


def _check_publication_preset(name: object) -> None:
    """Refuse a publication preset that is not a registered integer-weight CKKS preset."""
    from crypto.ckks import PRESETS  # lazy: only ckks deployments name one

    preset = PRESETS.get(name) if isinstance(name, str) else None
    if preset is None or preset.weight_encoding != "integer":
        able = sorted(p.name for p in PRESETS.values() if p.weight_encoding == "integer")
        raise ModeSetupInvalid(f"publication_preset must be None or one of {able}, got {name!r}")


class SecureDeployment(ABC):
    """The parties and key material of one deployed mode.

    Parameters
    ----------
    mode
        The registered mode's name.
    plan
        What it was deployed from.
    """

    def __init__(self, *, mode: str, plan: DeploymentPlan) -> None:
        self.mode, self.plan = mode, plan

    @classmethod
    def create(
        cls,
        *,
        mode: str,
        shape: tuple[int, int],
        participant_ids: Sequence[str],
        min_participants: int,
        audit: AuditSink | None = None,
        central_dp: CentralDP | None = None,
        budget: ChargeGate | None = None,
        scoring: ScoringConfig | None = None,
        registry_path: str | Path | None = None,
        publication_preset: str | None = "CKKS_PUBLICATION",
        policy: SignedPolicy | ConsortiumPolicy | None = None,
        participant_keys: Mapping[str, SM2PublicKey] | None = None,
        verified_release: bool | None = None,
    ) -> SecureDeployment:
        """Enrol every participant and build the parties of the registered ``mode``.

        Raises
        ------
        UnknownMode
            If ``mode`` is not registered (the registered names are listed).
        ModeSetupInvalid
            If the plan is invalid, or central DP is asked of a mode that cannot add it.
        """
        spec = get_mode(mode)
        if central_dp is not None and not spec.central_dp:
            able = sorted(m.name for m in MODE_REGISTRY.values() if m.central_dp)
            raise ModeSetupInvalid(
                f"mode {mode!r} cannot add central DP before the aggregator sees the "
                f"aggregate; modes that can: {able}"
            )
        plan = DeploymentPlan(
            shape=(shape[0], shape[1]),
            participant_ids=tuple(participant_ids),
            min_participants=min_participants,
            audit=audit,
            central_dp=central_dp,
            budget=budget,
            scoring=scoring,
            registry_path=registry_path,
            publication_preset=publication_preset,
            policy=policy,
            participant_keys=participant_keys,
            verified_release=verified_release,
        )
        return spec.deploy(plan)

    @property
    def shape(self) -> tuple[int, int]:
        """``(N_pub, C)`` of every upload."""
        return self.plan.shape

    def link_upload_verifier(self, opener: Callable[[bytes, int], tuple[str, bytes]]) -> bool:
        """Give the mode's verifier its envelope verification; return whether it has one.

        ``opener(envelope, round_id)`` checks a forwarded envelope's signature under
        the participant's enrolled key and its round, and returns ``(participant id,
        mode payload)``. The base deployment has no verifier.
        """
        del opener
        return False

    @property
    @abstractmethod
    def params(self) -> str:
        """Crypto parameters uploads declare in their signed envelope."""

    @abstractmethod
    def encoder(self, participant_id: str, *, bound: float) -> UploadEncoder:
        """Build an enrolled participant's encoder (public material and its own secrets)."""

    @abstractmethod
    def aggregator(self, *, bound: float) -> SecureAggregator:
        """Build the aggregator (never holding a CKKS secret key or a helper secret)."""

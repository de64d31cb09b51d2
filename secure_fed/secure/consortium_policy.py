"""The consortium's policy: what any round may open, signed by every participant.

Each round's :class:`~secure_fed.secure.release_plan.ReleasePlan` is written by
the aggregator. Without a bound of its own, a gatekeeper would enforce whatever
the aggregator wrote: a weight cap of 1, no scoring, an exclusion threshold
below every score. The consortium's policy is that bound. It is created at the
key ceremony, every enrolled participant signs its canonical bytes (SM2), and
both gatekeepers pin it: a plan outside it is refused
(:class:`~secure_fed.errors.PlanOutsidePolicy`, ``PLAN_OUTSIDE_POLICY``) and the
refusal is audited. It holds:

* the roster (``participant_ids``) and the upload shape;
* ``quorum``: the smallest accepted set of any publication;
* ``max_weight``: the largest publication weight, at most ``1 / quorum``, so
  no single publication puts more than an equal share of the quorum on one
  participant (with exactly ``quorum`` participants the weights are equal);
* ``weight_floor``: the smallest publication weight (at least the codec's resolution);
* the required steps: ``scored`` (the Mahalanobis scoring passes), ``ranking``
  (the robust subset) and ``copies`` (near-duplicate detection, when the
  consortium requires it), and their bounds: the rows a score, moment and
  evidence scalar average over;
* ``isolation``: the multi-round rule's ``T`` (:mod:`secure_fed.secure.roster_rule`):
  a publication is refused if, with every earlier one, some combination would single
  out fewer than ``T`` participants;
* ``exclude_quantile``: the chi-square quantile above which a final score may
  be excluded. The gatekeeper derives the floor itself from the upload's
  classes (:meth:`ConsortiumPolicy.exclusion_floor`); a plan's
  ``exclude_above`` below it is refused, so the aggregator never picks whom it
  may leave out;
* ``max_flagged``: the most participants a round's outlier policy may exclude or
  down-weight (``None``, the default: no budget). A plan with a larger budget,
  or none, is refused, and a publication that leaves out more participants on
  their scores is refused by the plan
  (:class:`~secure_fed.secure.plan_tracker.PlanTracker`). It is what bounds one
  participant's influence on a published cell
  (:func:`~secure_fed.secure.scoring.outlier.influence_bound`).

The checks (the document's fields, a plan against the policy, a gatekeeper's
settings against it) are :mod:`secure_fed.secure.consortium_checks`. A policy
changes only by a new ceremony or by a document with a higher
``version`` that every participant of the pinned policy signed
(:meth:`PolicyPin.amend`, audited as ``policy.changed``). A gatekeeper with a
plan journal records the pinned version and digest there: after a restart it
refuses to start under an older or different policy of the same version.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey, sm3_digest
from privacy_ledger.audit.events import register_event
from secure_fed.errors import PolicyInvalid
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.consortium_checks import CODEC_WEIGHT_FLOOR, ConsortiumChecks

if TYPE_CHECKING:  # plan_journal imports this module
    from secure_fed.secure.plan_journal import PlanJournal

__all__ = [
    "POLICY_CHANGED",
    "POLICY_PINNED",
    "MIN_EVIDENCE_ROWS",
    "MIN_MOMENT_ROWS",
    "POLICY_FORMAT",
    "ConsortiumPolicy",
    "PolicyPin",
    "SignedPolicy",
]

_log = logging.getLogger(__name__)

POLICY_FORMAT = "secure-fed-policy/1"
POLICY_PINNED = register_event(
    "policy.pinned",
    "A gatekeeper verified every participant's signature on the consortium policy and pinned it.",
).name
POLICY_CHANGED = register_event(
    "policy.changed",
    "A gatekeeper adopted a newer consortium policy that every participant signed.",
).name
#: Domain separation of a participant's signature over the policy's bytes.
_SIGNED_PREFIX = b"secure-fed consortium policy\n"
#: A score or moment averages over at least ``min(N, MIN_MOMENT_ROWS)`` rows.
MIN_MOMENT_ROWS = 256
#: An evidence scalar averages over at least ``min(N, MIN_EVIDENCE_ROWS)`` labeled rows.
MIN_EVIDENCE_ROWS = 64
#: Largest policy document accepted before parsing.
MAX_POLICY_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class ConsortiumPolicy(ConsortiumChecks):
    """What every round of the consortium may open (validated; the field is named in errors).

    Its validation and its check of a release plan are its base,
    :class:`~secure_fed.secure.consortium_checks.ConsortiumChecks`.

    Parameters
    ----------
    participant_ids
        The enrolled participants, each of whom signs the policy.
    shape
        ``(N, C)`` of every upload.
    quorum
        Smallest accepted set of a publication (``2 <= quorum <= len(participant_ids)``).
    max_weight
        Largest publication weight, in ``[weight_floor, 1 / quorum]`` (default ``1 / quorum``).
    weight_floor
        Smallest publication weight, at least the codec's resolution 2^-16.
    scored, ranking, copies
        Whether every plan must score (Mahalanobis passes), rank (robust
        subset) and detect near-copies. ``copies`` requires ``scored``.
    exclude_quantile
        Chi-square quantile of the exclusion floor, in ``(0.5, 1)``.
    min_moment_rows, min_evidence_rows
        Rows a score or moment, and an evidence scalar, average over at least
        (capped at ``N``).
    max_flagged
        The most participants a round's outlier policy may give a factor below 1
        (exclude or down-weight), an integer ``>= 0``; ``None`` (default): no
        budget (a plan may still exclude at most a minority). With it one participant
        within the public bound moves a published cell by at most
        ``2 B min(1, max_weight (1 + max_flagged))`` (without evidence weighting and
        copy detection; docs/audit/threat-model.md). ``None`` is left out of the
        signed document, so a policy signed before the field existed still parses.
    isolation
        ``T`` of the multi-round rule (:mod:`secure_fed.secure.roster_rule`): no linear
        combination of all the publications a gatekeeper made may single out fewer
        than ``T`` participants, assuming their predictions did not change (``1``: no
        rule; at most ``quorum``).
    version
        Increases with every amendment (>= 1).
    consortium
        A name for people (logged and shown in reports).
    """

    participant_ids: tuple[str, ...]
    shape: tuple[int, int]
    quorum: int
    max_weight: float | None = None
    weight_floor: float = CODEC_WEIGHT_FLOOR
    scored: bool = True
    ranking: bool = True
    copies: bool = False
    exclude_quantile: float = 0.999
    min_moment_rows: int = MIN_MOMENT_ROWS
    min_evidence_rows: int = MIN_EVIDENCE_ROWS
    max_flagged: int | None = None
    isolation: int = 1
    version: int = 1
    consortium: str = "secure-fed"

    # -- bytes ---------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Canonical JSON (floats as exact ``repr`` strings): what participants sign."""
        data: dict[str, Any] = {"format": POLICY_FORMAT}
        for key, value in asdict(self).items():
            data[key] = repr(value) if isinstance(value, float) else value
        data["participant_ids"] = list(self.participant_ids)
        data["shape"] = list(self.shape)
        if self.max_flagged is None:  # a policy without a budget signs the same bytes as before
            del data["max_flagged"]
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ConsortiumPolicy:
        """Parse :meth:`to_bytes` output; the bytes must be canonical.

        Raises
        ------
        PolicyInvalid
            On anything but a valid, canonical policy document.
        """
        if not isinstance(data, bytes) or len(data) > MAX_POLICY_BYTES:
            raise PolicyInvalid("a policy document is bytes of at most 64 KiB")
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict) or raw.pop("format", None) != POLICY_FORMAT:
                raise PolicyInvalid(f"not a {POLICY_FORMAT} document")
            floats = ("max_weight", "weight_floor", "exclude_quantile")
            fields: dict[str, Any] = {k: float(v) if k in floats else v for k, v in raw.items()}
            fields["participant_ids"] = tuple(fields["participant_ids"])
            fields["shape"] = tuple(fields["shape"])
            policy = cls(**fields)
        except PolicyInvalid:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PolicyInvalid(f"policy document refused: {exc}") from exc
        if policy.to_bytes() != data:
            raise PolicyInvalid("the policy document is not in canonical form")
        return policy

    @property
    def sm3(self) -> str:
        """Hex SM3 digest of :meth:`to_bytes` (what a gatekeeper pins and audits)."""
        return sm3_digest(self.to_bytes()).hex()


@dataclass(frozen=True)
class SignedPolicy:
    """A policy document and every participant's SM2 signature over it.

    Parameters
    ----------
    document
        :meth:`ConsortiumPolicy.to_bytes`.
    signatures
        Participant id to DER SM2 signature over the domain-separated document.
    """

    document: bytes
    signatures: Mapping[str, bytes] = field(repr=False)

    @classmethod
    def sign(cls, policy: ConsortiumPolicy, keys: Mapping[str, SM2PrivateKey]) -> SignedPolicy:
        """Sign ``policy`` with each participant's key (every participant must sign)."""
        missing = sorted(set(policy.participant_ids) - set(keys))
        if missing:
            raise PolicyInvalid(f"participants {missing} have no key to sign the policy with")
        document = policy.to_bytes()
        message = _SIGNED_PREFIX + document
        return cls(document, {p: keys[p].sign(message) for p in policy.participant_ids})

    def verify(self, participant_keys: Mapping[str, SM2PublicKey]) -> ConsortiumPolicy:
        """Return the policy if every participant it names signed it with its enrolled key.

        Raises
        ------
        PolicyInvalid
            If the document is invalid, a participant's signature is missing or
            does not verify, the policy names a participant without an enrolled
            key, or a signature comes from anybody else.
        """
        policy = ConsortiumPolicy.from_bytes(self.document)
        named = set(policy.participant_ids)
        if set(participant_keys) != named:
            raise PolicyInvalid(
                "the policy's participants are not the enrolled ones: "
                f"{sorted(named ^ set(participant_keys))}"
            )
        if set(self.signatures) != named:
            raise PolicyInvalid(
                "the policy must be signed by every participant; missing "
                f"{sorted(named - set(self.signatures))}, "
                f"foreign {sorted(set(self.signatures) - named)}"
            )
        message = _SIGNED_PREFIX + self.document
        for pid in policy.participant_ids:
            signature = self.signatures[pid]
            if not isinstance(signature, bytes) or len(signature) > 80:
                raise PolicyInvalid(f"the signature of {pid!r} is malformed")
            try:
                participant_keys[pid].verify(message, signature)
            except CryptoError as exc:
                raise PolicyInvalid(f"the signature of {pid!r} does not verify: {exc}") from exc
        return policy

    def to_json(self) -> bytes:
        """Return the signed document as the JSON file the ceremony writes (``policy.json``)."""
        data = {
            "document": self.document.decode(),
            "signatures": {p: s.hex() for p, s in sorted(self.signatures.items())},
        }
        return json.dumps(data, indent=2, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> SignedPolicy:
        """Parse :meth:`to_json` output (signatures are checked by :meth:`verify`).

        Raises
        ------
        PolicyInvalid
            If the file is not a signed policy.
        """
        if not isinstance(data, bytes) or len(data) > 4 * MAX_POLICY_BYTES:
            raise PolicyInvalid("a signed policy file is bytes of at most 256 KiB")
        try:
            raw = json.loads(data)
            document = raw["document"].encode()
            signatures = {str(p): bytes.fromhex(s) for p, s in raw["signatures"].items()}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PolicyInvalid(f"signed policy refused: {exc}") from exc
        return cls(document, signatures)


@dataclass
class PolicyPin:
    """A gatekeeper's pinned policy; changes only by an amendment every participant signed.

    Parameters
    ----------
    signed
        The signed policy from the key ceremony.
    participant_keys
        Every enrolled participant's SM2 public key.
    party
        The gatekeeper's name in audit events.
    audit
        Sink of ``policy.pinned`` and ``policy.changed`` (and ``access.denied``) events.
    journal
        A :class:`~secure_fed.secure.plan_journal.PlanJournal`: the pinned version and
        digest survive a restart; an older policy, or another of the same version,
        is refused at start.

    Raises
    ------
    PolicyInvalid
        If a signature is missing or invalid, or the journal pins a newer or other policy.
    """

    signed: SignedPolicy
    participant_keys: Mapping[str, SM2PublicKey] = field(repr=False)
    party: str = "gatekeeper"
    audit: AuditSink | None = None
    journal: PlanJournal | None = field(default=None, repr=False)
    policy: ConsortiumPolicy = field(init=False)

    def __post_init__(self) -> None:
        self.policy = self.signed.verify(self.participant_keys)
        pinned = None if self.journal is None else self.journal.pinned_policy()
        if pinned is not None:
            version, digest, document = pinned
            if version > self.policy.version or (
                version == self.policy.version and not hmac.compare_digest(digest, self.policy.sm3)
            ):
                raise PolicyInvalid(
                    f"this {self.party} pinned policy version {version} (sm3 {digest[:16]}...); "
                    f"refusing to start under version {self.policy.version} "
                    f"(sm3 {self.policy.sm3[:16]}...)"
                )
            if version < self.policy.version:
                self._pin("policy.changed", previous=ConsortiumPolicy.from_bytes(document))
            return
        self._pin("policy.pinned", previous=None)

    def amend(self, signed: SignedPolicy) -> ConsortiumPolicy:
        """Adopt a newer policy that every participant of the pinned one signed.

        Raises
        ------
        PolicyInvalid
            If a signature is missing or invalid, or the version is not higher (refusal
            audited as ``access.denied``, op ``policy``).
        """
        try:
            policy = signed.verify(self.participant_keys)
            if policy.version <= self.policy.version:
                raise PolicyInvalid(
                    f"policy version {policy.version} is not newer than the pinned "
                    f"{self.policy.version}"
                )
        except PolicyInvalid as exc:
            if self.audit is not None:
                self.audit.record(
                    "access.denied",
                    {"party": self.party, "op": "policy", "code": exc.code, "reason": str(exc)},
                )
            raise
        previous, self.signed, self.policy = self.policy, signed, policy
        self._pin("policy.changed", previous=previous)
        return policy

    def _pin(self, event: str, *, previous: ConsortiumPolicy | None) -> None:
        if self.journal is not None:
            self.journal.pin_policy(self.policy.version, self.policy.sm3, self.policy.to_bytes())
        _log.info(
            "%s pinned consortium policy version %d (sm3 %s)",
            self.party,
            self.policy.version,
            self.policy.sm3,
        )
        if self.audit is None:
            return
        fields: dict[str, object] = {
            "party": self.party,
            "version": self.policy.version,
            "policy_sm3": self.policy.sm3,
            "policy": json.loads(self.policy.to_bytes()),
            "signers": sorted(self.signed.signatures),
        }
        if previous is not None:
            fields["previous_version"] = previous.version
            fields["previous_sm3"] = previous.sm3
        self.audit.record(event, fields)

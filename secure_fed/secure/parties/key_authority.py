"""The key authority: CKKS secret key holder, Beaver-triple dealer, gatekeeper of releases.

The key authority learns only what it is asked to decrypt, and it decrypts
only what :class:`~secure_fed.secure.release_policy.ReleasePolicy` allows (the
same policy as the shares-mode helper): aggregates over at least
``min_participants`` distinct contributors (the published aggregate, the
scoring mean, the pooled second moments) and single scalar scores, one
participant at a time. The kind and contributor count come from the
ciphertext's own header, read before anything is parsed, so an upload is
refused whatever the request calls it. A refusal is
:class:`~secure_fed.errors.DecryptionRefused` and an ``access.denied`` audit
event. Released values are noise-flooded by
:mod:`crypto.ckks` (Li and Micciancio, EUROCRYPT 2021). Optional central DP adds
Gaussian noise to the published aggregate and charges every contributor one
participant-level Gaussian mechanism (Dwork and Roth 2014, Theorem A.1 via the
ledger's RDP accountant). Every request and release is a ``decryption.*`` audit
event and a row of :attr:`KeyAuthority.log`, which the revelation tests inspect.

In shares mode the authority holds no shares; it deals Beaver triples
(:func:`crypto.shares.deal_triples`) to the aggregator and the helper.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from crypto.ckks import (
    KeyAuthorityKeys,
    decrypt_aggregate,
    decrypt_score,
    generate_keys,
    load_encrypted,
)
from crypto.ckks.wire import claimed_kind
from crypto.errors import CryptoError
from crypto.shares import ShareLabel, ShareMacKey, deal_range_check, deal_triples
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyAuthorityConfigInvalid,
)
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.modes.share_range import RANGE_PARTICIPANT, RANGE_SPEC
from secure_fed.secure.parties.central_dp import (
    CentralDP,
    ChargeGate,
    add_central_noise,
    central_sensitivity,
)
from secure_fed.secure.release_policy import (
    AGGREGATE_PURPOSES,
    PURPOSES,
    DecryptionRecord,
    ReleasePolicy,
    ReleaseRequest,
    ReleaseRule,
)
from secure_fed.wire import (
    KEY_AUTHORITY_REPLY,
    KEY_AUTHORITY_REQUEST,
    decode_frame,
    encode_array,
    encode_frame,
    number_from_wire,
)

__all__ = [
    "AGGREGATE_PURPOSES",
    "CentralDP",
    "DecryptionRecord",
    "KeyAuthority",
    "decryption_request",
]

_log = logging.getLogger(__name__)


@dataclass
class KeyAuthority:
    """The key authority party; talks to the aggregator in bytes (:meth:`handle`).

    Build with :meth:`for_ckks` (generates a CKKS_SCORING key epoch); without
    ``keys`` it only deals Beaver triples (shares mode).

    Parameters
    ----------
    min_participants
        Smallest distinct participant set of a decrypted aggregate (>= 2).
    keys
        The CKKS key epoch (``None`` in shares mode).
    audit
        Sink of ``key.generated``, ``decryption.*`` and ``access.denied`` events.
    central_dp, budget
        Optional central DP on the published aggregate and the gate it charges.
    max_request_bytes
        Refuse larger requests before parsing (below the wire table's ceiling).
    release_rules
        Extra release rules (a round's release plan), after the built-in ones.
    """

    min_participants: int
    keys: KeyAuthorityKeys | None = None
    audit: AuditSink | None = None
    central_dp: CentralDP | None = None
    budget: ChargeGate | None = None
    max_request_bytes: int = 256 << 20
    release_rules: tuple[ReleaseRule, ...] = ()
    log: list[DecryptionRecord] = field(default_factory=list)
    policy: ReleasePolicy = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.min_participants, int) or self.min_participants < 2:
            raise KeyAuthorityConfigInvalid(
                f"min_participants must be an integer >= 2, got {self.min_participants!r}"
            )
        if self.central_dp is not None and self.budget is None:
            raise KeyAuthorityConfigInvalid("central_dp needs a budget gate to charge")
        self.policy = ReleasePolicy(
            party="key_authority",
            min_participants=self.min_participants,
            refusal=DecryptionRefused,
            audit=self.audit,
            log=self.log,
            rules=self.release_rules,
        )

    @classmethod
    def for_ckks(
        cls, *, min_participants: int, preset: str = "CKKS_SCORING", **kwargs: object
    ) -> KeyAuthority:
        """Generate a key epoch and return the authority holding it."""
        ka = cls(min_participants=min_participants, keys=generate_keys(preset), **kwargs)  # type: ignore[arg-type]
        if ka.audit is not None and ka.keys is not None:
            ka.audit.record(
                "key.generated",
                {"kind": "ckks", "preset": preset, "fingerprint": ka.keys.fingerprint.hex()},
            )
        return ka

    @property
    def public_context(self) -> bytes:
        """Serialized public context (distributed once per key epoch)."""
        return self._keys().public_context.data

    @property
    def fingerprint(self) -> bytes:
        """SM3 fingerprint of the public context."""
        return self._keys().fingerprint

    def _keys(self) -> KeyAuthorityKeys:
        if self.keys is None:
            raise KeyAuthorityConfigInvalid("this key authority holds no CKKS keys (shares mode)")
        return self.keys

    # -- decryption ---------------------------------------------------------------

    def handle(self, request: bytes) -> bytes:
        """Serve one decryption request (bytes in, bytes out).

        Raises
        ------
        AuthorityRequestMalformed
            Bad frame, header or ciphertext bytes.
        DecryptionRefused
            Not an aggregate over enough contributors nor a single scalar score.
        """
        header, payload = decode_frame(
            request, KEY_AUTHORITY_REQUEST, max_bytes=self.max_request_bytes
        )
        round_id, purpose, ids, shape = _parse_request(header)
        self._emit("decryption.requested", round_id, purpose, shape, ids)
        claim = claimed_kind(payload)
        if claim is None:
            raise AuthorityRequestMalformed("payload is not a CKKS ciphertext (header)")
        value_kind, counted = claim
        released = (1,) if purpose == "score" else shape
        ask = ReleaseRequest(
            round_id=round_id,
            purpose=purpose,
            contributors=tuple(ids),
            value_kind=value_kind,
            shape=released,
            counted=counted,
        )
        self.policy.check(ask)  # before parsing: the kind and count are the header's claims
        values = self._decrypt(payload, value_kind, shape)
        dp = purpose == "aggregate" and self.central_dp is not None
        if dp:
            values = self._central_noise(values, ids, header, round_id)
        self.policy.released(replace(ask, shape=tuple(values.shape)), central_dp=dp)
        meta, raw = encode_array(values)
        reply = {"purpose": purpose, "array": meta, "central_dp": dp}
        return encode_frame(KEY_AUTHORITY_REPLY, reply, raw)

    def _decrypt(self, payload: bytes, kind: str, shape: tuple[int, int]) -> np.ndarray:
        """Parse and decrypt a ciphertext whose kind the policy accepted."""
        try:
            matrix = load_encrypted(
                self._keys().public_context,
                payload,
                kind="score" if kind == "score" else "aggregate",
                n_samples=shape[0],
                n_classes=shape[1],
            )
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"ciphertext refused: {exc}") from exc
        if kind == "score":
            return np.array([decrypt_score(self._keys(), matrix)])
        return decrypt_aggregate(self._keys(), matrix, min_contributors=self.min_participants)

    def _emit(
        self,
        event: str,
        round_id: int,
        purpose: str,
        shape: tuple[int, ...],
        ids: Sequence[str],
        *,
        dp: bool = False,
    ) -> None:
        if self.audit is not None:
            self.audit.record(
                event,
                {
                    "party": "key_authority",
                    "round_id": round_id,
                    "purpose": purpose,
                    "shape": list(shape),
                    "contributors": len(ids),
                    "participant_ids": list(ids),
                    "central_dp": dp,
                },
            )

    def _central_noise(
        self, values: np.ndarray, ids: Sequence[str], header: dict[str, object], round_id: int
    ) -> np.ndarray:
        dp, gate = self.central_dp, self.budget
        assert dp is not None and gate is not None
        bound = number_from_wire(header.get("bound"))  # decimal strings on the wire
        max_weight = number_from_wire(header.get("max_weight"))
        sens = central_sensitivity(size=values.size, bound=bound, max_weight=max_weight)
        return add_central_noise(
            values, dp=dp, gate=gate, participant_ids=ids, sensitivity=sens, round_id=round_id
        )

    # -- shares mode: Beaver triples ------------------------------------------------

    def deal(
        self,
        *,
        round_id: int,
        tensor: str,
        count: int,
        key_aggregator: ShareMacKey,
        key_helper: ShareMacKey,
    ) -> tuple[bytes, bytes]:
        """Deal ``count`` Beaver triples; return (blob for the aggregator, blob for the helper).

        The authority holds no shares in this mode, so the masked openings it
        never sees could not tell it anything either.
        """
        label = ShareLabel(round_id=round_id, participant_id="beaver", tensor=tensor)
        t0, t1 = deal_triples(count, label=label, seeded=True)
        self.log.append(
            DecryptionRecord(
                round_id, f"triples:{tensor}", "triples", (count,), 0, (), False, time.time()
            )
        )
        return t0.to_bytes(key_aggregator), t1.to_bytes(key_helper)

    def deal_range(
        self,
        *,
        round_id: int,
        tensor: str,
        count: int,
        key_aggregator: ShareMacKey,
        key_helper: ShareMacKey,
    ) -> tuple[bytes, bytes]:
        """Deal one range check of ``count`` upload values (edaBits and AND triples).

        Returns (blob for the aggregator, blob for the helper); the material is
        independent of the values, which the authority never sees.
        """
        label = ShareLabel(round_id=round_id, participant_id=RANGE_PARTICIPANT, tensor=tensor)
        m0, m1 = deal_range_check(count, label=label, spec=RANGE_SPEC)
        record = DecryptionRecord(
            round_id, f"range:{tensor}", "range", (count,), 0, (), False, time.time()
        )
        self.log.append(record)
        return m0.to_bytes(key_aggregator), m1.to_bytes(key_helper)


def _parse_request(header: dict[str, object]) -> tuple[int, str, list[str], tuple[int, int]]:
    round_id, purpose = header.get("round_id"), header.get("purpose")
    ids, shape = header.get("participant_ids"), header.get("shape")
    if isinstance(round_id, bool) or not isinstance(round_id, int) or round_id < 0:
        raise AuthorityRequestMalformed("request needs an integer round_id >= 0")
    if purpose not in PURPOSES:
        raise AuthorityRequestMalformed(f"purpose {purpose!r} is unknown; allowed: {PURPOSES}")
    if not isinstance(ids, list) or not ids or not all(isinstance(p, str) for p in ids):
        raise AuthorityRequestMalformed("request needs a non-empty participant_ids list")
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(isinstance(s, int) and s >= 1 for s in shape)
    ):
        raise AuthorityRequestMalformed(f"request shape must be [rows, cols], got {shape!r}")
    return round_id, str(purpose), list(ids), (shape[0], shape[1])


def decryption_request(
    *,
    round_id: int,
    purpose: str,
    participant_ids: Sequence[str],
    shape: tuple[int, int],
    ciphertext: bytes,
    **extra: object,
) -> bytes:
    """Build the bytes of a decryption request (aggregator side)."""
    header: dict[str, object] = {
        "round_id": round_id,
        "purpose": purpose,
        "participant_ids": list(participant_ids),
        "shape": list(shape),
    }
    header.update(extra)
    return encode_frame(KEY_AUTHORITY_REQUEST, header, ciphertext)

"""The key authority's checks of a decryption request, before anything is decrypted.

:class:`DecryptionChecks` is a base of
:class:`~secure_fed.secure.parties.decryption.DecryptionService`: the key epoch
a request names (and the one its plan step must use), the policy's view of
the ciphertext (:class:`~secure_fed.secure.release_policy.ReleaseRequest`, its
kind and count read from the ciphertext header), the plan step it is, the
epoch's release limit and the publication's witness. Every refusal is an
``access.denied`` event and a typed error (:meth:`DecryptionChecks._deny`).
:func:`plan_fields` reads the release-plan fields a claim states.
"""

from __future__ import annotations

from collections.abc import Mapping

from crypto.ckks import (
    KeyAuthorityKeys,
)
from crypto.ckks.wire import claimed_kind
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyAuthorityConfigInvalid,
    KeyEpochExhausted,
    PublicationInconsistent,
)
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.ckks_claims import claim_plan_fields
from secure_fed.secure.protocol.vocabulary import (
    AuditEvent,
    ClaimOp,
    Party,
    Step,
)
from secure_fed.secure.release_plan import PlanBook
from secure_fed.secure.release_policy import (
    SCALAR_PURPOSES,
    ReleaseRequest,
)
from secure_fed.wire import (
    number_from_wire,
)

__all__ = ["DecryptionChecks", "plan_fields"]


class DecryptionChecks:
    """The checks of a decryption request (a base of the decryption service).

    The attributes are the key authority's fields the checks read.
    """

    min_participants: int
    keys: KeyAuthorityKeys | None
    publication_keys: KeyAuthorityKeys | None
    max_releases: int | None
    audit: AuditSink | None
    plans: PlanBook

    def _keys(self) -> KeyAuthorityKeys:
        if self.keys is None:
            raise KeyAuthorityConfigInvalid("this key authority holds no CKKS keys (shares mode)")
        return self.keys

    def _publication(self) -> KeyAuthorityKeys:
        if self.publication_keys is None:
            raise KeyAuthorityConfigInvalid("this key authority holds no publication epoch")
        return self.publication_keys

    def _epoch_named(self, epoch: object) -> KeyAuthorityKeys:
        """Return the epoch a request names (``epoch``: hex fingerprint; absent: scoring)."""
        keys = self._keys()
        if epoch is None:
            return keys
        for candidate in (keys, self.publication_keys):
            if candidate is not None and epoch == candidate.fingerprint.hex():
                return candidate
        raise AuthorityRequestMalformed(f"request names no key epoch of this authority: {epoch!r}")

    def _check_step_epoch(self, ask: ReleaseRequest, step: str, keys: KeyAuthorityKeys) -> None:
        """Refuse the publication under the scoring epoch, anything else under the publication's."""
        if self.publication_keys is None:
            return
        publishing = step == Step.PUBLICATION
        wanted = self.publication_keys if publishing else self._keys()
        if keys is not wanted:
            named = "publication" if keys is self.publication_keys else "scoring"
            self._deny(
                ask,
                f"the plan's {step} is decrypted only under the "
                f"{'publication' if publishing else 'scoring'} epoch, not the {named}",
                DecryptionRefused,
            )

    def _ask(
        self, payload: bytes, round_id: int, purpose: str, ids: list[str], shape: tuple[int, int]
    ) -> ReleaseRequest:
        found = claimed_kind(payload)
        if found is None:
            raise AuthorityRequestMalformed("payload is not a CKKS ciphertext (header)")
        value_kind, counted = found
        return ReleaseRequest(
            round_id=round_id,
            purpose=purpose,
            contributors=tuple(ids),
            value_kind=value_kind,
            shape=(1,) if purpose in SCALAR_PURPOSES else shape,
            counted=counted,
        )

    def _deny(self, ask: ReleaseRequest, reason: str, error: type[DecryptionRefused]) -> None:
        if self.audit is not None:
            self.audit.record(
                AuditEvent.ACCESS_DENIED,
                {
                    "party": Party.KEY_AUTHORITY,
                    "round_id": ask.round_id,
                    "purpose": ask.purpose,
                    "code": error.code,
                    "reason": reason,
                },
            )
        raise error(f"round {ask.round_id}, {ask.purpose}: {reason}")

    def _release_step(self, ask: ReleaseRequest) -> str:
        """Return the plan step ``ask`` is (the plan accepted it); refuse a mis-shaped moment.

        Only the publication may open a first-order ``(N, C)`` matrix: a moments
        request must carry the ``C(C+1)/2`` slot-summed products, so the published
        aggregate's ciphertext cannot be opened as "moments" (unnoised).
        """
        tracker = self.plans.tracker(ask.round_id)
        step = tracker.step_of(ask) if tracker is not None else None
        if tracker is None or step is None:
            self._deny(ask, "the request is no step of the round's plan", DecryptionRefused)
            raise AssertionError  # unreachable: _deny raises
        classes = tracker.plan.num_classes
        if step == Step.MOMENTS and ask.shape != (1, classes * (classes + 1) // 2):
            self._deny(
                ask,
                f"moments are {classes * (classes + 1) // 2} sums, not {ask.shape}",
                DecryptionRefused,
            )
        return step

    @property
    def release_limit(self) -> int:
        """Ciphertexts this epoch may release: ``max_releases``, else the preset's sized ``t``."""
        return self.release_limit_of(self._keys())

    def release_limit_of(self, keys: KeyAuthorityKeys) -> int:
        """Ciphertexts ``keys`` (either epoch) may release: its sized ``t`` or ``max_releases``."""
        sized = keys.preset.max_decryptions
        return sized if self.max_releases is None else min(self.max_releases, sized)

    def _check_epoch(self, ask: ReleaseRequest, keys: KeyAuthorityKeys) -> None:
        limit = self.release_limit_of(keys)
        if keys.releases >= limit:
            reason = (
                f"key epoch {keys.fingerprint.hex()[:16]} released {keys.releases} of "
                f"{limit} decryptions; rotate the keys"
            )
            self._deny(ask, reason, KeyEpochExhausted)

    def _check_witness(self, ask: ReleaseRequest, step: str, witness: bytes | None) -> None:
        """Require the scoring-epoch witness on a two-epoch publication, and only there."""
        if step == Step.PUBLICATION and self.publication_keys is not None and witness is None:
            self._deny(
                ask,
                "the publication carries no witness of the scored values",
                PublicationInconsistent,
            )
        if witness is not None and (step != Step.PUBLICATION or self.publication_keys is None):
            self._deny(ask, "only a two-epoch publication carries a witness", DecryptionRefused)


def plan_fields(claim: Mapping[str, object]) -> dict[str, object]:
    """Return the release-plan fields a claim states (step, roster, centre, rows, W, slice).

    Raises
    ------
    AuthorityRequestMalformed
        If a field is present but malformed.
    """
    out: dict[str, object] = {}
    try:
        if isinstance(claim.get("step"), str):
            out["step"] = claim["step"]
        for name in ("roster", "centre"):
            raw = claim.get(name)
            if isinstance(raw, list):
                out[name] = tuple(str(u[0] if isinstance(u, list) else u) for u in raw)
        if "centre" in claim and isinstance(claim.get("samples"), int):
            out["samples"] = claim["samples"]
        if "centre" in claim and claim.get("op") == ClaimOp.SCORE:
            rows = claim["whitening"]
            out["whitening"] = tuple(tuple(_float(v) for v in row) for row in rows)  # type: ignore[attr-defined]
        if claim.get("op") == ClaimOp.WEIGHTED_SUM:
            out["weights"] = tuple(_float(w) for w in claim["weights"])  # type: ignore[attr-defined]
        out.update(claim_plan_fields(claim))  # an evidence claim's slice and rows
    except (TypeError, KeyError, IndexError) as exc:
        raise AuthorityRequestMalformed(f"claim plan fields refused: {exc}") from exc
    return out


def _float(value: object) -> float:
    number = value if isinstance(value, float) else number_from_wire(value)
    if number is None:
        raise AuthorityRequestMalformed(f"claim number {value!r} is not an exact decimal")
    return float(number)

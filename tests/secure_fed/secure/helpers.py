"""Synthetic predictions for the secure-aggregation tests (fixed seeds, no training)."""

from __future__ import annotations

import numpy as np

from secure_fed.evaluation.attacks import make_attack
from secure_fed.secure.scoring.outlier import OutlierPolicy, excluded_ids

BOUND = 8.0


def excluded(scores: dict[str, float], *, dof: int, min_keep: int = 1) -> set[str]:
    """Ids a fresh :class:`OutlierPolicy` excludes on one round of scores."""
    return excluded_ids(OutlierPolicy(dof=dof, min_keep=min_keep).decide(scores, round_id=1))


def population(
    k: int,
    n: int,
    c: int,
    *,
    seed: int = 0,
    spread: float = 0.4,
    attackers: int = 0,
    attack: str | None = None,
) -> dict[str, np.ndarray]:
    """K participants' clipped logits on one public set: shared signal, per-model noise.

    Honest participants see the same per-sample class signal plus their own
    model's deviation; the last ``attackers`` apply a registered attack.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, size=n)
    signal = rng.normal(0.0, 1.0, size=(n, c))
    signal[np.arange(n), labels] += 4.0
    out = {}
    for j in range(k):
        bias = rng.normal(0.0, spread / 2, size=(1, c))
        pred = signal + bias + rng.normal(0.0, spread, size=(n, c))
        if attack is not None and j >= k - attackers:
            pred = make_attack(attack, bound=BOUND, seed=seed + j)(pred)
        out[f"p{j:02d}"] = np.clip(pred, -BOUND, BOUND)
    return out


# --- driving the round engine with signed envelopes -----------------------------------

import secrets as _secrets  # noqa: E402

from crypto.sm import SM2PrivateKey, sm3_digest  # noqa: E402
from secure_fed.federation.engine import RoundEngine  # noqa: E402
from secure_fed.federation.envelope import EnvelopeVerifier, seal_upload  # noqa: E402
from secure_fed.federation.messages import UploadHeader, encode_upload  # noqa: E402
from secure_fed.federation.schema import (  # noqa: E402
    ModelSchema,
    OutputSpec,
    RoundSchema,
    SchemaRegistry,
    SemVer,
)
from secure_fed.federation.stages import RoundConfig  # noqa: E402
from secure_fed.federation.store import JsonFileRoundStore  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def contract(c: int) -> tuple[RoundSchema, ModelSchema]:
    output = OutputSpec(num_classes=c, bound=BOUND)
    return RoundSchema(major=1, output=output), ModelSchema(
        model_id="mlp", version=SemVer(1, 0, 0), output=output
    )


class Harness:
    """Aggregator (engine + envelope gate + policy) and signing participants, all real."""

    def __init__(self, dep, tmp_path, *, ids, min_participants: int, audit, evidence=None) -> None:  # type: ignore[no-untyped-def]
        self.dep, self.ids = dep, list(ids)
        self.round_schema, self.model = contract(dep.shape[1])
        registry = SchemaRegistry()
        registry.register(self.model)
        self.policy = OutlierPolicy(dof=dep.shape[1] - 1)
        self.clock = Clock()
        self.engine = RoundEngine(
            store=JsonFileRoundStore(directory=tmp_path / "rounds"),
            aggregator=dep.aggregator(bound=BOUND),
            mode=dep.mode,
            registry=registry,
            outlier_filter=self.policy,
            audit=audit,
            clock=self.clock,
            evidence=evidence,
        )
        self.keys = {p: SM2PrivateKey.generate() for p in self.ids}
        self.params = dep.params
        self.verifier = EnvelopeVerifier(
            keys={p: k.public_key for p, k in self.keys.items()},
            submit=self.engine.submit,
            params=self.params,
            max_bytes=32 << 20,
            audit=audit,
        )
        self.encoders = {p: dep.encoder(p, bound=BOUND) for p in self.ids}
        self.min_participants = min_participants

    def config(self, round_id: int) -> RoundConfig:
        return RoundConfig(
            round_id=round_id,
            public_set_id="synthetic",
            public_set_sm3=sm3_digest(b"pub").hex(),
            schema=self.round_schema,
            mode=self.dep.mode,
            num_public=self.dep.shape[0],
            min_participants=self.min_participants,
            deadline=2000.0,
            projection_seed=0,
            max_upload_bytes=32 << 20,
        )

    def upload_header(self, pid: str, payload: bytes, round_id: int = 1) -> UploadHeader:
        """``pid``'s honest upload header for ``payload`` in ``round_id`` (a fresh nonce)."""
        return UploadHeader(
            round_id=round_id,
            participant_id=pid,
            mode=self.dep.mode,
            schema=self.model,
            schema_hash=self.round_schema.schema_hash(),
            num_samples=100,
            nonce=_secrets.token_hex(16),
            payload_sm3=sm3_digest(payload).hex(),
        )

    def envelope(self, pid: str, matrix, round_id: int) -> bytes:  # type: ignore[no-untyped-def]
        payload = self.encoders[pid].encode(matrix)
        header = self.upload_header(pid, payload, round_id)
        return seal_upload(encode_upload(header, payload), key=self.keys[pid], params=self.params)

    def round(self, round_id: int, preds):  # type: ignore[no-untyped-def]
        self.engine.open(self.config(round_id))
        self.engine.start_collecting(round_id)
        for pid, matrix in preds.items():
            self.verifier.accept(self.envelope(pid, matrix, round_id), round_id=round_id)
        self.engine.close(round_id)
        scores = self.engine.filter(round_id)
        publication = self.engine.publish(round_id)
        return scores, self.engine.state(round_id), publication


# --- release plans ---------------------------------------------------------------------

from secure_fed.secure.consortium_policy import ConsortiumPolicy  # noqa: E402
from secure_fed.secure.parties.helper import plan_request  # noqa: E402
from secure_fed.secure.release_plan import ReleasePlan  # noqa: E402
from secure_fed.secure.scoring.mahalanobis import ScoringConfig  # noqa: E402


def plan(round_id: int, shape: tuple[int, int], *, min_participants: int = 3, **kw) -> ReleasePlan:  # type: ignore[no-untyped-def]
    """The default release plan of a round (``scored=False``: publication only)."""
    return ReleasePlan.for_round(
        round_id=round_id,
        min_participants=min_participants,
        shape=shape,
        scoring=ScoringConfig(),
        **kw,
    )


def publication_only(
    ids: list[str] | tuple[str, ...], shape: tuple[int, int], *, quorum: int = 3, **kw: object
) -> ConsortiumPolicy:
    """A consortium policy that does not require the scoring steps (publication-only plans).

    For tests of the decryption and opening mechanics: the default policy requires scoring.
    """
    return ConsortiumPolicy(
        participant_ids=tuple(ids),
        shape=shape,
        quorum=quorum,
        scored=False,
        ranking=False,
        **kw,  # type: ignore[arg-type]
    )


def install_helper_plan(helper, the_plan: ReleasePlan) -> None:  # type: ignore[no-untyped-def]
    """Fix ``the_plan`` with a shares-mode helper through its byte channel."""
    helper.handle(plan_request(the_plan, key=helper.request_key))

from __future__ import annotations

import secrets

import numpy as np

from crypto.sm.sm3 import sm3_digest
from secure_fed.federation.messages import UploadHeader, encode_upload
from secure_fed.federation.schema import ModelSchema, OutputSpec, RoundSchema, SemVer
from secure_fed.federation.stages import RoundConfig
from secure_fed.secure.modes.plaintext import InsecurePlaintextEncoder

N_PUB, C, BOUND = 12, 3, 8.0
OUTPUT = OutputSpec(num_classes=C, representation="clipped_logits", bound=BOUND)
CONTRACT = RoundSchema(major=1, output=OUTPUT)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def schema(
    model_id: str = "mlp", version: str = "1.0.0", output: OutputSpec = OUTPUT
) -> ModelSchema:
    return ModelSchema(model_id=model_id, version=SemVer.parse(version), output=output)


def make_config(
    round_id: int = 1,
    *,
    min_participants: int = 2,
    deadline: float = 2000.0,
    max_weight: float = 1.0,
) -> RoundConfig:
    return RoundConfig(
        round_id=round_id,
        public_set_id="digits-public",
        public_set_sm3=sm3_digest(b"pub").hex(),
        schema=CONTRACT,
        mode="plaintext",
        num_public=N_PUB,
        min_participants=min_participants,
        deadline=deadline,
        projection_seed=7,
        max_weight=max_weight,
    )


def make_upload(
    pid: str,
    matrix: np.ndarray,
    *,
    round_id: int = 1,
    nonce: str | None = None,
    declared: ModelSchema | None = None,
    num_samples: int = 100,
    contract: RoundSchema = CONTRACT,
) -> bytes:
    payload = InsecurePlaintextEncoder(shape=(N_PUB, C), bound=BOUND).encode(matrix)
    header = UploadHeader(
        round_id=round_id,
        participant_id=pid,
        mode="plaintext",
        schema=declared if declared is not None else schema(),
        schema_hash=contract.schema_hash(),
        num_samples=num_samples,
        nonce=nonce if nonce is not None else secrets.token_hex(16),
        payload_sm3=sm3_digest(payload).hex(),
    )
    return encode_upload(header, payload)


def honest(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = np.tile(np.array([[4.0, 0.0, -4.0]]), (N_PUB, 1))
    return (base + rng.normal(0, 0.3, size=(N_PUB, C))).astype(np.float32)

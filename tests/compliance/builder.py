"""A small real ledger for compliance tests, written through the project's own classes.

Three rounds ten days apart, two participants (one with a registered SM2 key,
one without), DP-SGD reservations committed through :class:`PrivacyLedger`,
upload evidence in both the ``uploads`` table and ``upload.received``
entries, outlier decisions, key-authority decryptions and one refusal, and
one over-budget request refused by the ledger. Heads are signed every three
entries, so reports cite an older head and prove consistency to the newest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger import AuditLog, BudgetExceeded, MechanismEvent, PrivacyLedger
from privacy_ledger.rounds import RoundStore

ASSET = "records"
PARTICIPANTS = ("hospital-a", "bank-b")
DAY = 86400.0
START = datetime(2026, 1, 10, 9, 0, tzinfo=UTC).timestamp()


@dataclass
class Clock:
    """A settable clock shared by the ledger, the audit log and the round store."""

    now: float = START

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


@dataclass
class Built:
    """What was written, for assertions."""

    url: str
    log_key: SM2PrivateKey
    participant_keys: dict[str, SM2PrivateKey]
    digests: dict[tuple[int, str], str] = field(default_factory=dict)
    scores: dict[tuple[int, str], str] = field(default_factory=dict)


def _event() -> MechanismEvent:
    return MechanismEvent(
        noise_multiplier=1.1,
        sample_rate=0.01,
        steps=300,
        delta=1e-5,
        max_grad_norm=1.0,
        versions={"opacus": "1.6.0", "secure_rng": "false"},
    )


def _append(log: AuditLog, ledger: PrivacyLedger, event: str, subject: str, fields: dict) -> None:
    with Session(ledger.engine) as session:
        log.append(session, event=event, subject=subject, fields=fields)
        log.checkpoint(session)
        session.commit()


def _round(r: int, ledger: PrivacyLedger, log: AuditLog, rounds: RoundStore, built: Built) -> None:
    round_key = f"fed:{r:08d}"
    rounds.save(round_key, stage="open", state={"round": r})
    for p in PARTICIPANTS:
        reservation = ledger.reserve(p, ASSET, _event(), round_id=f"r{r}")
        ledger.commit(reservation.id)
        payload = f"ciphertext of {p} in round {r}".encode() * 40
        digest = sm3_digest(payload).hex()
        built.digests[(r, p)] = digest
        rounds.record_upload(
            round_key, p, digest=digest, size=len(payload), kind="ckks", shape=[120, 10]
        )
        _append(
            log,
            ledger,
            "upload.received",
            f"participant:{p}",
            {
                "round_id": r,
                "participant_id": p,
                "digest": digest,
                "size": len(payload),
                "kind": "ckks",
                "shape": [120, 10],
            },
        )
    for i, p in enumerate(PARTICIPANTS):
        score = f"{3.25 + 10 * i + r}"
        built.scores[(r, p)] = score
        _append(
            log,
            ledger,
            "outlier.decision",
            f"participant:{p}",
            {
                "round_id": r,
                "participant_id": p,
                "score": score,
                "smoothed": score,
                "action": "keep" if i == 0 else "downweight",
                "factor": "1.0" if i == 0 else "0.5",
                "downweight_threshold": "12.5",
                "exclude_threshold": "30.0",
                # the engine records the weight it applied; older writers did not
                **({"weight": "0.25"} if i == 1 else {}),
            },
        )
    for event in ("decryption.requested", "decryption.released"):
        _append(
            log,
            ledger,
            event,
            f"round:{r}",
            {
                "round_id": r,
                "purpose": "aggregate",
                "shape": [120, 10],
                "contributors": 2,
                "participant_ids": list(PARTICIPANTS),
                "central_dp": False,
            },
        )
    rounds.save(round_key, stage="published", state={"round": r})


def build_ledger(url: str, *, rounds: int = 3, every_key: bool = False) -> Built:
    """Write the ledger described in the module docstring at ``url``.

    With ``every_key`` both participants register their SM2 public key.
    """
    clock = Clock()
    log_key = SM2PrivateKey.generate()
    log = AuditLog(
        signer=log_key,
        origin="test.example/audit",
        checkpoint_every=3,
        checkpoint_seconds=1e9,
        clock=clock,
    )
    ledger = PrivacyLedger.from_url(url, audit=log, clock=clock)
    store = RoundStore(ledger.engine, clock=clock)
    built = Built(url=url, log_key=log_key, participant_keys={})
    for i, p in enumerate(PARTICIPANTS):
        key = SM2PrivateKey.generate()
        built.participant_keys[p] = key
        pem = key.public_key.to_pem() if i == 0 or every_key else None
        ledger.register_participant(
            p,
            institution=f"Institution {p}",
            kind="hospital" if i == 0 else "bank",
            public_key_pem=pem,
        )
        ledger.register_asset(p, ASSET)
        ledger.set_budget(p, ASSET, epsilon=Decimal("10"), delta=1e-5)
    for r in range(1, rounds + 1):
        clock.now = START + (r - 1) * 10 * DAY
        _round(r, ledger, log, store, built)
    clock.now = START + rounds * 10 * DAY
    _append(
        log,
        ledger,
        "access.denied",
        "round:99",
        {
            "party": "key_authority",
            "round_id": 99,
            "purpose": "aggregate",
            "reason": "aggregate over 1 < 2 participants",
        },
    )
    try:
        ledger.reserve(
            "bank-b",
            ASSET,
            MechanismEvent(
                noise_multiplier=0.5, sample_rate=0.5, steps=5000, delta=1e-5, max_grad_norm=1.0
            ),
            round_id="r99",
        )
    except BudgetExceeded:
        pass
    with Session(ledger.engine) as session:
        log.checkpoint(session, force=True)
        session.commit()
    ledger.engine.dispose()
    return built

"""Building a service over a seeded ledger for the REST tests (also used by console tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.rest import ApiSettings, create_app
from api.rest.context import AppContext, build_context
from crypto.sm import SM2PrivateKey
from privacy_ledger import MechanismEvent

PARTICIPANTS = ("hospital-1", "hospital-2")
ASSET = "records"
ROUND = "round-1"
ROLES = ("participant", "officer", "admin", "service")


@dataclass
class Service:
    """A seeded service: the app, its context, a client and one token per role."""

    app: FastAPI
    ctx: AppContext
    client: TestClient
    tokens: dict[str, str]
    key_file: Path

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def token(self, role: str, *, participant_id: str | None = None, **kw: object) -> str:
        if role == "participant" and participant_id is None:
            participant_id = PARTICIPANTS[0]
        issued = self.ctx.tokens.create(
            name=f"test-{role}",
            role=role,
            participant_id=participant_id,
            **kw,  # type: ignore[arg-type]
        )
        return issued.secret


def write_key(folder: Path) -> Path:
    key = SM2PrivateKey.generate()
    path = folder / "log-signing-key.pem"
    path.write_bytes(key.to_pem_unencrypted_insecure())
    path.chmod(0o600)
    (folder / "log-public-key.pem").write_bytes(key.public_key.to_pem())
    return path


def settings_for(db_url: str, folder: Path, **extra: object) -> ApiSettings:
    key = folder / "log-signing-key.pem"
    if not key.exists():
        write_key(folder)
    report_key = folder / "report-signing-key.pem"
    receipt_key = folder / "receipt-key.pem"
    for path in (report_key, receipt_key):
        if not path.exists():
            path.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    values: dict[str, object] = {
        "database_url": db_url,
        "api_audit_key_file": key,
        "api_report_key_file": report_key,
        "api_receipt_key_file": receipt_key,
        "api_log_public_key_file": folder / "log-public-key.pem",
        "api_session_secret": "s" * 40,
        "api_audit_origin": "secure-fed-test/api",
    }
    values.update(extra)
    return ApiSettings(**values)  # type: ignore[arg-type]


def seed(ctx: AppContext) -> None:
    """Two participants with one budget each, one committed and one open reservation, a round."""
    ledger = ctx.ledger
    for pid in PARTICIPANTS:
        ledger.register_participant(pid, institution=f"{pid} hospital", kind="hospital")
        ledger.register_asset(pid, ASSET, description="patient records")
        ledger.set_budget(pid, ASSET, epsilon="8", delta=1e-5)
    event = MechanismEvent(
        noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
    )
    decisions = {
        pid: {"participant_id": pid, "score": score, "action": action, "factor": factor}
        for pid, score, action, factor in (
            (PARTICIPANTS[0], 1.5, "keep", 1.0),
            (PARTICIPANTS[1], 9.25, "exclude", 0.0),
        )
    }
    state = {
        "stage": "completed",
        "uploads": {pid: {"participant_id": pid} for pid in PARTICIPANTS},
        "excluded": [PARTICIPANTS[1]],
        "decisions": decisions,
        "weights": {PARTICIPANTS[0]: 1.0, PARTICIPANTS[1]: 0.0},
        "reason": None,
    }
    ctx.rounds.save(ROUND, stage="completed", state=state)
    for pid in PARTICIPANTS:
        held = ledger.reserve(pid, ASSET, event, round_id=ROUND)
        ledger.commit(held.id)
        ledger.reserve(pid, ASSET, event, round_id="round-2")
    with ctx.sessions() as session, session.begin():
        for pid, score in zip(PARTICIPANTS, ("1.5", "9.25"), strict=True):
            ctx.audit.append(
                session,
                event="outlier.decision",
                subject=f"round:{ROUND}",
                fields={"round": ROUND, "participant": pid, "score": score, "action": "keep"},
            )
        ctx.audit.checkpoint(session, force=True)
    ctx.rounds.record_decryption(
        ROUND, requester="aggregator", kind="ckks", what="soft labels", aggregate_size=40
    )


def make_service(db_url: str, folder: Path, **extra: object) -> Service:
    settings = settings_for(db_url, folder, **extra)
    ctx = build_context(settings)
    seed(ctx)
    app = create_app(settings, context=ctx)
    client = TestClient(app, base_url="http://testserver")
    tokens = {}
    for role in ROLES:
        pid = PARTICIPANTS[0] if role == "participant" else None
        tokens[role] = ctx.tokens.create(name=f"test-{role}", role=role, participant_id=pid).secret
    return Service(app=app, ctx=ctx, client=client, tokens=tokens, key_file=folder)


def denials(ctx: AppContext) -> list[dict[str, object]]:
    """The ``access.denied`` entries of the log, oldest first (their ``fields``)."""
    from sqlalchemy import select

    from privacy_ledger.audit import canonical
    from privacy_ledger.audit.models import AuditEntryRow

    with ctx.sessions() as session:
        rows = session.execute(
            select(AuditEntryRow.entry)
            .where(AuditEntryRow.event == "access.denied")
            .order_by(AuditEntryRow.entry_index)
        ).scalars()
        return [dict(canonical.decode(r)["fields"]) for r in rows]

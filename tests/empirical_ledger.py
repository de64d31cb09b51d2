"""A small real SQLite ledger with a signed audit log, two budgets charged over two rounds."""

from __future__ import annotations

from pathlib import Path

from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog, MechanismEvent, PrivacyLedger

ASSET = "private-train"  # the demo's asset id (secure_fed.federation.config.ASSET_ID)
PARTICIPANTS = ("hospital-1", "hospital-2")


def charged_ledger(folder: Path) -> PrivacyLedger:
    """Open a new ledger in ``folder`` (``ledger.db``) with rounds r1, r2 committed for both."""
    log = AuditLog(signer=SM2PrivateKey.generate(), origin="test.secure-fed.example/demo")
    ledger = PrivacyLedger.from_url(f"sqlite:///{folder / 'ledger.db'}", audit=log)
    event = MechanismEvent(
        noise_multiplier=1.1, sample_rate=0.05, steps=40, delta=1e-5, max_grad_norm=1.0
    )
    for pid in PARTICIPANTS:
        ledger.register_participant(pid, institution=f"{pid} hospital", kind="hospital")
        ledger.register_asset(pid, ASSET)
        ledger.set_budget(pid, ASSET, epsilon="8", delta=1e-5)
        for rid in ("r1", "r2"):
            ledger.commit(ledger.reserve(pid, ASSET, event, round_id=rid).id)
    return ledger

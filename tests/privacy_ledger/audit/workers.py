"""Process entry points for the multi-process append test (importable under spawn)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.db import create_ledger_engine


def append_many(url: str, key_pem: bytes, origin: str, worker: int, count: int) -> list[int]:
    """Append ``count`` entries, one transaction each, checkpointing as due; return indexes."""
    log = AuditLog(
        signer=SM2PrivateKey.from_pem(key_pem, passphrase=None), origin=origin, checkpoint_every=8
    )
    engine = create_ledger_engine(url)
    indexes = []
    try:
        for i in range(count):
            with Session(engine) as session:
                indexes.append(
                    log.append(
                        session,
                        event="upload.received",
                        subject=f"worker:{worker}",
                        fields={"i": i},
                    )
                )
                log.checkpoint(session)
                session.commit()
    finally:
        engine.dispose()
    return indexes

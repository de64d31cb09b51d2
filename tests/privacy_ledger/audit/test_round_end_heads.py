"""A federation run leaves no audit entry outside a signed head, and its ledger verifies sealed.

The in-process round engine (plaintext mode, five participants, two rounds) writes
its rounds and uploads through ``LedgerRoundStore`` and its events through
``LedgerAuditSink``, with a log whose batching would otherwise leave the run's entries
unsigned (a head every 10,000 entries or hour). Each round's end signs a head.
"""

from __future__ import annotations

from sqlalchemy import Engine

from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.verify.log import verify_log
from secure_fed.federation.schema import SchemaRegistry
from secure_fed.federation.store import LedgerRoundStore
from secure_fed.secure.audit import LedgerAuditSink
from tests.privacy_ledger.audit.conftest import ORIGIN
from tests.secure_fed.federation.conftest import registry as _registry_fixture
from tests.secure_fed.federation.test_audited_weights import SAMPLES, _run

registry = _registry_fixture


def test_a_run_ends_with_every_entry_under_a_signed_head(
    engine: Engine, signer: SM2PrivateKey, registry: SchemaRegistry
) -> None:
    log = AuditLog(signer=signer, origin=ORIGIN, checkpoint_every=10_000, checkpoint_seconds=3600)
    ledger = PrivacyLedger(engine, audit=log)
    for pid in SAMPLES:
        ledger.register_participant(pid, institution=f"Bank {pid}", kind="bank")
    store = LedgerRoundStore(engine=engine, namespace="heads")
    publications = _run(store, registry, LedgerAuditSink(engine=engine, log=log))
    assert sorted(publications) == [1, 2]
    report = verify_log(engine, public_key=signer.public_key, compare_rows=True)
    assert report.tree_size > len(SAMPLES) and report.heads_checked >= 2
    assert report.unsigned_entries == 0, report
    assert report.sealed and report.rows_checked >= len(SAMPLES) + 2

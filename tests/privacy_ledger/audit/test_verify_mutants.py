"""Audit-log verification at its boundaries: what surviving mutants showed unchecked.

``scripts/mutation audit-verify`` changed these and the audit tests stayed green
(docs/benchmarks.md, "Mutation testing", sixth run). A head accepted earlier that
covers exactly the entries stored today is the normal case of an auditor who
exported the newest head and verifies again before anything was appended: it must
verify, and one entry fewer must not.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from privacy_ledger.audit.checkpoint import Checkpoint, verify_head
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import TreeHeadRow
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.errors import HeadsInconsistent, LogTampered
from tests.privacy_ledger.audit.conftest import ORIGIN, fill

SIZE = 20  # signed heads at 1, 9 and 17 (checkpoint_every=8), 3 entries unsigned


@pytest.fixture
def filled(engine: Engine, log: AuditLog) -> Engine:
    fill(engine, log, SIZE)
    return engine


def test_a_trusted_head_of_the_whole_log_verifies_and_one_entry_less_does_not(
    filled: Engine, log: AuditLog
) -> None:
    report = verify_log(filled, public_key=log.public_key)
    whole = Checkpoint(origin=ORIGIN, tree_size=SIZE, root_hash=report.root_hash)
    again = verify_log(filled, public_key=log.public_key, trusted=whole)
    assert (again.tree_size, again.root_hash) == (SIZE, report.root_hash)
    with filled.begin() as conn:  # the newest entry removed and log_state made to agree
        conn.execute(text("DELETE FROM audit_entries WHERE entry_index = :i"), {"i": SIZE - 1})
        conn.execute(text("UPDATE log_state SET tree_size = :n"), {"n": SIZE - 1})
    with pytest.raises(
        LogTampered,
        match=rf"^\[LEDGER_LOG_TAMPERED\] the log has {SIZE - 1} entries but a head of size "
        rf"{SIZE} was accepted earlier: entries from {SIZE - 1} on were removed$",
    ) as info:
        verify_log(filled, public_key=log.public_key, trusted=whole)
    assert (info.value.entry_index, info.value.tree_size) == (SIZE - 1, SIZE)


def test_an_earlier_trusted_head_verifies_and_another_history_is_named(
    filled: Engine, log: AuditLog
) -> None:
    with Session(filled) as session:
        rows = session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq)).all()
        heads = [verify_head(r.body, r.signature, log.public_key) for r in rows]
    assert [h.tree_size for h in heads] == [1, 9, 17]
    for head in heads:  # each head signed earlier is a prefix of today's log
        assert verify_log(filled, public_key=log.public_key, trusted=head).tree_size == SIZE
    other = Checkpoint(origin=ORIGIN, tree_size=12, root_hash=bytes(32))
    with pytest.raises(
        HeadsInconsistent,
        match=r"^\[LEDGER_HEADS_INCONSISTENT\] the first 12 entries differ from the head "
        r"accepted earlier \(history rewritten and re-signed\)$",
    ) as info:
        verify_log(filled, public_key=log.public_key, trusted=other)
    assert info.value.tree_size == 12

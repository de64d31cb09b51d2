"""AuditLog on SQLite and PostgreSQL: appends, heads, proofs, sealed evidence, refusals."""

from __future__ import annotations

import base64
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from crypto.errors import DecryptionFailed
from crypto.sm import SM4GCM, SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.log import AuditLog, evidence_associated_data
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.audit.models import AuditEntryRow, TreeHeadRow
from privacy_ledger.audit.proofs import verify_consistency, verify_inclusion
from privacy_ledger.audit.verify.log import stored_public_key, verify_log
from privacy_ledger.db import create_ledger_engine
from privacy_ledger.errors import (
    AuditParameterInvalid,
    CanonicalJSONInvalid,
    EvidenceUnavailable,
    EvidenceUnreadable,
    HeadSigningRefused,
    LogKeyMismatch,
    LogNotInitialized,
    ProofRangeInvalid,
    UnknownEventType,
)
from tests.privacy_ledger.audit.conftest import ORIGIN, fill
from tests.privacy_ledger.audit.workers import append_many


def _heads(engine: Engine) -> list[TreeHeadRow]:
    with Session(engine) as session:
        return list(session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq)))


def test_append_is_canonical_contiguous_and_transactional(engine: Engine, log: AuditLog) -> None:
    with Session(engine) as session:
        assert (
            log.append(
                session,
                event="budget.set",
                subject="participant:h1",
                fields={"epsilon_limit": Decimal("4.0"), "delta": "1e-5"},
            )
            == 0
        )
        assert (
            log.append(
                session,
                event="budget.reserved",
                subject="participant:h1",
                fields={"epsilon": Decimal("0.75")},
            )
            == 1
        )
        session.rollback()
    with Session(engine) as session:
        assert log.size(session) == 0
        assert (
            log.append(
                session,
                event="budget.set",
                subject="participant:h1",
                fields={"epsilon_limit": Decimal("4.0")},
            )
            == 0
        )
        session.commit()
        row = session.get(AuditEntryRow, 0)
        assert row is not None
        entry = canonical.decode(row.entry)
        assert entry["fields"] == {"epsilon_limit": "4.0"} and entry["prev"] == "00" * 32
        assert entry["event"] == "budget.set" and entry["index"] == 0 and entry["v"] == 1
        assert row.leaf_hash == SM3_HASHER.hash_leaf(row.entry)
        assert (
            log.append(session, event="budget.committed", subject="participant:h1", fields={}) == 1
        )
        session.commit()
        second = canonical.decode(session.get(AuditEntryRow, 1).entry)  # type: ignore[union-attr]
        assert second["prev"] == row.leaf_hash.hex()


def test_checkpoint_policy_count_time_force(engine: Engine, signer: SM2PrivateKey) -> None:
    now = [1000.0]
    log = AuditLog(
        signer=signer,
        origin=ORIGIN,
        checkpoint_every=3,
        checkpoint_seconds=60,
        clock=lambda: now[0],
    )
    with Session(engine) as session:
        assert log.checkpoint(session) is None  # empty log
        log.append(session, event="round.opened", subject="round:1", fields={})
        first = log.checkpoint(session)  # no head yet: due at once
        assert first is not None and first.tree_size == 1
        log.append(session, event="round.transition", subject="round:1", fields={})
        assert log.checkpoint(session) is None  # 1 unsigned, 0 s
        assert log.checkpoint(session, force=True) is not None
        assert log.checkpoint(session, force=True) is None  # nothing new
        for _ in range(3):
            log.append(session, event="upload.received", subject="round:1", fields={})
        head = log.checkpoint(session)  # 3 unsigned
        assert head is not None and head.tree_size == 5
        log.append(session, event="round.transition", subject="round:1", fields={})
        assert log.checkpoint(session) is None
        now[0] += 61
        head = log.checkpoint(session)
        assert head is not None and head.tree_size == 6
        session.commit()
    assert [h.tree_size for h in _heads(engine)] == [1, 2, 5, 6]
    report = verify_log(engine, public_key=signer.public_key)
    assert (report.tree_size, report.heads_checked, report.unsigned_entries) == (6, 4, 0)


def test_proofs_verify_against_signed_heads(engine: Engine, log: AuditLog) -> None:
    fill(engine, log, 21)
    heads = _heads(engine)
    assert [h.tree_size for h in heads] == [1, 9, 17]
    with Session(engine) as session:
        for head in heads:
            for index in range(head.tree_size):
                proof = log.inclusion_proof(session, index, head.tree_size)
                leaf = log.leaf_hash(session, index)
                verify_inclusion(SM3_HASHER, index, head.tree_size, leaf, proof, head.root_hash)
        with pytest.raises(ProofRangeInvalid, match=r"tree_size: 22 not in \[0, 21\]"):
            log.inclusion_proof(session, 0, 22)
        with pytest.raises(ProofRangeInvalid, match="index: 9 is beyond size 9"):
            log.inclusion_proof(session, 9, 9)
        with pytest.raises(ProofRangeInvalid, match="tree_size: 30"):
            log.consistency_proof(session, 1, 30)
        old, new = heads[0], heads[-1]
        proof = log.consistency_proof(session, old.tree_size, new.tree_size)
        verify_consistency(
            SM3_HASHER, old.tree_size, new.tree_size, proof, old.root_hash, new.root_hash
        )


def test_sensitive_fields_are_sealed_and_bound(
    engine: Engine, log: AuditLog, evidence_key: SM4GCM
) -> None:
    with Session(engine) as session:
        log.append(
            session,
            event="access.denied",
            subject="actor:x",
            fields={"why": "role"},
            sensitive={"address": "10.0.0.7", "score": Decimal("3.25")},
        )
        log.append(
            session,
            event="access.denied",
            subject="actor:y",
            fields={},
            sensitive={"address": "10.0.0.8"},
        )
        session.commit()
        row = session.get(AuditEntryRow, 0)
        assert row is not None and b"10.0.0.7" not in row.entry
        assert log.read_sensitive(session, 0, "address", evidence_key=evidence_key) == "10.0.0.7"
        assert log.read_sensitive(session, 0, "score", evidence_key=evidence_key) == "3.25"
        other = SM4GCM(SM4GCM.generate_key())
        with pytest.raises(EvidenceUnreadable, match="'address' of entry 0 failed SM4-GCM"):
            log.read_sensitive(session, 0, "address", evidence_key=other)
        with pytest.raises(EvidenceUnavailable, match="entry 0 has no sensitive 'nope'"):
            log.read_sensitive(session, 0, "nope", evidence_key=evidence_key)
        with pytest.raises(EvidenceUnavailable, match="entry 9 does not exist"):
            log.read_sensitive(session, 9, "address", evidence_key=evidence_key)
        # the associated data binds index and field: a blob moved elsewhere does not open
        blob = base64.b64decode(canonical.decode(row.entry)["sensitive"]["address"])
        with pytest.raises(DecryptionFailed, match="authentication failed"):
            aad = evidence_associated_data(ORIGIN, 1, "address")
            evidence_key.decrypt(blob, associated_data=aad)
    # verification needs no SM4 key
    assert verify_log(engine, public_key=log.public_key).tree_size == 2


def test_sensitive_needs_an_evidence_key(engine: Engine, signer: SM2PrivateKey) -> None:
    log = AuditLog(signer=signer, origin=ORIGIN)
    refused = pytest.raises(EvidenceUnavailable, match="without an evidence")
    with Session(engine) as session, refused:
        log.append(session, event="access.denied", subject="a", fields={}, sensitive={"ip": "x"})


def test_bad_appends_are_refused_before_locking(engine: Engine, log: AuditLog) -> None:
    with Session(engine) as session:
        with pytest.raises(UnknownEventType, match="allowed: access.denied"):
            log.append(session, event="budget.spent", subject="s", fields={})
        with pytest.raises(CanonicalJSONInvalid, match="float 0.5 not allowed"):
            log.append(session, event="budget.set", subject="s", fields={"epsilon": 0.5})
        with pytest.raises(CanonicalJSONInvalid, match="sensitive: field names"):
            log.append(session, event="budget.set", subject="s", fields={}, sensitive={1: "x"})
        with pytest.raises(CanonicalJSONInvalid, match=r"\$: float 1.5"):
            log.append(session, event="budget.set", subject="s", fields={}, sensitive={"a": 1.5})
        with pytest.raises(AuditParameterInvalid, match="subject"):
            log.append(session, event="budget.set", subject="", fields={})
        assert log.size(session) == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"origin": ""}, "origin"),
        ({"checkpoint_every": 0}, "checkpoint_every: 0"),
        ({"checkpoint_every": True}, "checkpoint_every: must be an int"),
        ({"checkpoint_seconds": 0}, "checkpoint_seconds"),
        ({"checkpoint_seconds": float("nan")}, "checkpoint_seconds"),
        ({"signer": "key"}, "signer"),
        ({"evidence_key": b"k" * 16}, "evidence_key"),
        ({"clock": 3}, "clock"),
    ],
)
def test_constructor_validation(
    signer: SM2PrivateKey, kwargs: dict[str, object], fragment: str
) -> None:
    args: dict[str, object] = {"signer": signer, "origin": ORIGIN, **kwargs}
    with pytest.raises(AuditParameterInvalid, match=fragment):
        AuditLog(**args)  # type: ignore[arg-type]


def test_log_is_bound_to_its_origin_and_key(
    engine: Engine, log: AuditLog, signer: SM2PrivateKey
) -> None:
    fill(engine, log, 2)
    intruder = AuditLog(signer=SM2PrivateKey.generate(), origin=ORIGIN)
    other_origin = AuditLog(signer=signer, origin="elsewhere.example/log")
    with Session(engine) as session:
        with pytest.raises(LogKeyMismatch, match="signed by key"):
            intruder.append(session, event="round.opened", subject="r", fields={})
        session.rollback()
        with pytest.raises(LogKeyMismatch, match="'elsewhere.example/log'"):
            other_origin.append(session, event="round.opened", subject="r", fields={})
    with pytest.raises(LogKeyMismatch, match="is not the log's key"):
        verify_log(engine, public_key=SM2PrivateKey.generate().public_key)


def test_never_signs_a_head_inconsistent_with_the_last(
    engine: Engine, log: AuditLog, signer: SM2PrivateKey
) -> None:
    fill(engine, log, 10)  # heads at 1 and 9
    # rewrite entry 3 and re-chain everything after it, as a DB-level attacker could
    with engine.begin() as conn:
        rows = conn.execute(text("SELECT entry_index, entry FROM audit_entries ORDER BY 1")).all()
        prev = rows[2][1] and SM3_HASHER.hash_leaf(rows[2][1])
        for index, data in rows[3:]:
            entry = canonical.decode(data)
            if index == 3:
                entry["fields"] = {"n": 3, "epsilon": "0.0"}
            entry["prev"] = prev.hex()
            new = canonical.encode(entry)
            prev = SM3_HASHER.hash_leaf(new)
            conn.execute(
                text("UPDATE audit_entries SET entry = :e, leaf_hash = :h WHERE entry_index = :i"),
                {"e": new, "h": prev, "i": index},
            )
        conn.execute(text("UPDATE log_state SET last_leaf_hash = :h"), {"h": prev})
    fresh = AuditLog(signer=signer, origin=ORIGIN, checkpoint_every=1)
    with Session(engine) as session:
        fresh.append(session, event="round.opened", subject="r", fields={})
        with pytest.raises(HeadSigningRefused, match="do not extend the signed head of size 9"):
            fresh.checkpoint(session)
    # an attacker who also drops the heads cannot fool the process that signed them
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM tree_heads"))
        conn.execute(text("UPDATE log_state SET head_count = 0, last_head_size = 0"))
    with Session(engine) as session:
        log.append(session, event="round.opened", subject="r", fields={})
        with pytest.raises(HeadSigningRefused, match="signed head of size 9"):
            log.checkpoint(session, force=True)


def test_refuses_when_the_newest_head_is_forged(engine: Engine, log: AuditLog) -> None:
    fill(engine, log, 3)
    with engine.begin() as conn:
        conn.execute(text("UPDATE tree_heads SET signature = :s WHERE seq = 1"), {"s": b"\x30\x00"})
    with Session(engine) as session:
        log.append(session, event="round.opened", subject="r", fields={})
        with pytest.raises(HeadSigningRefused, match="newest stored head is invalid"):
            log.checkpoint(session, force=True)


def test_concurrent_appends_are_contiguous(engine: Engine, log: AuditLog) -> None:
    errors: list[BaseException] = []
    indexes: list[int] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        try:
            for i in range(15):
                with Session(engine) as session:
                    index = log.append(
                        session, event="upload.received", subject=f"w{w}", fields={"i": i}
                    )
                    log.checkpoint(session)
                    session.commit()
                with lock:
                    indexes.append(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(indexes) == list(range(90))
    report = verify_log(engine, public_key=log.public_key)
    assert report.tree_size == 90 and report.heads_checked >= 1


def test_missing_tables_are_reported(tmp_path: object, log: AuditLog) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path}/empty.db")
    with Session(engine) as session, pytest.raises(LogNotInitialized, match="run"):
        log.append(session, event="round.opened", subject="r", fields={})
    with pytest.raises(LogNotInitialized, match="migrations"):
        verify_log(engine, public_key=log.public_key)


def test_empty_log_and_session_bind(engine: Engine, log: AuditLog) -> None:
    assert stored_public_key(engine) is None
    report = verify_log(engine, public_key=log.public_key)
    assert (report.origin, report.tree_size, report.heads_checked) == (None, 0, 0)
    assert report.root_hash == SM3_HASHER.empty_root()
    fill(engine, log, 3)
    assert stored_public_key(engine) == log.public_key
    with Session(engine) as session:
        report = verify_log(session, public_key=log.public_key)
    assert (report.origin, report.tree_size, report.latest_head_size) == (ORIGIN, 3, 1)
    with pytest.raises(AuditParameterInvalid, match="chunk_size: 0"):
        verify_log(engine, public_key=log.public_key, chunk_size=0)
    with pytest.raises(AuditParameterInvalid, match="public_key"):
        verify_log(engine, public_key="pem")  # type: ignore[arg-type]


def test_savepoint_rollback_keeps_indexes_contiguous(engine: Engine, log: AuditLog) -> None:
    with Session(engine) as session:
        assert log.append(session, event="round.opened", subject="r", fields={}) == 0
        nested = session.begin_nested()
        assert log.append(session, event="round.transition", subject="r", fields={"x": 1}) == 1
        nested.rollback()
        assert log.append(session, event="round.transition", subject="r", fields={"x": 2}) == 1
        assert log.checkpoint(session, force=True) is not None
        session.commit()
    report = verify_log(engine, public_key=log.public_key)
    assert (report.tree_size, report.latest_head_size) == (2, 2)


def test_rolled_back_head_is_not_remembered(engine: Engine, log: AuditLog) -> None:
    fill(engine, log, 11)  # committed: heads at 1 and 9
    with Session(engine) as session:
        for i in range(13):
            log.append(session, event="round.opened", subject="r", fields={"i": i})
        assert log.checkpoint(session, force=True) is not None  # size 24, cached
        session.rollback()  # entries and head vanish together
    with Session(engine) as session:
        log.append(session, event="round.opened", subject="other", fields={})
        head = log.checkpoint(session, force=True)  # would be refused if the head were kept
        assert head is not None and head.tree_size == 12
        session.commit()
    report = verify_log(engine, public_key=log.public_key)
    assert (report.tree_size, report.heads_checked) == (12, 3)


@pytest.mark.slow
def test_concurrent_processes_append_contiguously(
    engine: Engine, audit_url: str, signer: SM2PrivateKey
) -> None:
    pem = signer.to_pem_unencrypted_insecure()
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(append_many, audit_url, pem, ORIGIN, w, 12) for w in range(4)]
        indexes = sorted(i for f in futures for i in f.result())
    assert indexes == list(range(48))
    report = verify_log(engine, public_key=signer.public_key)
    assert report.tree_size == 48 and report.heads_checked >= 2

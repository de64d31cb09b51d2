"""``secure-fed ledger verify --recompute`` on real CKKS rounds in a real SQLite ledger.

A round runs through the engine with the ckks aggregator, the ledger's round
store, its signed audit log and a labeled slice (every round opens one evidence
scalar per participant). In the forged round the aggregator (which holds its own
signing key) swaps one final score's or one evidence's ciphertext for a one-hot
cell of that participant's upload, under the honest claim, and signs it: the key
authority cannot see the difference and decrypts it. The command recomputes
every request from the stored uploads and names the forged one.

The deployment has no verifier (no envelope keys: the key authority is built without
one, as a deployment may be); with one the forgery is refused before it is decrypted
(``tests/secure_fed/secure/adversarial/test_verified_release.py``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from crypto.ckks import EncryptedMatrix, Layout, PublicContext, load_encrypted, weighted_sum
from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.budget.participants import ParticipantRegistry
from privacy_ledger.db import create_ledger_engine, upgrade
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.messages import UploadHeader, encode_upload
from secure_fed.federation.schema import SchemaRegistry
from secure_fed.federation.store import LedgerRoundStore
from secure_fed.secure.audit import LedgerAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.ckks import CkksDeployment
from secure_fed.secure.modes.ckks import CkksAggregator
from secure_fed.secure.modes.ckks_upload import epoch_part
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.publication_check import witness_field
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.wire import KEY_AUTHORITY_REQUEST, decode_frame
from tests.secure_fed.federation.helpers import (
    BOUND,
    CONTRACT,
    N_PUB,
    C,
    Clock,
    honest,
    make_config,
)
from tests.secure_fed.federation.helpers import schema as model_schema

IDS = ["a", "b", "c", "d"]
#: The labeled slice: every public row (the gatekeepers' minimum is min(N, 64) rows).
SLICE = EvidenceSlice(rows=tuple(range(N_PUB)), labels=tuple(r % C for r in range(N_PUB)))
runner = CliRunner()


def _one_hot(
    payload: bytes, dep: CkksDeployment, cell: tuple[int, int], *, rows: int = N_PUB
) -> bytes:
    """The attack ciphertext: one cell of an upload, slot-summed, at an honest score's level
    (laid out as a value over ``rows`` rows: an evidence's slice or a score's samples)."""
    part = epoch_part(payload, dep.public_context)  # the scoring epoch's ciphertexts
    up = load_encrypted(dep.public_context, part, kind="upload", n_samples=N_PUB, n_classes=C)
    row, cls = cell
    mask = [0.0] * up.layout.run(0)[1]
    mask[row] = 1.0
    vector = ((up.vectors[up.layout.index(cls, 0)] * mask) * 1.0).sum()
    forged = EncryptedMatrix(
        kind="score",
        preset=up.preset,
        fingerprint=up.fingerprint,
        layout=Layout(n_samples=rows, n_classes=C, slots=up.layout.slots),
        vectors=[vector],
    )
    return forged.to_bytes()


def _skewed_publication(
    dep: CkksDeployment, payloads: dict[str, bytes], ids: list[str], *, witness: bool = False
) -> bytes:
    """The publication epoch's sum weighted 0.97 on the first id (the claim says otherwise).

    ``witness``: the same skewed sum under the scoring epoch (an aggregator forging both, so
    the key authority's comparison passes and only the recomputation names it).
    """
    pub = dep.public_context if witness else dep.publication_context
    assert pub is not None
    ups = [
        load_encrypted(
            pub, epoch_part(payloads[p], pub), kind="upload", n_samples=N_PUB, n_classes=C
        )
        for p in ids
    ]
    rest = 0.03 / (len(ids) - 1)
    return weighted_sum(ups, [0.97] + [rest] * (len(ids) - 1)).to_bytes()


def _forging(
    dep: CkksDeployment, payloads: dict[str, bytes], *, target: str = "score"
) -> Callable[[bytes], bytes]:
    """An aggregator channel that swaps b's final score for a one-hot cell (or skews the
    publication towards one upload), re-signed under the honest claim."""
    keys = dep.server_keys()

    def channel(request: bytes) -> bytes:
        header, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        claim = header["claim"]
        assert isinstance(claim, dict)
        if target == "publication" and header["purpose"] == "aggregate":
            ids = [u[0] for u in claim["uploads"]]
            publication = _skewed_publication(dep, payloads, ids)
            witness = _skewed_publication(dep, payloads, ids, witness=True)
            forged = decryption_request(
                round_id=int(str(header["round_id"])),
                purpose="aggregate",
                participant_ids=ids,
                shape=(N_PUB, C),
                ciphertext=publication + witness,
                signer=keys.signer,
                claim=claim,
                epoch=header["epoch"],
                witness=witness_field(publication, witness),
            )
            return dep.authority.handle(forged)
        step = "final" if target == "score" else target
        if claim.get("step") != step or claim["uploads"][0][0] != "b":
            return dep.authority.handle(request)
        forged = decryption_request(
            round_id=int(str(header["round_id"])),
            purpose="score",
            participant_ids=["b"],
            shape=(N_PUB, C),
            ciphertext=_one_hot(payloads["b"], dep, (5, 0)),
            signer=keys.signer,
            claim=claim,
        )
        return dep.authority.handle(forged)

    return channel


def _upload(dep: SecureDeployment, pid: str, seed: int) -> tuple[bytes, bytes]:
    payload = dep.encoder(pid, bound=BOUND).encode(honest(seed))
    header = UploadHeader(
        round_id=1,
        participant_id=pid,
        mode="ckks",
        schema=model_schema(),
        schema_hash=CONTRACT.schema_hash(),
        num_samples=100,
        nonce=secrets.token_hex(16),
        payload_sm3=sm3_digest(payload).hex(),
    )
    return payload, encode_upload(header, payload)


def _round(tmp_path: Path, *, forge: bool | str) -> tuple[str, Path, Path]:
    """Run one CKKS round on a fresh ledger; return its URL, log key and public context files."""
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    db = create_ledger_engine(url)
    upgrade(db)
    registry = ParticipantRegistry(db)
    for pid in IDS:
        registry.register_participant(pid, institution=f"Bank {pid}", kind="bank")
    key = SM2PrivateKey.generate()
    audit = LedgerAuditSink(engine=db, log=AuditLog(signer=key, origin="test.example/recompute"))
    dep = SecureDeployment.create(
        mode="ckks", shape=(N_PUB, C), participant_ids=IDS, min_participants=3, audit=audit
    )
    assert isinstance(dep, CkksDeployment)
    uploads = {p: _upload(dep, p, i) for i, p in enumerate(IDS)}
    keys = dep.server_keys()
    if forge:
        target = forge if isinstance(forge, str) else "score"
        forging = _forging(dep, {p: u[0] for p, u in uploads.items()}, target=target)
        keys = replace(keys, authority=forging)
    aggregator = CkksAggregator(
        shape=(N_PUB, C), bound=BOUND, keys=keys, scoring=dep.plan.scoring, min_participants=3
    )
    schemas = SchemaRegistry()
    schemas.register(model_schema())
    engine = RoundEngine(
        store=LedgerRoundStore(engine=db, namespace="fed"),
        aggregator=aggregator,
        mode="ckks",
        registry=schemas,
        audit=audit,
        clock=Clock(),
        evidence=SLICE,
    )
    engine.open(replace(make_config(min_participants=3, max_weight=1 / 3), mode="ckks"))
    engine.start_collecting(1)
    for _, message in uploads.values():
        engine.submit(message, round_id=1)
    engine.close(1)
    engine.filter(1)
    engine.publish(1)
    db.dispose()
    (tmp_path / "pub.pem").write_bytes(key.public_key.to_pem())
    (tmp_path / "context.bin").write_bytes(dep.authority.public_context)
    (tmp_path / "publication.bin").write_bytes(dep.authority.publication_context)
    return url, tmp_path / "pub.pem", tmp_path / "context.bin"


def _verify(url: str, pem: Path, context: Path, *extra: str) -> tuple[int, str]:
    args = ["ledger", "verify", "--db", url, "--public-key", str(pem), "--recompute"]
    result = runner.invoke(app, [*args, "--public-context", str(context), *extra])
    return result.exit_code, result.output


@pytest.mark.slow
def test_a_forged_score_in_a_real_round_is_named(tmp_path: Path) -> None:
    url, pem, context = _round(tmp_path, forge=True)
    code, output = _verify(url, pem, context)
    assert code == 1, output
    lines = [line for line in output.splitlines() if line.startswith("MISMATCH")]
    assert len(lines) == 1 and "round 1, purpose score, request " in lines[0]
    assert "not the one its claim recomputes to" in lines[0]
    assert "[CLI_RECOMPUTE_MISMATCH] 1 of " in output


@pytest.mark.slow
def test_a_forged_evidence_in_a_real_round_is_named(tmp_path: Path) -> None:
    """The evidence under the plan's claim, computed from one cell instead of the slice."""
    url, pem, context = _round(tmp_path, forge="evidence")
    code, output = _verify(url, pem, context)
    assert code == 1, output
    lines = [line for line in output.splitlines() if line.startswith("MISMATCH")]
    assert len(lines) == 1 and "round 1, purpose score, request " in lines[0]
    assert "not the one its claim recomputes to" in lines[0]
    # ranking, final and evidence per participant, and the moments: all recomputed
    pairs = len(IDS) * (len(IDS) - 1) // 2  # the copies step: one distance per pair
    assert f"[CLI_RECOMPUTE_MISMATCH] 1 of {3 * len(IDS) + 1 + pairs} " in output


@pytest.mark.slow
def test_an_honest_round_recomputes_and_a_foreign_context_is_refused(tmp_path: Path) -> None:
    url, pem, context = _round(tmp_path, forge=False)
    code, output = _verify(url, pem, context)
    assert code == 0, output
    assert "all match" in output and "MISMATCH" not in output
    other = tmp_path / "other.bin"
    other.write_bytes(context.read_bytes() + b"\0")
    code, output = _verify(url, pem, other)
    assert code == 2 and "CLI_PUBLIC_CONTEXT_MISMATCH" in output
    bare = ["ledger", "verify", "--db", url, "--public-key", str(pem), "--recompute"]
    result = runner.invoke(app, bare)
    assert result.exit_code == 2 and "--recompute needs --public-context" in result.output


@pytest.mark.slow
def test_a_forged_publication_is_named_under_the_publication_epoch(tmp_path: Path) -> None:
    url, pem, context = _round(tmp_path, forge="publication")
    code, output = _verify(url, pem, context)  # the scoring epoch's requests are honest
    assert code == 0 and "all match" in output, output
    code, output = _verify(url, pem, tmp_path / "publication.bin")
    assert code == 1, output
    lines = [line for line in output.splitlines() if line.startswith("MISMATCH")]
    assert len(lines) == 1 and "round 1, purpose aggregate, request " in lines[0]
    assert "[CLI_RECOMPUTE_MISMATCH] 1 of 1 " in output


def _alter_upload(url: str) -> str:
    """Flip one byte of one stored upload payload (round state, not in the audit log)."""
    import base64
    import json

    from sqlalchemy import text

    db = create_ledger_engine(url)
    with db.begin() as conn:
        row = conn.execute(text("SELECT id, state FROM rounds ORDER BY id")).first()
        assert row is not None
        rid, raw = row
        state = json.loads(raw) if isinstance(raw, str) else dict(raw)
        pid = sorted(state["uploads"])[0]
        payload = bytearray(base64.b64decode(state["uploads"][pid]["payload"]))
        payload[len(payload) // 2] ^= 0x01
        state["uploads"][pid]["payload"] = base64.b64encode(bytes(payload)).decode("ascii")
        conn.execute(
            text("UPDATE rounds SET state = :s WHERE id = :i"), {"s": json.dumps(state), "i": rid}
        )
    db.dispose()
    return pid


def _alter_decryption(url: str) -> int:
    """Change the ciphertext digest of the first ``decryption.requested`` entry in place."""
    from sqlalchemy import text

    from privacy_ledger.audit import canonical

    db = create_ledger_engine(url)
    with db.begin() as conn:
        row = conn.execute(
            text(
                "SELECT entry_index, entry FROM audit_entries WHERE event = "
                "'decryption.requested' ORDER BY entry_index"
            )
        ).first()
        assert row is not None
        index, data = row
        entry = canonical.decode(bytes(data))
        entry["fields"]["ciphertext_sm3"] = "0" * 64
        conn.execute(
            text("UPDATE audit_entries SET entry = :e WHERE entry_index = :i"),
            {"e": canonical.encode(entry), "i": index},
        )
    db.dispose()
    return int(index)


@pytest.mark.slow  # one CKKS round of the demo with three participants
def test_a_demo_run_folder_recomputes_and_an_altered_upload_or_decryption_is_named(
    tmp_path: Path,
) -> None:
    """``secure-fed demo`` leaves its public contexts; both epochs recompute from the folder."""
    import json
    import shutil

    out = tmp_path / "demo"
    args = ["demo", "--rounds", "1", "--participants", "3", "--out", str(out), "--json"]
    result = runner.invoke(app, args, env={"SECURE_FED_KEY_PASSPHRASE": "demo log passphrase"})
    assert result.exit_code == 0, result.output
    ledger = json.loads((out / "results.json").read_text())["ledger"]
    assert set(ledger["public_contexts"]) == {"scoring", "publication"}
    url, pem = f"sqlite:///{(out / 'ledger.db').as_posix()}", out / "log-public-key.pem"
    presets = {"scoring.context": "CKKS_SCORING", "publication.context": "CKKS_PUBLICATION"}
    for name, preset in presets.items():
        data = (out / name).read_bytes()  # public only: a context with a secret key is refused
        PublicContext.from_bytes(data, preset=preset, expected_fingerprint=sm3_digest(data))
        code, output = _verify(url, pem, out / name)
        assert code == 0 and "all match" in output and "MISMATCH" not in output, output
        assert any(c.endswith(str(out / name)) for c in ledger["recompute_commands"])
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    curl = f"sqlite:///{(copy / 'ledger.db').as_posix()}"
    pid = _alter_upload(url)
    code, output = _verify(url, pem, out / "scoring.context")
    assert code == 1, output
    assert "MISMATCH: round 1, purpose " in output and "[CLI_RECOMPUTE_MISMATCH]" in output, pid
    # the ledger seal names the altered row itself, recompute or not
    assert 'LEDGER_ROW_ALTERED] table rounds, row ["demo:00000001"], column state' in output
    index = _alter_decryption(curl)
    code, output = _verify(curl, copy / "log-public-key.pem", copy / "scoring.context")
    assert code == 1, output
    assert f"first bad entry: {index}" in output and "TAMPERED" in output

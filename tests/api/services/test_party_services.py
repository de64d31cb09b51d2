"""The key authority and helper as real processes over HTTPS with mutual TLS, on loopback."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from crypto.ckks import PublicContext
from secure_fed.deploy.ceremony import read_sm2
from secure_fed.deploy.errors import PartyReplyInvalid, PartyUnavailable
from secure_fed.deploy.keys import load_aggregator, read_manifest
from secure_fed.deploy.tls import ClientTLS, create_local_ca
from secure_fed.deploy.transport import (
    AUTHORITY_PATHS,
    HELPER_PATH,
    RemoteDealer,
    RemoteParty,
    remote_authority,
    remote_helper,
    remote_verifier,
)
from secure_fed.errors import (
    AuthorityRequestMalformed,
    PlanOutsidePolicy,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
)
from secure_fed.secure.parties.key_authority import deal_request
from secure_fed.secure.server_auth import ServerSigningKey
from tests.api.services.conftest import Service, free_port
from tests.secure_fed.deploy.loaded import copies_counts, run_round
from tests.secure_fed.secure.helpers import plan


def _aggregator_tls(keys: Path) -> ClientTLS:
    from secure_fed.deploy.tls import LocalCA

    return LocalCA(keys / "tls").client("aggregator")


def _signer(keys: Path) -> ServerSigningKey:
    return ServerSigningKey(name="aggregator", key=read_sm2(keys / "aggregator", "aggregator"))


@pytest.mark.slow
def test_a_ckks_round_runs_against_the_key_authority_service(
    ckks_keys: Path, ckks_authority: Service, ckks_verifier: Service, tmp_path: Path
) -> None:
    tls = _aggregator_tls(ckks_keys)
    channels = remote_authority(ckks_authority.url, tls=tls)
    verifier = remote_verifier(ckks_verifier.url, tls=tls)  # every request attested first
    agg = load_aggregator(ckks_keys / "aggregator", authority=channels, verifier=verifier)
    run_round(agg, ckks_keys, tmp_path)


def test_participants_fetch_the_public_contexts_and_check_them_by_fingerprint(
    ckks_keys: Path, ckks_authority: Service
) -> None:
    manifest = read_manifest(ckks_keys / "participants" / "h1")
    with ckks_authority.client() as client:
        data = client.get(f"{ckks_authority.url}/v1/contexts/scoring").content
        missing = client.get(f"{ckks_authority.url}/v1/contexts/secret")
    context = PublicContext.from_bytes(
        data,
        preset="CKKS_SCORING",
        expected_fingerprint=bytes.fromhex(manifest.fingerprints["scoring"]),
    )
    assert context.fingerprint.hex() == manifest.fingerprints["scoring"]
    assert missing.status_code == 404 and missing.json()["code"] == "API_NOT_FOUND"


def test_a_shares_round_runs_against_the_key_authority_and_helper_services(
    shares_keys: Path, shares_services: tuple[Service, Service], tmp_path: Path
) -> None:
    authority, helper = shares_services
    tls = _aggregator_tls(shares_keys)
    agg = load_aggregator(
        shares_keys / "aggregator",
        authority=remote_authority(authority.url, tls=tls),
        helper=remote_helper(helper.url, tls=tls),
    )
    # h2 uploads h1's matrix: the copies step (comparison material dealt by the key
    # authority service, compared with the helper service) counts the pair, nobody else
    audit = run_round(agg, shares_keys, tmp_path, copy=("h2", "h1"))
    counts = copies_counts(audit)
    assert counts["h1"] == counts["h2"] == 1, counts
    assert counts["b1"] in (0, None), counts  # None: excluded as the outlier before the step


def test_a_client_without_the_client_certificate_is_refused_at_tls(
    ckks_keys: Path, ckks_authority: Service
) -> None:
    trusting = ClientTLS(ca=ckks_keys / "tls" / "ca.pem")
    with pytest.raises(PartyUnavailable, match="unreachable"):
        RemoteParty(ckks_authority.url, AUTHORITY_PATHS["decrypt"], tls=trusting)(b"x")
    # the handshake itself fails: nothing reaches the application
    context = trusting.ssl_context()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        import socket

        with socket.create_connection(("127.0.0.1", ckks_authority.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                if not tls.recv(1024):
                    raise ConnectionError("closed without an answer")


def test_a_client_certificate_of_another_ca_and_a_server_of_another_ca_are_refused(
    ckks_keys: Path, ckks_authority: Service, tmp_path: Path
) -> None:
    other = create_local_ca(tmp_path / "other-ca")
    mixed = ClientTLS(
        ca=ckks_keys / "tls" / "ca.pem",
        cert=other.cert("aggregator"),
        key=other.key("aggregator"),
    )
    with pytest.raises(PartyUnavailable):
        RemoteParty(ckks_authority.url, AUTHORITY_PATHS["decrypt"], tls=mixed)(b"x")
    with pytest.raises(PartyUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        RemoteParty(ckks_authority.url, "/healthz", tls=other.client("aggregator"))(b"x")


def test_a_server_certificate_is_not_accepted_as_the_aggregator_s_client_certificate(
    ckks_keys: Path, ckks_authority: Service
) -> None:
    tls_dir = ckks_keys / "tls"
    as_client = ClientTLS(ca=tls_dir / "ca.pem", cert=tls_dir / "api.pem", key=tls_dir / "api.key")
    with pytest.raises(PartyUnavailable):
        RemoteParty(ckks_authority.url, AUTHORITY_PATHS["decrypt"], tls=as_client)(b"x")


def test_a_refusal_comes_back_as_the_same_typed_error(
    ckks_keys: Path, ckks_authority: Service
) -> None:
    decrypt = RemoteParty(
        ckks_authority.url, AUTHORITY_PATHS["decrypt"], tls=_aggregator_tls(ckks_keys)
    )
    with pytest.raises(AuthorityRequestMalformed):
        decrypt(b"junk that is no frame")
    forged = ServerSigningKey.generate("aggregator")
    plans = RemoteParty(ckks_authority.url, AUTHORITY_PATHS["plan"], tls=_aggregator_tls(ckks_keys))
    from secure_fed.secure.parties.key_authority import plan_request

    with pytest.raises(ServerRequestUnauthenticated, match="SM2 signature is wrong"):
        plans(plan_request(plan(7, (64, 4), min_participants=2), signer=forged))


def test_bad_bodies_are_typed_problems(
    shares_keys: Path, shares_services: tuple[Service, Service]
) -> None:
    _, helper = shares_services
    with helper.client() as client:
        wrong_type = client.post(
            f"{helper.url}{HELPER_PATH}",
            content=b"{}",
            headers={"content-type": "application/json"},
        )
        too_large = client.post(
            f"{helper.url}{HELPER_PATH}",
            content=bytes(70_000),
            headers={"content-type": "application/octet-stream"},
        )
        junk = client.post(
            f"{helper.url}{HELPER_PATH}",
            content=b"SFHQ",
            headers={"content-type": "application/octet-stream"},
        )
    assert wrong_type.status_code == 415
    assert wrong_type.headers["content-type"] == "application/problem+json"
    assert wrong_type.json()["code"] == "API_REQUEST_INVALID"
    assert too_large.status_code == 413 and too_large.json()["code"] == "API_BODY_TOO_LARGE"
    assert junk.status_code == 400 and junk.json()["code"] == "AUTHORITY_REQUEST_MALFORMED"
    channel = remote_helper(helper.url, tls=_aggregator_tls(shares_keys))
    with pytest.raises(PartyReplyInvalid, match="API_BODY_TOO_LARGE"):
        channel(bytes(70_000))


def test_a_service_that_is_down_is_party_unavailable_and_the_round_aborts(
    shares_keys: Path, tmp_path: Path
) -> None:
    tls = _aggregator_tls(shares_keys)
    port = free_port()
    down = f"https://127.0.0.1:{port}"
    with pytest.raises(PartyUnavailable, match="unreachable"):
        RemoteDealer(down, AUTHORITY_PATHS["deal"], tls=tls)(b"x")
    agg = load_aggregator(
        shares_keys / "aggregator",
        authority=remote_authority(down, tls=tls, timeout=5.0),
        helper=remote_helper(down, tls=tls, timeout=5.0),
    )
    with pytest.raises(PartyUnavailable):
        agg.aggregator(bound=8.0).begin_round(plan(1, (64, 4), min_participants=2))


@pytest.mark.slow
def test_a_request_replayed_after_a_restart_is_refused(shares_keys: Path, tmp_path: Path) -> None:
    service = Service("keyauthority", shares_keys / "keyauthority", tmp_path / "state").start()
    try:
        deal = RemoteDealer(service.url, AUTHORITY_PATHS["deal"], tls=_aggregator_tls(shares_keys))
        captured = deal_request(round_id=5, tensor="t", count=8, signer=_signer(shares_keys))
        first, second = deal(captured)
        assert first and second
        deal.close()
        service.stop()
        service.start()
        deal = RemoteDealer(service.url, AUTHORITY_PATHS["deal"], tls=_aggregator_tls(shares_keys))
        with pytest.raises(ServerRequestReplayed, match="nonce already used in round 5"):
            deal(captured)
        fresh = deal_request(round_id=5, tensor="t2", count=8, signer=_signer(shares_keys))
        assert deal(fresh)[0]
    finally:
        service.stop()
    assert _audited(tmp_path / "state" / "audit.db", "SERVER_REQUEST_REPLAYED")
    assert _audited(tmp_path / "state" / "audit.db", '"tls":"mutual"')


def test_a_service_stopped_cleanly_leaves_every_entry_under_a_signed_head(
    shares_keys: Path, tmp_path: Path
) -> None:
    """Heads are signed in batches; the last events of a run are signed when it stops."""
    import sqlite3

    service = Service("keyauthority", shares_keys / "keyauthority", tmp_path / "state").start()
    try:
        deal = RemoteDealer(service.url, AUTHORITY_PATHS["deal"], tls=_aggregator_tls(shares_keys))
        captured = deal_request(round_id=3, tensor="t", count=8, signer=_signer(shares_keys))
        deal(captured)
        with pytest.raises(ServerRequestReplayed):
            deal(captured)  # audited right after the first entries: no head is due yet
        deal.close()
        database = tmp_path / "state" / "audit.db"
        with sqlite3.connect(database) as db:
            size, signed = db.execute("SELECT tree_size, last_head_size FROM log_state").fetchone()
        assert signed < size  # the refusal sits outside every signed head while serving
    finally:
        service.stop()
    with sqlite3.connect(database) as db:
        size, signed = db.execute("SELECT tree_size, last_head_size FROM log_state").fetchone()
    assert signed == size


def _audited(database: Path, code: str) -> bool:
    import sqlite3

    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT * FROM audit_entries").fetchall()
    return any(code in str(row) for row in rows)


def test_serving_needs_tls_files_or_an_explicit_insecure_flag(
    tmp_path: Path, ckks_keys: Path
) -> None:
    from typer.testing import CliRunner

    from api.cli import app

    result = CliRunner().invoke(
        app,
        [
            "keyauthority",
            "serve",
            "--keys",
            str(ckks_keys / "keyauthority"),
            "--state",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2
    assert "CLI_OPTION_INVALID" in result.output and "--insecure-dev" in result.output
    exposed = CliRunner().invoke(
        app,
        [
            "keyauthority",
            "serve",
            "--keys",
            str(ckks_keys / "keyauthority"),
            "--state",
            str(tmp_path / "exposed"),
            "--insecure-dev",
            "--host",
            "0.0.0.0",
        ],
    )
    assert exposed.exit_code == 2 and "loopback only" in exposed.output
    assert not (tmp_path / "exposed").exists()  # refused before any state or audit entry


@pytest.mark.slow
def test_an_insecure_dev_service_serves_plain_http(shares_keys: Path, tmp_path: Path) -> None:
    service = Service("helper", shares_keys / "helper", tmp_path / "dev", tls=False).start()
    try:
        assert httpx.get(f"{service.url}/healthz").json()["party"] == "helper"
        with pytest.raises(AuthorityRequestMalformed):
            remote_helper(service.url, tls=None)(b"junk")
    finally:
        service.stop()
    assert _audited(tmp_path / "dev" / "audit.db", '"tls":"insecure-dev"')


@pytest.mark.slow
def test_a_key_authority_killed_mid_round_resumes_and_never_publishes_twice(
    ckks_keys: Path, tmp_path: Path
) -> None:
    """SIGKILL the real key authority after the round's scores, restart it on its state:
    the round publishes once; the same plan is resumed, another plan for the round is
    refused, and after a second kill a second publication of the round is refused."""
    from dataclasses import replace

    from secure_fed.deploy.keys import load_participant
    from secure_fed.deploy.verifier_party import load_verifier
    from secure_fed.errors import DecryptionRefused, SecureFedError
    from tests.secure_fed.deploy.loaded import LoadedDeployment
    from tests.secure_fed.secure.helpers import BOUND, Harness, population

    service = Service("keyauthority", ckks_keys / "keyauthority", tmp_path / "state").start()
    try:
        tls = _aggregator_tls(ckks_keys)
        # the ceremony's verifier, in process here: the key authority pins it
        verifier = load_verifier(ckks_keys / "verifier", audit=None).channels()
        agg = load_aggregator(
            ckks_keys / "aggregator",
            authority=remote_authority(service.url, tls=tls),
            verifier=verifier,
        )
        ids = agg.participant_ids
        parts = {p: load_participant(ckks_keys / "participants" / p) for p in ids}
        h = Harness(LoadedDeployment(agg, parts), tmp_path, ids=ids, min_participants=2, audit=None)
        h.keys = {p: parts[p].signing_key for p in ids}  # the verifier checks these keys
        h.verifier.keys = {p: k.public_key for p, k in h.keys.items()}
        h.verifier.forward = h.engine.aggregator.forward_upload
        preds = dict(zip(ids, population(len(ids), *agg.shape, seed=9).values(), strict=True))
        h.engine.open(h.config(1))
        h.engine.start_collecting(1)
        for pid in ids:
            h.verifier.accept(h.envelope(pid, preds[pid], 1), round_id=1)
        h.engine.close(1)
        h.engine.filter(1)  # the scores are released: the plan is past its scoring steps
        service.kill()
        service.start()
        h.engine.publish(1)  # the resumed plan allows the one publication
        weights = dict(h.engine.state(1).weights)
        service.kill()
        service.start()
        # a restarted aggregator: the same plan is resumed, another one is refused
        again = agg.aggregator(bound=BOUND)
        plan = h.engine._release_plan(h.config(1))
        again.begin_round(plan)
        with pytest.raises(SecureFedError, match="already has a release plan"):
            agg.aggregator(bound=BOUND).begin_round(replace(plan, max_weight=plan.cap / 2))
        # a plan above the ceremony's signed policy, for a new round: refused over HTTP
        with pytest.raises(PlanOutsidePolicy, match="weight cap 0.9 exceeds the policy's"):
            agg.aggregator(bound=BOUND).begin_round(replace(plan, round_id=2, max_weight=0.9))
        handles = {p: again.load(h.engine.state(1).uploads[p].payload) for p in ids}
        skewed = dict(zip(sorted(weights), (0.9, 0.05, 0.05), strict=True))
        with pytest.raises(DecryptionRefused):
            again.reveal(again.weighted_sum(handles, skewed), round_id=1)
    finally:
        service.stop()
    assert _audited(tmp_path / "state" / "audit.db", "already has a release plan")
    assert _audited(tmp_path / "state" / "audit.db", "PLAN_OUTSIDE_POLICY")
    assert (tmp_path / "state" / "keyauthority-plans.db").exists()


@pytest.mark.slow
def test_a_helper_killed_after_a_publication_refuses_another_plan_for_the_round(
    shares_keys: Path, tmp_path: Path
) -> None:
    """SIGKILL the real helper after round 1 published, restart it on its state: another
    plan for the round is refused (without the plan book the restarted helper had none and
    installed it). The second publication's refusal is tested in process
    (tests/secure_fed/secure/adversarial/test_plan_journal.py)."""
    from dataclasses import replace

    from secure_fed.errors import SecureFedError
    from tests.secure_fed.secure.helpers import BOUND

    authority = Service("keyauthority", shares_keys / "keyauthority", tmp_path / "ka").start()
    helper = Service("helper", shares_keys / "helper", tmp_path / "helper").start()
    try:
        tls = _aggregator_tls(shares_keys)
        agg = load_aggregator(
            shares_keys / "aggregator",
            authority=remote_authority(authority.url, tls=tls),
            helper=remote_helper(helper.url, tls=tls),
        )
        run_round(agg, shares_keys, tmp_path / "round")  # round 1 publishes
        helper.kill()
        helper.start()
        again = agg.aggregator(bound=BOUND)
        the_plan = plan(1, agg.shape, min_participants=2, scored=True)
        with pytest.raises(SecureFedError, match="already has a release plan"):
            again.begin_round(replace(the_plan, max_weight=0.4))
        # a plan without the scoring steps the signed policy requires: refused over HTTP
        with pytest.raises(PlanOutsidePolicy, match="requires the scoring steps"):
            again.begin_round(replace(the_plan, round_id=2, scored=False, ranking=False))
    finally:
        helper.stop()
        authority.stop()
    assert _audited(tmp_path / "helper" / "audit.db", "already has a release plan")
    assert _audited(tmp_path / "helper" / "audit.db", "PLAN_OUTSIDE_POLICY")
    assert (tmp_path / "helper" / "helper-plans.db").exists()

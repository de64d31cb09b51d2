"""Upload notices over HTTPS: the helper service refuses a roster that drops a noticed participant.

The helper and key authority run as real processes with mutual TLS. Participants post
their signed upload notices to ``POST /v1/notice`` with their own client certificates;
the aggregator (its loaded keys, the remote channels) then withholds one noticed upload
and asks for the scoring pass over the others: refused over HTTP with the same typed
error, audited in the helper's ledger, and still refused after the helper is SIGKILLed
and restarted on its state (the notices are in its plan journal).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

from api.services.apps import NOTICE_PATH
from privacy_ledger.audit import canonical
from secure_fed.deploy.keys import load_aggregator, load_participant
from secure_fed.deploy.participant_node import post_notice
from secure_fed.deploy.tls import ClientTLS, LocalCA
from secure_fed.deploy.transport import OCTET_STREAM, remote_authority, remote_helper
from secure_fed.errors import RosterOmitsNoticed, UploadNoticeDuplicate
from secure_fed.secure.protocol.upload_notice import notice_digest, sign_notice
from tests.api.services.conftest import Service
from tests.secure_fed.secure.helpers import BOUND, plan, population

pytestmark = pytest.mark.slow


def _audited(database: Path, text: str) -> bool:
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT * FROM audit_entries").fetchall()
    return any(text in str(row) for row in rows)


def test_a_noticed_participant_cannot_be_dropped_over_https_nor_after_a_restart(
    shares_keys: Path, tmp_path: Path
) -> None:
    authority = Service("keyauthority", shares_keys / "keyauthority", tmp_path / "ka").start()
    helper = Service("helper", shares_keys / "helper", tmp_path / "helper").start()
    try:
        ca = LocalCA(shares_keys / "tls")
        tls = ca.client("aggregator")
        agg = load_aggregator(
            shares_keys / "aggregator",
            authority=remote_authority(authority.url, tls=tls),
            helper=remote_helper(helper.url, tls=tls),
        )
        ids = agg.participant_ids
        parts = {p: load_participant(shares_keys / "participants" / p) for p in ids}
        preds = population(len(ids), *agg.shape, seed=2)
        payloads = {
            p: parts[p].encoder(bound=BOUND).encode(m)
            for p, m in zip(ids, preds.values(), strict=True)
        }
        shares = agg.aggregator(bound=BOUND)
        shares.begin_round(plan(1, agg.shape, min_participants=2, scored=True))

        def notice(pid: str) -> bytes:
            digest = notice_digest(payloads[pid], party="helper")
            key = parts[pid].signing_key
            return sign_notice(
                key, round_id=1, participant_id=pid, party="helper", upload_sm3=digest
            )

        headers = {"content-type": OCTET_STREAM}
        for pid in ids:  # each participant with its own client certificate, as its node does
            own = ca.issue_client(pid) if not ca.cert(pid).exists() else ca.client(pid)
            ack = canonical.decode(post_notice(notice(pid), url=helper.url, tls=own))
            assert ack["noticed"] is True and ack["participant_id"] == pid, ack
            with pytest.raises(UploadNoticeDuplicate):  # the same typed error over HTTPS
                post_notice(notice(pid), url=helper.url, tls=own)
        # the aggregator's certificate is not served on the participants' route
        with own_client(tls) as client:
            refused = client.post(
                f"{helper.url}{NOTICE_PATH}", content=notice(ids[0]), headers=headers
            )
        assert refused.status_code == 403 and refused.json()["code"] == "DEPLOY_PEER_REFUSED"
        kept = ids[:-1]  # the last participant's upload withheld
        with pytest.raises(RosterOmitsNoticed, match=ids[-1]):
            shares.score({p: shares.load(payloads[p]) for p in kept}, round_id=1)
        helper.kill()  # SIGKILL: the notices must come back from the journal
        helper.start()
        again_agg = agg.aggregator(bound=BOUND)
        again_agg.begin_round(plan(1, agg.shape, min_participants=2, scored=True))  # resumed
        with pytest.raises(RosterOmitsNoticed, match=ids[-1]):
            again_agg.score({p: again_agg.load(payloads[p]) for p in kept}, round_id=1)
    finally:
        helper.stop()
        authority.stop()
    assert _audited(tmp_path / "helper" / "audit.db", "upload.noticed")
    assert _audited(tmp_path / "helper" / "audit.db", "ROSTER_OMITS_NOTICED")


def own_client(client_tls: ClientTLS) -> httpx.Client:
    """An HTTPS client presenting ``client_tls``'s certificate."""
    return httpx.Client(verify=client_tls.ssl_context(), timeout=10.0)

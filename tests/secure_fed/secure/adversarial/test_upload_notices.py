"""Rosters the aggregator cannot choose: a noticed participant cannot be dropped or swapped.

The attacker is the aggregator, with the mode's real aggregator classes and the
gatekeeper's real channel (the key authority in ``ckks`` mode, the helper in ``shares``
mode). Each participant first sends the gatekeeper a signed upload notice
(:mod:`secure_fed.secure.protocol.upload_notice`). Before, an aggregator that withheld an
accepted upload looked like a dropout: the publication over the others was released, and
two publications whose rosters differ by one participant subtract to its matrix. Now the
gatekeeper refuses a roster that omits a noticed participant or lists another upload of
it (typed, audited, nothing released), also after a restart over the same journal; a
participant that never noticed is a dropout and the round publishes with the rest; bad
notices are refused typed and change nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical
from secure_fed.errors import (
    RosterOmitsNoticed,
    UploadDiffersFromNotice,
    UploadNoticeDuplicate,
    UploadNoticeForged,
    UploadNoticeMalformed,
    UploadNoticeRound,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.consortium_policy import SignedPolicy
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.protocol.upload_notice import MAX_NOTICE_BYTES, notice_digest, sign_notice
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from tests.secure_fed.secure.helpers import BOUND, population, publication_only

N, C = 120, 4
IDS = ["a", "b", "c", "d"]
MODES = ["ckks", "shares"]
PARTY = {"ckks": "key_authority", "shares": "helper"}
EQUAL = dict.fromkeys(IDS, 0.25)
THREE = dict.fromkeys(IDS[:3], 1 / 3)


class _Round:
    """One round of a deployment whose participants hold their own envelope keys."""

    def __init__(self, mode: str, tmp_path: Path, *, journal: bool = False) -> None:
        self.mode, self.party = mode, PARTY[mode]
        self.sink = MemoryAuditSink()
        self.keys = {p: SM2PrivateKey.generate() for p in IDS}
        signed = SignedPolicy.sign(publication_only(IDS, (N, C), quorum=3), self.keys)
        self.dep: Any = SecureDeployment.create(
            mode=mode,
            shape=(N, C),
            participant_ids=IDS,
            min_participants=3,
            policy=signed,
            participant_keys={p: k.public_key for p, k in self.keys.items()},
            verified_release=False,
            audit=self.sink,
        )
        self.journal = tmp_path / f"{mode}-plans.db" if journal else None
        if self.journal is not None:
            self.restart()
        preds = dict(zip(IDS, population(len(IDS), N, C, seed=4).values(), strict=True))
        self.payloads = {p: self.encode(p, m) for p, m in preds.items()}
        self.agg = self.dep.aggregator(bound=BOUND)
        self.agg.begin_round(
            ReleasePlan.for_round(
                round_id=1,
                min_participants=3,
                shape=(N, C),
                scoring=ScoringConfig(moment_samples=getattr(self.agg, "samples", N)),
                scored=False,
                max_weight=1 / 3,
            )
        )

    @property
    def gatekeeper(self) -> Any:
        return self.dep.helper if self.mode == "shares" else self.dep.authority

    def restart(self) -> None:
        """The gatekeeper as a new object over the same journal file (its channel survives)."""
        assert self.journal is not None
        fresh = dataclasses.replace(self.gatekeeper, plan_journal=PlanJournal(self.journal))
        if self.mode == "shares":
            self.dep.helper = fresh
        else:
            self.dep.authority = fresh

    def encode(self, pid: str, matrix: np.ndarray) -> bytes:
        return bytes(self.dep.encoder(pid, bound=BOUND).encode(matrix))

    def notice(self, pid: str, payload: bytes | None = None, **kw: Any) -> bytes:
        fields: dict[str, Any] = {
            "round_id": 1,
            "participant_id": pid,
            "party": self.party,
            "upload_sm3": notice_digest(
                self.payloads[pid] if payload is None else payload, party=self.party
            ),
        }
        fields.update(kw)
        key = fields.pop("key", self.keys[pid])
        return sign_notice(key, **fields)

    def notify(self, *pids: str) -> None:
        for pid in pids:
            self.gatekeeper.accept_notice(self.notice(pid))

    def publish(self, weights: dict[str, float], payloads: dict[str, bytes] | None = None) -> Any:
        uploads = self.payloads if payloads is None else payloads
        handles = {p: self.agg.load(uploads[p]) for p in weights}
        return self.agg.reveal(self.agg.weighted_sum(handles, weights), round_id=1)

    def published(self) -> list[dict[str, object]]:
        return [e for e in self.sink.named("decryption.released") if e["purpose"] == "aggregate"]

    def denied(self, op: str) -> list[dict[str, object]]:
        return [e for e in self.sink.named("access.denied") if e.get("op") == op]


@pytest.mark.parametrize("mode", MODES)
def test_a_roster_that_drops_a_noticed_participant_is_refused_and_nothing_released(
    mode: str, tmp_path: Path
) -> None:
    r = _Round(mode, tmp_path)
    r.notify(*IDS)
    assert len(r.sink.named("upload.noticed")) == 4
    with pytest.raises(RosterOmitsNoticed, match=r"leaves out \['d'\]"):
        r.publish(THREE)  # d's upload withheld: before, this published a, b, c
    assert r.published() == []
    denied = r.denied("roster")
    assert denied[-1]["participant_ids"] == ["d"], denied
    assert denied[-1]["code"] == "ROSTER_OMITS_NOTICED" and denied[-1]["party"] == r.party
    assert not r.gatekeeper.log[-1].released
    out = r.publish(EQUAL)  # the honest roster still publishes: nothing was spent
    assert np.isfinite(out).all() and len(r.published()) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_roster_that_swaps_a_noticed_upload_is_refused(mode: str, tmp_path: Path) -> None:
    r = _Round(mode, tmp_path)
    r.notify(*IDS)
    # another upload for d: d's second encoding (shares), or one the aggregator encrypted
    # itself under the public context (ckks: anybody can)
    other = r.encode("d", np.zeros((N, C)))
    with pytest.raises(UploadDiffersFromNotice, match="'d'"):
        r.publish(EQUAL, {**r.payloads, "d": other})
    assert r.published() == []
    denied = r.denied("roster")
    assert (
        denied[-1]["participant_ids"] == ["d"]
        and denied[-1]["code"] == "UPLOAD_DIFFERS_FROM_NOTICE"
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_participant_that_never_noticed_is_a_dropout_and_the_rest_publish(
    mode: str, tmp_path: Path
) -> None:
    r = _Round(mode, tmp_path)
    r.notify("a", "b", "c")  # d never sent a notice (it dropped out before uploading)
    out = r.publish(THREE)
    assert np.isfinite(out).all() and len(r.published()) == 1
    noticed = sorted(str(e["participant_id"]) for e in r.sink.named("upload.noticed"))
    assert noticed == ["a", "b", "c"]
    assert r.denied("roster") == []


@pytest.mark.parametrize("mode", MODES)
def test_bad_notices_are_refused_typed_and_change_nothing(mode: str, tmp_path: Path) -> None:
    r = _Round(mode, tmp_path)
    r.notify("d")
    other_party = "key_authority" if r.party == "helper" else "helper"
    stranger = SM2PrivateKey.generate()
    cases: list[tuple[type[Exception], bytes]] = [
        (UploadNoticeRound, r.notice("a", round_id=2)),  # another round (no plan for it)
        (UploadNoticeDuplicate, r.notice("d")),  # the same notice again
        (UploadNoticeDuplicate, r.notice("d", r.encode("d", np.zeros((N, C))))),  # another one
        (UploadNoticeForged, r.notice("a", key=stranger)),  # not a's key
        (UploadNoticeForged, r.notice("a", key=r.keys["b"])),  # b signs as a
        (UploadNoticeMalformed, b"x" * (MAX_NOTICE_BYTES + 1)),  # oversized
        (UploadNoticeMalformed, b'{"round_id": 1}'),  # not canonical, fields missing
        (
            UploadNoticeMalformed,
            sign_notice(
                r.keys["a"], round_id=1, participant_id="a", party=other_party, upload_sm3="0" * 64
            ),
        ),  # addressed to the other gatekeeper
    ]
    forged = canonical.decode(r.notice("a"))
    forged["upload_sm3"] = "1" * 64  # a's signature over another digest
    cases.append((UploadNoticeForged, canonical.encode(forged)))
    for error, raw in cases:
        with pytest.raises(error):
            r.gatekeeper.accept_notice(raw)
    denied = r.denied("notice")
    assert [e["code"] for e in denied] == [e.code for e, _ in cases]  # type: ignore[attr-defined]
    # nothing lost, nothing gained: d's first notice is in force, a has none
    assert r.gatekeeper.notices.notices == {1: {"d": notice_digest(r.payloads["d"], party=r.party)}}
    with pytest.raises(RosterOmitsNoticed):
        r.publish(THREE)
    r.publish(dict.fromkeys(["a", "b", "d"], 1 / 3))  # a never noticed: may be left out
    with pytest.raises(UploadNoticeRound, match="late"):
        r.gatekeeper.accept_notice(r.notice("c"))  # the round's openings are done


@pytest.mark.parametrize("mode", MODES)
def test_a_restarted_gatekeeper_still_enforces_the_notices(mode: str, tmp_path: Path) -> None:
    r = _Round(mode, tmp_path, journal=True)
    r.notify(*IDS)
    r.restart()
    assert len(r.gatekeeper.notices.notices[1]) == 4
    with pytest.raises(RosterOmitsNoticed, match=r"\['d'\]"):
        r.publish(THREE)
    with pytest.raises(UploadNoticeDuplicate):  # the journal still holds d's first notice
        r.gatekeeper.accept_notice(r.notice("d"))
    assert r.published() == []
    out = r.publish(EQUAL)
    assert np.isfinite(out).all()


def test_an_altered_journalled_notice_is_refused_at_start(tmp_path: Path) -> None:
    import sqlite3

    from secure_fed.errors import ModeSetupInvalid

    r = _Round("shares", tmp_path, journal=True)
    r.notify("a")
    assert r.journal is not None
    with sqlite3.connect(r.journal) as db:
        altered = "CAST(replace(CAST(notice AS TEXT), '\"round_id\":1', '\"round_id\":3') AS BLOB)"
        db.execute(f"UPDATE notices SET notice = {altered}")  # noqa: S608 (a fixed statement)
    with pytest.raises(ModeSetupInvalid, match="stored notice"):
        r.restart()

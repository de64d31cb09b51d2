"""``secure-fed deploy keys``: the key ceremony from the command line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from api.cli import app
from secure_fed.deploy.keys import read_manifest


def _keys(out: Path, *extra: str) -> tuple[int, str]:
    args = ["deploy", "keys", "--mode", "shares", "--participants", "h1, h2,b1"]
    result = CliRunner().invoke(app, [*args, "--shape", "64,4", "--out", str(out), *extra])
    return result.exit_code, result.output


def test_deploy_keys_writes_every_party_and_never_overwrites(tmp_path: Path) -> None:
    code, output = _keys(tmp_path / "keys", "--min-participants", "3")
    assert code == 0, output
    manifest = read_manifest(tmp_path / "keys" / "helper", role="helper")
    assert manifest.participant_ids == ("h1", "h2", "b1") and manifest.min_participants == 3
    assert {p.name for p in (tmp_path / "keys").iterdir()} == {
        "aggregator",
        "keyauthority",
        "helper",
        "participants",
        "api",
        "tls",
        "superlink",
    }
    code, output = _keys(tmp_path / "keys")
    assert code == 1 and "DEPLOY_KEY_DIRECTORY_INVALID" in output


def test_deploy_keys_names_a_bad_option(tmp_path: Path) -> None:
    code, output = _keys(tmp_path / "k", "--shape", "64")
    assert code == 2 and "--shape must be N,C" in output
    code, output = _keys(tmp_path / "k2", "--min-participants", "1")
    assert code != 0 and "min_participants must be >= 2" in output


def test_deploy_keys_writes_the_signed_policy_with_its_multi_round_rule(tmp_path: Path) -> None:
    import json

    from secure_fed.deploy.ceremony import read_policy

    code, output = _keys(tmp_path / "keys", "--min-participants", "3", "--isolation", "2")
    assert code == 0, output
    manifest = read_manifest(tmp_path / "keys" / "keyauthority", role="keyauthority")
    policy = read_policy(tmp_path / "keys" / "keyauthority").verify(manifest.participant_keys)
    assert (policy.quorum, policy.isolation, policy.cap) == (3, 2, 1 / 3)
    for party in ("aggregator", "helper", "api", "participants/h2"):
        same = json.loads((tmp_path / "keys" / party / "policy.json").read_bytes())
        assert same["document"].encode() == policy.to_bytes()
    # a rule above the quorum is no policy: refused before anything is written
    code, output = _keys(tmp_path / "bad", "--isolation", "3")  # quorum 2
    assert code != 0 and "POLICY_INVALID" in output and "isolation" in output
    assert not (tmp_path / "bad" / "aggregator").exists()


def test_deploy_keys_signs_the_outlier_budget_into_the_policy(tmp_path: Path) -> None:
    """``--max-flagged`` is signed into the policy both gatekeepers pin; it bounds plans."""
    from dataclasses import replace

    from secure_fed.deploy.ceremony import read_policy
    from secure_fed.secure.release_plan import ReleasePlan
    from secure_fed.secure.scoring.mahalanobis import ScoringConfig

    code, output = _keys(tmp_path / "keys", "--min-participants", "3", "--max-flagged", "1")
    assert code == 0, output
    for party in ("keyauthority", "helper"):
        manifest = read_manifest(tmp_path / "keys" / party, role=party)
        policy = read_policy(tmp_path / "keys" / party).verify(manifest.participant_keys)
        assert policy.max_flagged == 1
    within = ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=policy.shape,
        scoring=ScoringConfig(min_subset=3),
        max_weight=policy.cap,
        exclude_above=policy.exclusion_floor(),
        copies=policy.copies,
        max_flagged=1,
    )
    assert policy.plan_reason(within) is None
    for over in (None, 2):  # no budget, or a larger one: outside the signed policy
        reason = policy.plan_reason(replace(within, max_flagged=over))
        assert reason is not None and "max_flagged" in reason
    code, output = _keys(tmp_path / "unset")
    assert code == 0, output
    manifest = read_manifest(tmp_path / "unset" / "helper", role="helper")
    assert (
        read_policy(tmp_path / "unset" / "helper").verify(manifest.participant_keys).max_flagged
        is None
    )
    code, output = _keys(tmp_path / "bad", "--max-flagged", "-1")
    assert code != 0 and "POLICY_INVALID" in output and "max_flagged" in output

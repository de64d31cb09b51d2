"""A participant node's own ledger: the budget it sets is audited, as ``budget set`` does it.

The node is configured by a real ``participant.toml`` with ``budget.ledger_url`` (a SQLite
file); the gate the node builds is the one :class:`ParticipantNode` charges. ``secure-fed
ledger verify`` then checks the ledger with the log's public key the node left beside it:
it passes after the node set its budget, and names an unaudited change made afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.config_errors import ParticipantConfigInvalid
from secure_fed.deploy.node_ledger import OWN_KEY, OWN_PUBLIC_KEY
from secure_fed.deploy.participant_config import ParticipantConfig, load_participant_config
from secure_fed.deploy.participant_node import _budget_gate
from secure_fed.federation.config import ASSET_ID

runner = CliRunner()


def _config(folder: Path, *, ledger: str, audit_key: str | None = None) -> ParticipantConfig:
    (folder / "keys").mkdir(parents=True, exist_ok=True)
    extra = "" if audit_key is None else f'audit_key = "{audit_key}"\n'
    toml = folder / "participant.toml"
    toml.write_text(
        '[participant]\nid = "hospital-1"\narchitecture = "mlp"\nstate_dir = "state"\n\n'
        '[data]\nbuiltin = "digits"\n\n'
        f'[public]\nbuiltin = true\nsm3 = "{"0" * 64}"\n\n'
        "[dp]\nepsilon = 4.0\ndelta = 1e-5\nrounds = 2\n\n"
        '[keys]\ndir = "keys"\n\n'
        f'[budget]\nledger_url = "{ledger}"\n{extra}',
        encoding="utf-8",
    )
    return load_participant_config(toml)


def _verify(url: str, pem: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(pem)])
    return result.exit_code, result.output


def test_the_budget_a_node_sets_is_audited_and_a_later_unaudited_change_is_named(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{(tmp_path / 'own.db').as_posix()}"
    gate = _budget_gate(_config(tmp_path, ledger=url))
    assert isinstance(gate, PrivacyLedger)
    assert float(gate.budget_status("hospital-1", ASSET_ID).limit) == 4.0
    gate.engine.dispose()
    assert (tmp_path / OWN_KEY).stat().st_mode & 0o777 == 0o600
    pem = tmp_path / OWN_PUBLIC_KEY
    code, output = _verify(url, pem)
    assert code == 0, output
    assert "1 budgets: limit, delta and accountant as the audit log records them" in output
    again = _budget_gate(_config(tmp_path, ledger=url))  # a restarted node: same key, no change
    assert isinstance(again, PrivacyLedger)
    again.engine.dispose()
    assert _verify(url, pem)[0] == 0
    unaudited = PrivacyLedger.from_url(url)
    unaudited.set_budget("hospital-1", ASSET_ID, epsilon="40", delta=1e-5)
    unaudited.engine.dispose()
    code, output = _verify(url, pem)
    assert code == 1, output
    assert "UNAUDITED: budget" in output and "LEDGER_BUDGET_UNAUDITED" in output


def test_a_key_that_is_not_the_logs_is_refused_and_so_is_a_server_ledger_without_one(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{(tmp_path / 'own.db').as_posix()}"
    gate = _budget_gate(_config(tmp_path, ledger=url))
    assert isinstance(gate, PrivacyLedger)
    gate.engine.dispose()
    other = tmp_path / "other"
    other.mkdir()
    (other / OWN_KEY).write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    with pytest.raises(ParticipantConfigInvalid, match="is not the key of this ledger's audit"):
        _budget_gate(_config(tmp_path, ledger=url, audit_key=str(other / OWN_KEY)))
    server = "postgresql+psycopg://127.0.0.1:5432/test"
    with pytest.raises(ParticipantConfigInvalid, match="needs budget.audit_key"):
        _budget_gate(_config(tmp_path / "pg", ledger=server))

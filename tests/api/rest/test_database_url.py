"""The REST service refuses a PostgreSQL URL SQLAlchemy cannot open: the ledger's typed error."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.rest import ApiSettings, create_app
from crypto.sm import SM2PrivateKey
from privacy_ledger.errors import DatabaseUrlInvalid


def test_a_postgres_scheme_is_refused_typed(tmp_path: Path) -> None:
    key = tmp_path / "log-signing-key.pem"
    key.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    settings = ApiSettings(
        database_url="postgres://fed:secret@127.0.0.1:1/ledger", api_audit_key_file=key
    )
    with pytest.raises(DatabaseUrlInvalid) as raised:
        create_app(settings)
    assert "no 'postgres' dialect" in raised.value.message
    assert "write postgresql+psycopg://" in raised.value.message
    assert "secret" not in str(raised.value)

"""API tokens: only salted hashes stored, constant-time checks, expiry, revocation and rotation."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from privacy_ledger.api_tokens import (
    ApiTokenRow,
    ApiTokenStore,
    TokenExpired,
    TokenInvalid,
    TokenRevoked,
    TokenUnknown,
    hmac_sm3,
)
from privacy_ledger.errors import LedgerParameterInvalid, ParticipantUnknown
from tests.api.rest.helpers import PARTICIPANTS, Service


def test_hmac_sm3_matches_rfc2104_over_hashlib() -> None:
    import hashlib
    import hmac

    if "sm3" not in hashlib.algorithms_available:
        pytest.skip("OpenSSL without SM3")
    for key in (b"k", b"x" * 64, b"y" * 100):
        assert hmac_sm3(key, b"message") == hmac.new(key, b"message", "sm3").digest()


def test_only_a_salted_hash_is_stored(sqlite_service: Service) -> None:
    store = sqlite_service.ctx.tokens
    first = store.create(name="a", role="officer")
    second = store.create(name="b", role="officer")
    secret = first.secret.split(".", 1)[1]
    with sqlite_service.ctx.sessions() as session:
        rows = {r.id: r for r in session.execute(select(ApiTokenRow)).scalars()}
    row = rows[first.token.id]
    assert secret.encode() not in row.secret_hash and secret.encode() not in row.salt
    assert row.secret_hash == hmac_sm3(row.salt, secret.encode())
    assert row.salt != rows[second.token.id].salt and len(row.salt) == 16
    assert "secret" not in repr(first) and secret not in repr(first)


def test_a_wrong_or_unknown_token_is_invalid(sqlite_service: Service) -> None:
    store = sqlite_service.ctx.tokens
    issued = store.create(name="a", role="service")
    token_id, secret = issued.secret.removeprefix("sft_").split(".")
    forged = f"sft_{token_id}.{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}"
    unknown = f"sft_{'0' * 16}.{secret}"
    for presented in (forged, unknown, "sft_zz.zz", "", issued.secret + "x"):
        with pytest.raises(TokenInvalid):
            store.authenticate(presented)
    assert store.authenticate(issued.secret).role == "service"


def test_expiry_and_revocation_and_rotation(sqlite_service: Service) -> None:
    now = [1000.0]
    store = ApiTokenStore(sqlite_service.ctx.engine, clock=lambda: now[0])
    issued = store.create(name="a", role="officer", ttl_seconds=60)
    assert store.authenticate(issued.secret).id == issued.token.id
    now[0] += 61
    with pytest.raises(TokenExpired):
        store.authenticate(issued.secret)
    other = store.create(name="b", role="admin", ttl_seconds=60)
    rotated = store.rotate(other.token.id)
    with pytest.raises(TokenRevoked):
        store.authenticate(other.secret)
    assert store.authenticate(rotated.secret).role == "admin"
    assert store.get(other.token.id).replaced_by == rotated.token.id
    store.revoke(rotated.token.id)
    with pytest.raises(TokenRevoked):
        store.authenticate(rotated.secret)
    with pytest.raises(TokenUnknown):
        store.revoke("0123456789abcdef")


def test_revocation_takes_effect_on_the_next_request(sqlite_service: Service) -> None:
    issued = sqlite_service.ctx.tokens.create(name="x", role="officer")
    headers = {"Authorization": f"Bearer {issued.secret}"}
    assert sqlite_service.client.get("/v1/budgets", headers=headers).status_code == 200
    ApiTokenStore(sqlite_service.ctx.engine).revoke(issued.token.id)  # another process's store
    answer = sqlite_service.client.get("/v1/budgets", headers=headers)
    assert answer.status_code == 401 and answer.json()["code"] == "API_UNAUTHENTICATED"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "", "role": "officer"}, LedgerParameterInvalid),
        ({"name": "a", "role": "root"}, LedgerParameterInvalid),
        ({"name": "a", "role": "participant"}, LedgerParameterInvalid),
        (
            {"name": "a", "role": "officer", "participant_id": PARTICIPANTS[0]},
            LedgerParameterInvalid,
        ),
        ({"name": "a", "role": "participant", "participant_id": "nobody"}, ParticipantUnknown),
        ({"name": "a", "role": "officer", "scopes": ["everything"]}, LedgerParameterInvalid),
        ({"name": "a", "role": "officer", "scopes": "budgets:read"}, LedgerParameterInvalid),
        ({"name": "a", "role": "officer", "ttl_seconds": 0}, LedgerParameterInvalid),
        ({"name": "a", "role": "officer", "ttl_seconds": 10**9}, LedgerParameterInvalid),
    ],
)
def test_bad_token_parameters_are_refused_and_store_nothing(
    sqlite_service: Service, kwargs: dict[str, object], error: type[Exception]
) -> None:
    store = sqlite_service.ctx.tokens
    count = len(store.list())
    with pytest.raises(error):
        store.create(**kwargs)  # type: ignore[arg-type]
    assert len(store.list()) == count

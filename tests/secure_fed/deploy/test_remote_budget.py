"""RemoteBudgetGate against a real ``secure-fed api`` process on 127.0.0.1 (TLS, own CA).

On SQLite and (marker postgres) PostgreSQL: a PrivateTrainer trains through
the gate and the ledger shows the charge; the ledger's refusals come back as
the ledger's own exception classes (so ``refusal_errors()`` still applies);
wrong credentials, another participant's budget, an API that is down or a
certificate from another CA are typed errors; a reply lost after the ledger
reserved is retried without holding the budget twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from crypto.sm import SM2PrivateKey
from privacy_ledger import MechanismEvent, PrivacyLedger
from privacy_ledger.budget.receipts import DPPlan, ReceiptVerifier
from privacy_ledger.budget.types import Reservation
from privacy_ledger.errors import (
    BudgetExceeded,
    ReceiptUnavailable,
    ReservationNotActive,
    ReservationUnknown,
)
from secure_fed.deploy.remote_budget import (
    BudgetServiceDenied,
    BudgetServiceUnavailable,
    RemoteBudgetGate,
)
from secure_fed.deploy.supervisor import free_port
from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.budget_gate import refusal_errors
from tests.secure_fed.deploy.budget_api import (
    ASSET,
    PARTICIPANTS,
    BudgetApi,
    LosingProxy,
    make_tls,
    running_api,
)

H, B = PARTICIPANTS
EVENT = MechanismEvent(
    noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
)
GREEDY = MechanismEvent(
    noise_multiplier=0.3, sample_rate=0.5, steps=2000, delta=1e-5, max_grad_norm=1.0
)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BudgetApi]:
    folder = tmp_path_factory.mktemp("budget-api")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'ledger.db'}"
        with running_api(url, folder) as running:
            yield running
        return
    from tests.privacy_ledger.conftest import pg_schema

    with pg_schema("rb_") as url, running_api(url, folder) as running:
        yield running


def _gate(api: BudgetApi, who: str = H, **kw: object) -> RemoteBudgetGate:
    return RemoteBudgetGate(
        base_url=api.endpoint.url,
        token=api.tokens[who],
        ca_file=api.endpoint.ca_file,
        **kw,  # type: ignore[arg-type]
    )


def _ledger(api: BudgetApi) -> PrivacyLedger:
    return PrivacyLedger.from_url(api.db_url, create=False)


def test_a_private_trainer_charges_the_ledger_through_the_api(api: BudgetApi) -> None:
    from secure_fed.learning.data import load_task
    from secure_fed.learning.models import build_model
    from secure_fed.learning.private_training import DPGoal, PrivateTrainer

    task = load_task("digits", seed=0)
    ledger = _ledger(api)
    before = ledger.epsilon_spent(H, ASSET)
    with _gate(api) as gate:
        trainer = PrivateTrainer(
            model=build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=0),
            x=task.private_x[:200],
            y=task.private_y[:200],
            goal=DPGoal(epsilon=4.0, delta=1e-5, rounds=2),
            budget=gate,
            participant_id=H,
            asset_id=ASSET,
            batch_size=25,
            lr=0.1,
            epochs_per_round=None,
            steps_per_round=2,
        )
        report = trainer.train_round("round-1")
        assert report.trained, report.refused_reason
        assert gate.epsilon_spent(H, ASSET) == ledger.epsilon_spent(H, ASSET)
    committed = ledger.events(H, ASSET, states=("committed",))
    assert [r.round_id for r in committed] == ["round-1"]
    assert committed[0].event.noise_multiplier == report.noise_multiplier
    assert committed[0].event.steps == trainer.steps
    assert ledger.epsilon_spent(H, ASSET) > before
    assert ledger.events(H, ASSET, states=("reserved",)) == []
    ledger.engine.dispose()


def test_the_ledgers_refusal_is_the_same_exception_over_http(api: BudgetApi) -> None:
    with _gate(api, B) as gate:
        with pytest.raises(BudgetExceeded) as caught:
            gate.reserve(B, ASSET, GREEDY, round_id="r-greedy")
        assert isinstance(caught.value, refusal_errors())
        assert caught.value.limit == Decimal("8") and caught.value.requested > 0
        with pytest.raises(refusal_errors()):
            gate.calibrate_noise(
                B, ASSET, rounds=1, steps_per_round=1, sample_rate=1.0, max_grad_norm=1.0,
                epsilon="0.000000000001",
            )  # fmt: skip
    ledger = _ledger(api)
    assert ledger.events(B, ASSET, states=("reserved", "committed")) == []
    ledger.engine.dispose()


def test_commit_and_abort_follow_the_ledgers_rules(api: BudgetApi) -> None:
    with _gate(api, B) as gate:
        held = gate.reserve(B, ASSET, EVENT, round_id="r-abort")
        assert held.state == "reserved" and held.event == EVENT
        gate.abort(held.id)
        gate.abort(held.id)  # a no-op
        with pytest.raises(ReservationNotActive):
            gate.commit(held.id)
        charged = gate.reserve(B, ASSET, EVENT, round_id="r-commit")
        gate.commit(charged.id)
        gate.commit(charged.id)  # idempotent
        with pytest.raises(ReservationNotActive):
            gate.abort(charged.id)
    # A restarted participant resumes by id with a fresh gate that names itself.
    with _gate(api, B, participant_id=B) as fresh:
        fresh.abort(charged.id, released_anything=True)
        with pytest.raises(ReservationUnknown):
            fresh.commit("f" * 32)
    with (
        _gate(api, B) as anonymous,
        pytest.raises(LearningParameterInvalid, match="participant_id"),
    ):
        anonymous.commit(charged.id)


@pytest.mark.parametrize("who", ["revoked", "officer", "wrong"])
def test_wrong_credentials_are_denied(api: BudgetApi, who: str) -> None:
    token = "sft_0123456789abcdef." + "x" * 43 if who == "wrong" else api.tokens[who]
    gate = RemoteBudgetGate(base_url=api.endpoint.url, token=token, ca_file=api.endpoint.ca_file)
    with gate, pytest.raises(BudgetServiceDenied):
        gate.reserve(H, ASSET, EVENT)


def test_another_participants_budget_is_denied(api: BudgetApi) -> None:
    ledger = _ledger(api)
    held = len(ledger.events(B, ASSET))
    with _gate(api, H) as gate:
        with pytest.raises(BudgetServiceDenied, match="API_FORBIDDEN"):
            gate.reserve(B, ASSET, EVENT)
        with pytest.raises(BudgetServiceDenied):
            gate.epsilon_spent(B, ASSET)
    assert len(ledger.events(B, ASSET)) == held
    ledger.engine.dispose()


def test_an_api_that_is_down_is_a_typed_error(api: BudgetApi) -> None:
    down = f"https://127.0.0.1:{free_port()}"
    gate = RemoteBudgetGate(
        base_url=down, token=api.tokens[H], ca_file=api.endpoint.ca_file, attempts=2, timeout=2
    )
    with gate, pytest.raises(BudgetServiceUnavailable, match="2 tries"):
        gate.reserve(H, ASSET, EVENT)


def test_a_certificate_from_another_ca_is_refused(api: BudgetApi, tmp_path: Path) -> None:
    other_ca, _, _ = make_tls(tmp_path / "other")
    gate = RemoteBudgetGate(
        base_url=api.endpoint.url, token=api.tokens[H], ca_file=other_ca, attempts=1
    )
    with gate, pytest.raises(BudgetServiceUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        gate.epsilon_spent(H, ASSET)


def test_plain_http_and_https_without_a_ca_are_refused(api: BudgetApi) -> None:
    with pytest.raises(LearningParameterInvalid, match="insecure_http"):
        RemoteBudgetGate(base_url="http://127.0.0.1:1", token=api.tokens[H])
    with pytest.raises(LearningParameterInvalid, match="ca_file"):
        RemoteBudgetGate(base_url=api.endpoint.url, token=api.tokens[H])
    with pytest.raises(LearningParameterInvalid, match="token"):
        RemoteBudgetGate(base_url=api.endpoint.url, token="", ca_file=api.endpoint.ca_file)
    assert api.tokens[H] not in repr(_gate(api))


def test_a_reply_lost_after_the_reservation_is_retried_without_holding_twice(
    tmp_path: Path,
) -> None:
    with running_api(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, tls=False) as plain:
        port = int(plain.endpoint.url.rsplit(":", 1)[1])
        proxy = LosingProxy(port)
        gate = RemoteBudgetGate(
            base_url=f"http://127.0.0.1:{proxy.port}",
            token=plain.tokens[H],
            insecure_http=True,
            attempts=3,
        )
        with gate:
            held = gate.reserve(H, ASSET, EVENT, round_id="r-lost")
            gate.commit(held.id)
        proxy.close()
        assert proxy.dropped == 1
        ledger = _ledger(plain)
        events = ledger.events(H, ASSET)
        assert [(r.id, r.state) for r in events] == [(held.id, "committed")]
        ledger.engine.dispose()


def test_a_token_file_is_read_and_checked(api: BudgetApi, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(api.tokens[H] + "\n")
    with RemoteBudgetGate.from_token_file(
        token_file=path, base_url=api.endpoint.url, ca_file=api.endpoint.ca_file
    ) as gate:
        assert gate.epsilon_spent(H, ASSET) >= 0
    with pytest.raises(LearningParameterInvalid, match="token_file"):
        RemoteBudgetGate.from_token_file(token_file=tmp_path / "missing", base_url=api.endpoint.url)
    assert np.isfinite(float(_gate(api).epsilon_spent(H, ASSET)))


def test_a_receipt_of_a_committed_charge_verifies_under_the_apis_key(api: BudgetApi) -> None:
    key = SM2PrivateKey.from_pem((api.folder / "receipts.key.pem").read_bytes(), passphrase=None)
    verifier = ReceiptVerifier(public_key=key.public_key)
    with _gate(api) as gate:
        with pytest.raises(ReceiptUnavailable):
            gate.receipt(participant_id=H, asset_id=ASSET, round_id="r-receipt")
        gate.commit(gate.reserve(H, ASSET, EVENT, round_id="r-receipt").id)
        data = gate.receipt(participant_id=H, asset_id=ASSET, round_id="r-receipt")
        plan = DPPlan(noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5)
        got = verifier.verify(data, participant_id=H, round_id="r-receipt", plan=plan)
        assert got.asset_id == ASSET
        with pytest.raises(BudgetServiceDenied):  # the token speaks for H only
            gate.receipt(participant_id=B, asset_id=ASSET, round_id="r-receipt")
        with pytest.raises(LearningParameterInvalid, match="round_id"):
            gate.receipt(participant_id=H, asset_id=ASSET, round_id="../r-receipt")


def test_an_api_that_comes_up_late_is_waited_for_and_charged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The API's port refuses connections for 1.5 s, then the API starts (seconds more)."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    caplog.set_level("WARNING", logger="secure_fed.deploy.remote_budget")
    outcome: list[object] = []
    with running_api(url, tmp_path, start=False) as late:

        def charge() -> None:
            try:
                with RemoteBudgetGate(
                    base_url=late.endpoint.url, token=late.tokens[H], ca_file=late.endpoint.ca_file
                ) as gate:
                    held = gate.reserve(H, ASSET, EVENT, round_id="r-late")
                    gate.commit(held.id)
                    outcome.append(held)
            except Exception as exc:  # noqa: BLE001 - handed to the test's thread
                outcome.append(exc)

        worker = threading.Thread(target=charge)
        worker.start()
        time.sleep(1.5)  # the API is down meanwhile (not a timed assertion: a fault's length)
        late.supervisor.start(late.spec)  # from this thread: the child lives as long as it
        worker.join(timeout=300)
        (held,) = outcome
        assert isinstance(held, Reservation), held
        ledger = _ledger(late)
        assert [(r.id, r.state) for r in ledger.events(H, ASSET)] == [(held.id, "committed")]
        ledger.engine.dispose()
    retries = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert retries and all(r.levelname == "WARNING" for r in retries)  # each retry is logged


def test_an_api_that_never_comes_up_is_given_up_within_the_bound(
    api: BudgetApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="secure_fed.deploy.remote_budget")
    down = f"https://127.0.0.1:{free_port()}"
    gate = RemoteBudgetGate(
        base_url=down, token=api.tokens[H], ca_file=api.endpoint.ca_file, retry_seconds=2
    )
    with gate, pytest.raises(BudgetServiceUnavailable, match="retry_seconds 2") as raised:
        gate.reserve(H, ASSET, EVENT)
    assert raised.value.code == "DEPLOY_BUDGET_SERVICE_UNAVAILABLE"
    messages = [r.getMessage() for r in caplog.records]
    assert sum("retrying in" in m for m in messages) >= 2  # backed off more than once
    assert sum("giving up after" in m for m in messages) == 1


def test_the_retry_bound_is_read_from_participant_toml(tmp_path: Path) -> None:
    from secure_fed.deploy.config_errors import ParticipantConfigInvalid
    from secure_fed.deploy.participant_config import load_participant_config
    from secure_fed.deploy.participant_node import _budget_gate
    from tests.secure_fed.deploy.flower.workspace import write_federation

    _, (toml, _) = write_federation(tmp_path, ids=list(PARTICIPANTS), rounds=1)
    token = toml.parent / "api-token"
    token.write_text("sft_x.y\n", encoding="utf-8")
    text = toml.read_text(encoding="utf-8")
    head = text[: text.index("[budget]")]
    ca, _, _ = make_tls(tmp_path / "tls")
    budget = (
        f'[budget]\napi_url = "https://127.0.0.1:1"\ntoken_file = "api-token"\nca_file = "{ca}"\n'
    )
    toml.write_text(head + budget, encoding="utf-8")
    assert load_participant_config(toml).retry_seconds == 60.0  # the default
    toml.write_text(head + budget + "retry_seconds = 1.5\n", encoding="utf-8")
    config = load_participant_config(toml)
    assert config.retry_seconds == 1.5
    gate = _budget_gate(config)
    assert isinstance(gate, RemoteBudgetGate) and gate.retry_seconds == 1.5
    gate.close()
    for bad in ("-1", "0", "7200", '"soon"'):
        toml.write_text(head + budget + f"retry_seconds = {bad}\n", encoding="utf-8")
        with pytest.raises(ParticipantConfigInvalid, match="budget.retry_seconds"):
            load_participant_config(toml)

"""One participant's node: ``participant.toml``, state directory and handler, per message.

The ClientApp (:mod:`secure_fed.deploy.flower.client_app`) may run in a fresh
process for every message, so :meth:`ParticipantNode.open` rebuilds the
participant each time from what does not change -- ``participant.toml``, the
federation settings the server sends, the participant's position in the plan
-- with :func:`~secure_fed.federation.builders.build_participant` (the same
function the in-process federation uses: same seeds and rows, same
participant), then restores the model and progress from the state directory.

* :meth:`ParticipantNode.handle_round` answers a round config with the signed
  envelope; a round whose envelope is on disk is answered with it (no
  retraining, no second charge); before training it releases the node's own
  stale reservations (made by a process that died or whose commit failed:
  :meth:`~secure_fed.deploy.participant_state.BudgetRecorder.release_stale`),
  through the ledger's audited abort;
* :meth:`ParticipantNode.handle_publication` distills once per round and
  checkpoints the model.

With ``[notice]`` in ``participant.toml`` the node sends the round's opening
gatekeeper (the key authority in ``ckks``, the helper in ``shares``) its signed
upload notice before the envelope leaves (:func:`post_notice`;
:mod:`secure_fed.secure.upload_notices`): from then on no roster of the round may
leave it out. A refused notice (late, or the gatekeeper unreachable) is raised and
the node sends no upload; a resent envelope's notice already recorded is fine.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from crypto.sm import SM2PrivateKey
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.config_errors import ParticipantConfigInvalid, PublicSetMismatch
from secure_fed.deploy.keys import MANIFEST, load_participant
from secure_fed.deploy.node_audit import attach_audit, node_audit
from secure_fed.deploy.node_ledger import open_node_ledger
from secure_fed.deploy.participant_config import ParticipantConfig
from secure_fed.deploy.participant_state import BudgetRecorder, ParticipantState
from secure_fed.deploy.remote_budget import RemoteBudgetGate
from secure_fed.deploy.server_config import config_from_settings
from secure_fed.deploy.tls import ClientTLS
from secure_fed.deploy.transport import RemoteParty
from secure_fed.errors import UploadNoticeDuplicate
from secure_fed.federation.aggregator_builder import private_parts
from secure_fed.federation.builders import build_participant
from secure_fed.federation.config import ASSET_ID, FederationConfig, plan_participants
from secure_fed.federation.handlers import ParticipantHandler
from secure_fed.federation.messages import decode_publication
from secure_fed.federation.participant import upload_notice
from secure_fed.federation.stages import RoundConfig
from secure_fed.learning.budget_gate import BudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND
from secure_fed.learning.tabular import read_table
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.mode import UploadEncoder
from secure_fed.secure.protocol.upload_notice import NOTICE_PATH

__all__ = ["NodeData", "ParticipantNode", "load_node_data", "post_notice"]

#: The gatekeeper that opens each mode's values (takes its participants' notices).
_NOTICE_PARTY = {"ckks": "key_authority", "shares": "helper"}

_log = logging.getLogger(__name__)

_LABEL = re.compile(r"^r(\d+)")

#: Largest publication a node accepts (the participant's own limit).
_MAX_PUBLICATION = 64 * 1024 * 1024


class NodeData:
    """A participant's private rows and the public set, as its models see them."""

    def __init__(
        self, *, x: np.ndarray, y: np.ndarray, public_x: np.ndarray, num_classes: int
    ) -> None:
        self.x, self.y, self.public_x, self.num_classes = x, y, public_x, num_classes
        self.input_shape: tuple[int, ...] = tuple(int(d) for d in public_x.shape[1:])


def load_node_data(config: ParticipantConfig, federation: FederationConfig, index: int) -> NodeData:
    """Load the participant's private rows and public set, the public set checked by SM3 first.

    Built-in data: the participant's share of the federation's Dirichlet split
    (exactly the in-process federation's rows). Own table: every row is private;
    labels are numbered by ``data.classes``.

    Raises
    ------
    ParticipantConfigInvalid
        If the table cannot be read or holds a label outside ``data.classes``.
    PublicSetMismatch
        If the public set's SM3 differs from ``public.sm3``.
    """
    if config.builtin:
        task = load_task(config.builtin, seed=federation.seed)
        public = config.load_public(task.public_x)
        rows = private_parts(task, federation)[index]
        return NodeData(
            x=task.private_x[rows],
            y=task.private_y[rows],
            public_x=public,
            num_classes=task.num_classes,
        )
    public = config.load_public()
    x, y = _read_own_table(config)
    if x.shape[1:] != public.shape[1:]:
        raise ParticipantConfigInvalid(
            f"{config.source}: data.path has {x.shape[1:]} features, the public set "
            f"{public.shape[1:]}",
            field="data.path",
        )
    return NodeData(x=x, y=y, public_x=public, num_classes=len(config.classes))


def _read_own_table(config: ParticipantConfig) -> tuple[np.ndarray, np.ndarray]:
    path = config.data_path
    assert path is not None  # load_participant_config: data.path or data.builtin
    try:
        frame = read_table(path)
        labels = frame.pop(config.label_column).astype(str).to_numpy()
        x = frame.to_numpy(dtype=np.float32)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise ParticipantConfigInvalid(
            f"{config.source}: data.path {path} cannot be read with label column "
            f"{config.label_column!r}: {exc}",
            field="data.path",
        ) from None
    numbering = {label: k for k, label in enumerate(config.classes)}
    unknown = sorted(set(labels) - set(numbering))
    if unknown:
        raise ParticipantConfigInvalid(
            f"{config.source}: data.path has labels {unknown[:5]} not in data.classes",
            field="data.classes",
        )
    if not np.isfinite(x).all():
        raise ParticipantConfigInvalid(
            f"{config.source}: data.path has missing or infinite features", field="data.path"
        )
    return x, np.array([numbering[label] for label in labels], dtype=np.int64)


def _budget_gate(config: ParticipantConfig) -> PrivacyLedger | RemoteBudgetGate:
    """Return the gate DP-SGD charges: the ledger's API (remote gate) or the node's own ledger.

    The node's own ledger audits the budget it sets (:mod:`secure_fed.deploy.node_ledger`).
    The remote gate retries an API that does not answer for ``budget.retry_seconds``.
    """
    if config.api_url:
        assert config.token_file is not None  # load_participant_config: api_url needs it
        return RemoteBudgetGate.from_token_file(
            token_file=config.token_file,
            base_url=config.api_url,
            ca_file=config.ca_file,
            participant_id=config.participant_id,
            retry_seconds=config.retry_seconds,
        )
    return open_node_ledger(config)  # a new budget is audited in the ledger's own log


def _round_of(label: str) -> int:
    """Return the round number of a ledger round label (``r3``, ``r3-label-prior``)."""
    found = _LABEL.match(label)
    return int(found.group(1)) if found else 0


def _receipts(config: ParticipantConfig, gate: BudgetGate) -> Callable[[str], bytes] | None:
    """Return the fetcher of the ledger's budget receipts (API only; None for a local ledger).

    A receipt the API does not give raises the ledger's error (the handler then
    uploads without one, which the aggregator refuses and audits).
    """
    if not isinstance(gate, RemoteBudgetGate):
        return None
    pid = config.participant_id
    return lambda label: gate.receipt(participant_id=pid, asset_id=ASSET_ID, round_id=label)


def _keys(
    config: ParticipantConfig, mode: str, shape: tuple[int, int]
) -> tuple[SM2PrivateKey, str, UploadEncoder]:
    """Return the signing key, the envelope params and the encoder the mode needs.

    The key ceremony's participant directory (``party.json``) serves every mode;
    in ``plaintext`` mode a folder with ``signing-key.pem`` serves too.
    """
    if (config.key_dir / MANIFEST).exists():
        keys = load_participant(config.key_dir)
        if (keys.participant_id, keys.mode, tuple(keys.shape)) != (
            config.participant_id,
            mode,
            shape,
        ):
            raise ParticipantConfigInvalid(
                f"{config.source}: keys.dir holds keys of {keys.participant_id!r} for mode "
                f"{keys.mode!r} and shape {keys.shape}; the federation runs {mode!r} at {shape}",
                field="keys.dir",
            )
        key: SM2PrivateKey = keys.signing_key
        return key, keys.params, keys.encoder(bound=PUBLIC_LOGIT_BOUND)
    if mode != "plaintext":
        raise ParticipantConfigInvalid(
            f"{config.source}: keys.dir has no {MANIFEST}; mode {mode!r} needs the key "
            "ceremony's participant directory",
            field="keys.dir",
        )
    path = config.key_dir / "signing-key.pem"
    try:
        key = SM2PrivateKey.from_pem(path.read_bytes(), passphrase=None)
    except (OSError, ValueError) as exc:
        raise ParticipantConfigInvalid(
            f"{config.source}: keys.dir has no readable signing-key.pem: {exc}", field="keys.dir"
        ) from None
    deployment = SecureDeployment.create(
        mode=mode, shape=shape, participant_ids=[config.participant_id], min_participants=1
    )
    return (
        key,
        deployment.params,
        deployment.encoder(config.participant_id, bound=PUBLIC_LOGIT_BOUND),
    )


def post_notice(notice: bytes, *, url: str, tls: ClientTLS, timeout: float = 30.0) -> bytes:
    """POST a signed upload notice to the gatekeeper at ``url``; return its acknowledgement.

    Raises
    ------
    UploadNoticeMalformed, UploadNoticeForged, UploadNoticeRound, UploadNoticeDuplicate
        The gatekeeper's refusal, as the same typed error.
    PartyUnavailable, PartyReplyInvalid
        The gatekeeper is unreachable or answered something else.
    """
    channel = RemoteParty(url, NOTICE_PATH, tls=tls, timeout=timeout)
    try:
        return channel(notice)
    finally:
        channel.close()


class ParticipantNode:
    """A participant rebuilt from its files for one message (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ParticipantConfig,
        handler: ParticipantHandler,
        state: ParticipantState,
        notice_party: str | None = None,
        notice_key: SM2PrivateKey | None = None,
    ) -> None:
        self.config, self.handler, self.state = config, handler, state
        self.notice_party, self._notice_key = notice_party, notice_key
        self.budget: BudgetRecorder | None = None

    @classmethod
    def open(
        cls, config: ParticipantConfig, *, settings: dict[str, Any], index: int
    ) -> ParticipantNode:
        """Build the participant at ``index`` of the plan the server's ``settings`` describe.

        Raises
        ------
        ParticipantConfigInvalid, PublicSetMismatch, ParticipantStateInvalid
            For a bad file, public set or state directory.
        FederationConfigInvalid
            If the server's settings are invalid.
        """
        # its own DP goal: epsilon and delta over its own [dp] rounds (room for retried rounds)
        federation = config_from_settings(
            settings, epsilon=config.epsilon, delta=config.delta, rounds=config.dp_rounds
        )
        planned = plan_participants(federation)[index]
        if planned.participant_id != config.participant_id:
            raise ParticipantConfigInvalid(
                f"{config.source}: the server lists {planned.participant_id!r} at position "
                f"{index}, this node is {config.participant_id!r}",
                field="participant.id",
            )
        data = load_node_data(config, federation, index)
        state = ParticipantState(directory=config.state_dir, participant_id=config.participant_id)
        real_gate = _budget_gate(config)
        gate = BudgetRecorder(gate=real_gate, state=state, round_of=_round_of)
        key, params, encoder = _keys(
            config, federation.mode, (len(data.public_x), data.num_classes)
        )
        handler = build_participant(
            federation,
            planned=planned,
            index=index,
            x=data.x,
            y=data.y,
            public_x=data.public_x,
            input_shape=data.input_shape,
            num_classes=data.num_classes,
            budget=gate,
            encoder=encoder,
            params=params,
            signing_key=key,
            receipts=_receipts(config, real_gate),
            insecure_noise=config.insecure_seeded_noise,
            audit=node_audit(
                config,
                public_x=data.public_x,
                num_classes=data.num_classes,
                delta=federation.delta,
            )
            if federation.private
            else None,
        )
        attach_audit(handler.participant.trainer, config, real_gate)
        state.restore(handler)
        party = _NOTICE_PARTY.get(federation.mode)
        if config.notice_url and party is None:
            raise ParticipantConfigInvalid(
                f"{config.source}: mode {federation.mode!r} has no gatekeeper to notice",
                field="notice.url",
            )
        node = cls(
            config=config,
            handler=handler,
            state=state,
            notice_party=party if config.notice_url else None,
            notice_key=key,
        )
        node.budget = gate
        return node

    def handle_round(self, round_config: RoundConfig) -> bytes:
        """Return the signed envelope of the round: the one on disk, or a freshly trained one.

        Raises
        ------
        PublicSetMismatch
            If the round names another public set than the node holds.
        SecureFedError
            Whatever private training, encoding or sealing refuse.
        """
        rid = round_config.round_id
        kept = self.state.envelope(rid)
        if kept is not None:
            _log.info("round %d: resending the envelope made before (no retraining)", rid)
            self._notice(kept, resent=True)
            return kept
        if round_config.public_set_sm3 != self.config.public_sm3:
            raise PublicSetMismatch(
                f"round {rid} names public set {round_config.public_set_sm3}, "
                f"{self.config.participant_id!r} holds {self.config.public_sm3}",
                field="public.sm3",
            )
        if self.budget is not None:  # before reserving: what a dead process held is free again
            released = self.budget.release_stale()
            if released:
                _log.warning("round %d: released %d stale reservation(s)", rid, len(released))
        envelope = self.handler.handle_round(round_config)
        report = self.handler.report
        self.state.checkpoint(self.handler, round_id=rid, phase="trained")
        self.state.update_record(
            rid,
            trained=bool(report is not None and report.trained),
            epsilon_spent=None if report is None else report.epsilon_spent,
            refused_reason=None if report is None else report.refused_reason,
        )
        self.state.save_envelope(rid, envelope)
        self._notice(envelope)
        return envelope

    def _notice(self, envelope: bytes, *, resent: bool = False) -> None:
        """Send the envelope's signed upload notice before the envelope leaves (``[notice]``)."""
        c = self.config
        if self.notice_party is None or self._notice_key is None:
            return
        notice = upload_notice(
            envelope,
            key=self._notice_key,
            party=self.notice_party,
            receipt_required=self.handler.receipts is not None,
        )
        if notice is None:  # no budget receipt: refused anyway, and not noticed
            return
        assert c.notice_ca is not None
        tls = ClientTLS(ca=c.notice_ca, cert=c.notice_cert, key=c.notice_key)
        try:
            post_notice(notice, url=c.notice_url, tls=tls)
        except UploadNoticeDuplicate:
            if not resent:
                raise
            _log.info("the notice of the resent envelope was recorded before")

    def handle_publication(self, publication: bytes) -> dict[str, Any]:
        """Distill from the publication once per round; return what the node did.

        Raises
        ------
        UploadMalformed
            If the publication bytes are malformed or of another shape.
        """
        rid = decode_publication(publication, max_bytes=_MAX_PUBLICATION).round_id
        if self.state.record(rid).get("distilled"):
            return {"round_id": rid, "distilled": False, "reason": "already distilled"}
        temperature = self.handler.handle_publication(publication)
        self.state.checkpoint(self.handler, round_id=rid, phase="distilled")
        self.state.update_record(rid, distilled=True, temperature=temperature)
        return {"round_id": rid, "distilled": True, "temperature": temperature}

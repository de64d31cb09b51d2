r"""The participant's Flower ClientApp: Flower messages in, :class:`ParticipantNode` calls out.

Each SuperNode names its ``participant.toml`` in its node config::

    flower-supernode --superlink 127.0.0.1:9092 --port 9094 \
        --node-config 'participant-config="/srv/hospital-1/participant.toml"'

Every message rebuilds the participant from its files
(:meth:`~secure_fed.deploy.participant_node.ParticipantNode.open`), since the
SuperNode may run the ClientApp in a fresh process per message. A refusal
(budget, public set, configuration) is answered with its error code and
reason, never with a Python traceback; the ServerApp records the node as
having sent no upload.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from privacy_ledger.errors import LedgerError
from secure_fed.deploy.flower.messages import pack, unpack_bytes, unpack_json
from secure_fed.deploy.participant_config import node_config_path, read_participant_id
from secure_fed.errors import SecureFedError, UploadMalformed

if TYPE_CHECKING:
    from secure_fed.deploy.participant_node import ParticipantNode

__all__ = ["ConfigFile", "app", "make_client_app", "node_config_file"]

_log = logging.getLogger(__name__)

#: Finds a node's ``participant.toml`` from its Flower context.
ConfigFile = Callable[[Context], Path]


def node_config_file(context: Context) -> Path:
    """Return the ``participant-config`` path of the SuperNode's node config."""
    return node_config_path(context.node_config.get("participant-config"))


def _refusal(message: Message, exc: SecureFedError | LedgerError) -> Message:
    _log.warning("refused: %s", exc)
    return Message(pack({"code": exc.code, "reason": exc.message}), reply_to=message)


def _open(config_file: Path, fields: dict[str, Any]) -> ParticipantNode:
    # torch, Opacus and TenSEAL load here, in the processes that train or distill only.
    from secure_fed.deploy.participant_config import load_participant_config
    from secure_fed.deploy.participant_node import ParticipantNode

    config = load_participant_config(config_file)
    settings, index = fields.get("settings"), fields.get("index")
    if not isinstance(settings, dict) or not isinstance(index, int):
        raise UploadMalformed("the round message lacks the federation settings or the index")
    return ParticipantNode.open(config, settings=settings, index=index)


def make_client_app(config_file: ConfigFile = node_config_file) -> ClientApp:
    """Return a ClientApp whose nodes find their ``participant.toml`` with ``config_file``."""
    client = ClientApp()

    @client.query("secure_fed_hello")
    def hello(message: Message, context: Context) -> Message:
        """Answer with the node's participant id (nothing heavy is loaded for this)."""
        try:
            pid = read_participant_id(config_file(context))
        except (SecureFedError, LedgerError) as exc:
            return _refusal(message, exc)
        return Message(pack({"participant_id": pid}), reply_to=message)

    @client.train("secure_fed_round")
    def train_round(message: Message, context: Context) -> Message:
        """Distill from the previous round's publication if it came, train, answer the upload."""
        from secure_fed.federation.stages import RoundConfig

        try:
            fields = unpack_json(message.content)
            round_config = RoundConfig.from_dict(fields.get("round") or {})
            node = _open(config_file(context), fields)
            previous = unpack_bytes(message.content)
            distilled = None if previous is None else node.handle_publication(previous)
            envelope = node.handle_round(round_config)
        except (SecureFedError, LedgerError) as exc:
            return _refusal(message, exc)
        reply = {"round_id": round_config.round_id, "distilled": distilled}
        return Message(pack(reply, envelope), reply_to=message)

    @client.evaluate("secure_fed_publication")
    def publication(message: Message, context: Context) -> Message:
        """Distill from the last round's publication; answer with what was done."""
        try:
            fields = unpack_json(message.content)
            payload = unpack_bytes(message.content)
            if payload is None:
                raise UploadMalformed("the publication message carries no bytes")
            done = _open(config_file(context), fields).handle_publication(payload)
        except (SecureFedError, LedgerError) as exc:
            return _refusal(message, exc)
        return Message(pack(done), reply_to=message)

    return client


#: The ClientApp ``flwr run`` starts on every SuperNode.
app = make_client_app()

"""A Flower ``Grid`` that hands each message to the real ClientApp in this process.

Drives :func:`secure_fed.deploy.flower.server_app.run_federation` without a
SuperLink or SuperNodes: node ``n`` reads ``nodes[n]`` (its ``participant.toml``)
and answers with :func:`secure_fed.deploy.flower.client_app.make_client_app`'s
ClientApp, the one every SuperNode runs (call ``run_federation`` inside
:meth:`LoopbackGrid.serving`). ``kill`` stands in for a SIGKILL of the ServerApp:
the first pushed message it matches raises :class:`ServerAppKilled` before
anything of that batch is delivered (the messages are still recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from flwr.app import Context, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from secure_fed.deploy.flower.client_app import make_client_app
from secure_fed.deploy.flower.messages import unpack_bytes, unpack_json


class ServerAppKilled(Exception):
    """The ServerApp died here (the test's stand-in for a SIGKILL)."""


@dataclass(frozen=True)
class Sent:
    """One message the ServerApp pushed: type, group, node, JSON fields and byte payload."""

    message_type: str
    group_id: str
    node_id: int
    fields: dict[str, Any]
    payload: bytes | None


class LoopbackGrid(Grid):
    """Nodes ``nodes`` (node id -> ``participant.toml``), answered in process."""

    def __init__(
        self, nodes: dict[int, Path], *, kill: Callable[[Message], bool] | None = None
    ) -> None:
        self.nodes, self.kill = dict(nodes), kill
        self.client = make_client_app(lambda context: self.nodes[context.node_id])
        self.sent: list[Sent] = []
        self.replies: dict[str, Message] = {}
        self._run = Run.create_empty(1)

    @contextmanager
    def serving(self) -> Iterator[LoopbackGrid]:
        """Run the ServerApp's code as Flower's runtime does: this run, the SuperLink's node.

        Flower keeps the task's identity in class attributes; they are restored after.
        """
        kept = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
        TaskIdentity.task_id, TaskIdentity.run_id = 1, self._run.run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID
        try:
            yield self
        finally:
            TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = kept

    def set_run(self, run: Run) -> None:
        """Keep ``run``."""
        self._run = run

    @property
    def run(self) -> Run:
        """The run."""
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Build a message (Flower's deprecated helper)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """Every node."""
        return list(self.nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Record ``messages`` and answer each with the ClientApp; return their ids."""
        batch = list(messages)
        for message in batch:
            self.sent.append(
                Sent(
                    message_type=message.metadata.message_type,
                    group_id=message.metadata.group_id,
                    node_id=message.metadata.dst_node_id,
                    fields=unpack_json(message.content),
                    payload=unpack_bytes(message.content),
                )
            )
        if self.kill is not None and any(self.kill(m) for m in batch):
            raise ServerAppKilled("the ServerApp was killed while pushing this batch")
        ids = []
        for message in batch:
            message.metadata.__dict__["_message_id"] = str(uuid4())
            node = message.metadata.dst_node_id
            context = _context(node, self._run.run_id)
            self.replies[message.metadata.message_id] = self.client(message, context)
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Return (and forget) the replies to ``message_ids``."""
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push, then pull every reply (all are there at once)."""
        return self.pull_messages(self.push_messages(messages))

    def of_type(self, message_type: str) -> list[Sent]:
        """The pushed messages of ``message_type``, in order."""
        return [s for s in self.sent if s.message_type == message_type]


def _context(node_id: int, run_id: int) -> Context:
    """A node's Flower context (no node config: the grid maps node ids to files)."""
    return Context(
        run_id=run_id, node_id=node_id, node_config={}, state=RecordDict(), run_config={}
    )

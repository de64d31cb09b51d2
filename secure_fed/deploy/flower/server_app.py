r"""The aggregator operator's Flower ServerApp: rounds over the Grid, bytes to the aggregator.

Started by ``flwr run`` against the operator's SuperLink, with the path of
``server.toml`` in the run config::

    flwr run secure_fed/deploy/flower/app <connection> \
        --run-config 'server-config="/etc/secure-fed/server.toml"'

(:func:`secure_fed.deploy.flower.app_dir` returns the installed app folder.)

What it does, in order:

1. builds the aggregator from ``server.toml``, aborts every round a
   previous ServerApp left unfinished in the store and reads back the newest
   published round's publication (checked by SM3 against the store and the
   audit log; a mismatch stops the run with ``StoredPublicationInvalid``), to
   send it again: a restarted ServerApp does not know which nodes received it;
2. asks every connected node who it is (``query.secure_fed_hello``) until all
   participants of ``server.toml`` answered or ``server.join_timeout`` passed;
3. per round id still to run: opens the round, sends the round config to every
   participant's node (to each node that answered the previous round, with that
   round's publication, which the node distills from before it trains: one
   message, one ClientApp process per node and round), hands each envelope to
   the aggregator as it arrives, records the nodes that sent nothing before the
   deadline as dropouts (``participant.dropped``) and finishes the round (it
   publishes while at least ``min_participants`` uploads were accepted, else it
   aborts). In ckks mode the aggregator forwards each envelope it accepted to the
   verifier and obtains the verifier's attestation before each decryption request
   (``[parties] verifier_url``; a refusal aborts the round). A round aborted for an
   infrastructure failure only (a party service or the participants' budget API could
   not be reached: :func:`~secure_fed.deploy.aggregator_node.is_infrastructure_failure`)
   is run again as a new round with the next id (``round.retried``) after a wait that
   doubles from ``[federation] retry_delay`` up to 60 s per attempt; an attempt whose
   wait ends with the failed party's ``/healthz`` still not answering opens nothing. At
   most ``[federation] max_retries`` attempts over the federation (a restarted ServerApp
   counts the rounds already run again); a retried round does not count against
   ``federation.rounds``. Any other
   abort (a refusal, an invalid upload, too few uploads without such a cause) is final;
4. sends the last round's publication to every node that answered it, which
   distills; after a restart with no round left to run, the publication read
   back in step 1 goes out alone.

The first round after a restart carries the read-back publication to the
nodes whose uploads that round accepted (the store keeps those, not every
node that answered). A node distills a round's publication at most once: a
copy it already distilled is acknowledged, nothing more.

When fewer rounds than ``federation.rounds`` were published at the end (a round
lost to a final abort, or the retries exhausted: then nothing more runs), the run
ends with :class:`RoundsNotPublished`; Flower marks the run ``finished:failed``.

No protocol logic lives here: the handlers decide; this module moves bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from secure_fed.deploy.aggregator_node import AggregatorNode, is_infrastructure_failure
from secure_fed.deploy.config_errors import ServerConfigInvalid
from secure_fed.deploy.flower.messages import (
    HELLO,
    PUBLICATION,
    ROUND,
    pack,
    unpack_bytes,
    unpack_json,
)
from secure_fed.deploy.server_config import load_server_config
from secure_fed.errors import DeploymentFailed, SecureFedError, TooFewParticipants

__all__ = [
    "MAX_RETRY_WAIT",
    "Outcome",
    "RoundsNotPublished",
    "app",
    "make_server_app",
    "resumed",
    "run_config_file",
    "run_federation",
]

_log = logging.getLogger(__name__)

#: Seconds between two pulls of replies from the SuperLink.
POLL_SECONDS = 0.5

#: Seconds after which a node that has not answered ``HELLO`` is asked again.
HELLO_RETRY_SECONDS = 30.0

#: The longest single wait before a retried round (the wait doubles up to it).
MAX_RETRY_WAIT = 60.0


class RoundsNotPublished(DeploymentFailed):
    """A federation run ended with fewer published rounds than ``federation.rounds``.

    The message says how many of how many were published and how each round of
    the run ended; ``published``, ``wanted`` and ``outcomes`` hold the same.
    """

    code = "DEPLOY_ROUNDS_NOT_PUBLISHED"

    def __init__(self, *, published: int, wanted: int, outcomes: dict[int, str], why: str) -> None:
        self.published, self.wanted, self.outcomes = published, wanted, dict(outcomes)
        ended = "; ".join(f"round {rid}: {text}" for rid, text in outcomes.items())
        super().__init__(
            f"{published} of {wanted} configured rounds published ({why})"
            + (f"; {ended}" if ended else "")
        )


def run_config_file(context: Context) -> Path:
    """Return the ``server-config`` path of the run config.

    Raises
    ------
    ServerConfigInvalid
        If the run was started without it.
    """
    path = context.run_config.get("server-config")
    if not isinstance(path, str) or not path:
        raise ServerConfigInvalid(
            "the run needs --run-config 'server-config=\"/path/server.toml\"'",
            field="server-config",
        )
    return Path(path)


def make_server_app(config_file: Callable[[Context], Path] = run_config_file) -> ServerApp:
    """Return a ServerApp that runs the federation ``config_file(context)`` describes."""
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        """Run the federation of ``server.toml``."""
        run_federation(grid, AggregatorNode.open(load_server_config(config_file(context))))

    return server


#: The ServerApp ``flwr run`` starts.
app = make_server_app()


def run_federation(
    grid: Grid,
    node: AggregatorNode,
    *,
    sleep: Callable[[float], None] = time.sleep,
    probe: Callable[[str], bool] | None = None,
) -> dict[int, str]:
    """Run the rounds still to run; return ``{round id: published | aborted: reason}``.

    A round aborted for an infrastructure failure is run again as the next
    round id (see the module docstring), after ``sleep`` waits; ``probe(url)``
    checks the failed party's health (default: ``GET <url>/healthz``).

    Raises
    ------
    RoundsNotPublished
        When fewer than ``federation.rounds`` rounds were published at the end;
        after the retries are exhausted, no further round runs.
    """
    for rid in node.abort_unfinished():
        _log.warning("round %d was left unfinished and is aborted", rid)
    last = resumed(node)
    carried = last  # the newest published round, carried to the next round's nodes
    members = discover(grid, node)
    outcomes: dict[int, str] = {}
    left, retried = node.rounds_left(), len(node.retried_rounds())
    rid = node.last_round_id()
    exhausted = ""
    while left > 0:
        rid += 1
        last = run_round(grid, node, members, rid, previous=carried)
        outcomes[rid] = last.text
        _log.info("round %d: %s", rid, last.text)
        if last.publication is not None:
            carried = last
        if last.cause is None:  # published, or aborted for good: the round counts
            left -= 1
            continue
        ready = False
        while not ready and retried < node.config.max_retries:
            retried += 1
            ready = _await_recovery(node, last.cause, retried, sleep=sleep, probe=probe)
        if not ready:
            exhausted = f"round {rid} was not retried: {node.config.max_retries} retries used"
            _log.error("the run stops: %s", exhausted)
            break
        node.record_retry(rid + 1, retries=rid, reason=last.cause, attempt=retried)
    if last.publication is not None:
        acks = send_publication(grid, node, members, last)
        _log.info("%d of %d nodes acknowledged the last publication", acks, len(last.answered))
    getattr(node.audit, "sign_pending", lambda: None)()  # the run ends: every entry under a head
    published, wanted = node.published_rounds(), node.config.federation.rounds
    if published < wanted:
        raise RoundsNotPublished(
            published=published,
            wanted=wanted,
            outcomes=outcomes,
            why=exhausted or "a round aborted for a cause that is not retried",
        )
    return outcomes


def _await_recovery(
    node: AggregatorNode,
    cause: str,
    attempt: int,
    *,
    sleep: Callable[[float], None],
    probe: Callable[[str], bool] | None,
) -> bool:
    """Wait before retry ``attempt``; return whether the round should run again now.

    The wait is ``retry_delay`` doubled per attempt, at most ``MAX_RETRY_WAIT``.
    When the failed party is one of ``[parties]``, its health is checked after
    the wait: False while it does not answer (the attempt is spent without
    opening a round that would fail alike). A failure without a probe (the
    participants' budget API) is retried after the wait alone.
    """
    delay = min(node.config.retry_delay * 2 ** (attempt - 1), MAX_RETRY_WAIT)
    _log.warning("waiting %.1f s before retry %d (%s)", delay, attempt, cause)
    sleep(delay)
    url = node.party_url(cause)
    if url is None or (probe or _health_probe(node))(url):
        return True
    _log.warning("retry %d: %s does not answer its health check yet", attempt, url)
    return False


def _health_probe(node: AggregatorNode) -> Callable[[str], bool]:
    """``GET <url>/healthz`` with the aggregator's TLS files of ``[parties]``."""
    from secure_fed.deploy.supervisor import http_ready

    c = node.config
    cert = (c.client_cert, c.client_key) if c.client_cert and c.client_key else None
    return lambda url: http_ready(f"{url}/healthz", ca_file=c.ca_file, client_cert=cert)()


@dataclass(frozen=True)
class Outcome:
    """How a round ended: its text, its publication (None unless published), who answered.

    ``opened`` is False when the round could not even open (a party is down).
    ``cause`` is the abort reason when the round aborted for an infrastructure
    failure only (it is retried), else None.
    """

    text: str
    publication: bytes | None
    answered: frozenset[str]
    opened: bool = True
    cause: str | None = None


def resumed(node: AggregatorNode) -> Outcome:
    """Return the newest published round as an outcome, to send its publication again.

    Its ``answered`` are the nodes whose uploads the round accepted. An empty
    outcome when nothing was published yet.

    Raises
    ------
    StoredPublicationInvalid
        If the stored publication fails its integrity check.
    """
    published = node.last_publication()
    if published is None:
        return Outcome(text="", publication=None, answered=frozenset())
    _log.info("round %d's publication is read back to be sent again", published.round_id)
    return Outcome(text="published", publication=published.publication, answered=published.accepted)


def discover(grid: Grid, node: AggregatorNode) -> dict[str, int]:
    """Map participant ids to node ids, asking every node that connects (``HELLO``).

    Asks each node as it appears, and again every ``HELLO_RETRY_SECONDS`` while
    it has not answered (a SuperNode reconnecting after a SuperLink restart can
    lose a message), until every participant of ``server.toml`` answered or
    ``server.join_timeout`` passed.
    """
    wanted = set(node.config.federation.participant_ids or ())
    members: dict[str, int] = {}
    answered: set[int] = set()
    asked: dict[int, float] = {}
    pending: set[str] = set()
    end = time.monotonic() + node.config.join_timeout
    while wanted - set(members) and time.monotonic() < end:
        now = time.monotonic()
        due = [
            n
            for n in grid.get_node_ids()
            if n not in answered and now - asked.get(n, -HELLO_RETRY_SECONDS) >= HELLO_RETRY_SECONDS
        ]
        asked.update(dict.fromkeys(due, now))
        if due:
            hellos = [Message(pack(), n, HELLO, group_id="hello") for n in due]
            pending.update(grid.push_messages(hellos))
        for reply in grid.pull_messages(list(pending)) if pending else []:
            pending.discard(reply.metadata.reply_to_message_id)
            answered.add(reply.metadata.src_node_id)
            pid = _hello_id(reply, wanted)
            if pid is not None:
                members[pid] = reply.metadata.src_node_id
        time.sleep(POLL_SECONDS)
    missing = sorted(wanted - set(members))
    if missing:
        _log.warning("no node answered for %s; rounds go on without them", missing)
    return members


def _hello_id(reply: Message, wanted: set[str]) -> str | None:
    if reply.has_error():
        return None
    try:
        pid = unpack_json(reply.content).get("participant_id")
    except SecureFedError:
        return None
    return pid if isinstance(pid, str) and pid in wanted else None


def exchange(
    grid: Grid, messages: list[Message], *, timeout: float, on_reply: Any = None
) -> list[Message]:
    """Push ``messages`` and pull replies until all came or ``timeout`` passed.

    ``on_reply`` is called with each reply as it arrives (uploads are handed to
    the aggregator before the round's deadline, not after the slowest node).
    """
    if not messages:
        return []
    pending = set(grid.push_messages(messages))
    replies: list[Message] = []
    end = time.monotonic() + timeout
    while pending and time.monotonic() < end:
        for reply in grid.pull_messages(list(pending)):
            pending.discard(reply.metadata.reply_to_message_id)
            replies.append(reply)
            if on_reply is not None:
                on_reply(reply)
        if pending:
            time.sleep(POLL_SECONDS)
    return replies


def run_round(
    grid: Grid,
    node: AggregatorNode,
    members: dict[str, int],
    rid: int,
    *,
    previous: Outcome | None = None,
) -> Outcome:
    """Run round ``rid``: round config out (with ``previous``'s publication), envelopes in.

    A node that answered the previous round gets that round's publication in
    the same message and distills from it before it trains.
    """
    try:
        config = node.handler.open_round(node.round_config(rid))
    except SecureFedError as exc:  # e.g. the key authority is down: no round to collect for
        node.abort_round(rid, reason=f"{exc.code}: {exc.message}")
        return _aborted(f"aborted: {exc}", [exc.code], opened=False)
    plan = list(node.config.federation.participant_ids or ())
    by_node = {n: pid for pid, n in members.items()}
    answered: set[str] = set()
    base = {"round": config.to_dict(), "settings": node.settings}
    messages = [
        Message(
            pack({**base, "index": plan.index(pid)}, _carried(previous, pid)),
            n,
            ROUND,
            group_id=str(rid),
        )
        for pid, n in members.items()
    ]

    def on_reply(reply: Message) -> None:
        pid = by_node.get(reply.metadata.src_node_id)
        if pid is None:
            return
        answered.add(pid)
        _take_upload(node, rid, pid, reply)

    exchange(grid, messages, timeout=max(0.0, config.deadline - time.time()), on_reply=on_reply)
    for pid in sorted(set(plan) - answered):
        node.record_dropout(rid, pid, "no reply before the round's deadline")
    try:
        publication = node.handler.finish_round(rid)
    except TooFewParticipants as exc:  # the engine aborted the round itself
        return _aborted(f"aborted: {exc.message}", node.missed_codes(rid))
    except SecureFedError as exc:  # a party refused or failed: nothing is published
        node.abort_round(rid, reason=f"{exc.code}: {exc.message}")
        return _aborted(f"aborted: {exc}", [exc.code])
    return Outcome(text="published", publication=publication, answered=frozenset(answered))


def _aborted(text: str, codes: list[str | None], *, opened: bool = True) -> Outcome:
    """Return an aborted round's outcome, with ``cause`` when ``codes`` say infrastructure."""
    cause = text.removeprefix("aborted: ") if is_infrastructure_failure(codes) else None
    return Outcome(text=text, publication=None, answered=frozenset(), opened=opened, cause=cause)


def _carried(previous: Outcome | None, pid: str) -> bytes | None:
    """Return the previous round's publication for a node that answered that round."""
    if previous is None or previous.publication is None or pid not in previous.answered:
        return None
    return previous.publication


def send_publication(
    grid: Grid, node: AggregatorNode, members: dict[str, int], outcome: Outcome
) -> int:
    """Send ``outcome``'s publication to the nodes that answered its round; return the acks."""
    assert outcome.publication is not None
    plan = list(node.config.federation.participant_ids or ())
    messages = [
        Message(
            pack({"settings": node.settings, "index": plan.index(pid)}, outcome.publication),
            n,
            PUBLICATION,
            group_id="final",
        )
        for pid, n in members.items()
        if pid in outcome.answered  # a node that vanished mid-round is not waited for again
    ]
    return len(exchange(grid, messages, timeout=node.config.publication_timeout))


def _take_upload(node: AggregatorNode, rid: int, pid: str, reply: Message) -> None:
    """Hand one node's envelope to the aggregator; a node that sent none is a dropout."""
    if reply.has_error():
        node.record_dropout(rid, pid, f"the node failed: {reply.error.reason}")
        return
    try:
        envelope = unpack_bytes(reply.content)
        fields = unpack_json(reply.content)
    except SecureFedError as exc:
        node.record_dropout(rid, pid, f"malformed reply: {exc.message}")
        return
    if envelope is None:
        code = fields.get("code")
        node.record_dropout(
            rid,
            pid,
            f"sent no upload: {code}: {fields.get('reason')}",
            code=code if isinstance(code, str) else None,
        )
        return
    try:
        node.handler.handle_upload(envelope, round_id=rid)
    except SecureFedError as exc:  # the gate and the engine audit their refusals themselves
        _log.warning("round %d: upload of %s refused: %s", rid, pid, exc)

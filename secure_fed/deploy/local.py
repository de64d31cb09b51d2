"""``secure-fed deploy local``: a whole federation of real processes on 127.0.0.1.

:class:`LocalFederation` prepares a run directory
(:func:`secure_fed.deploy.local_files.prepare`: key ceremony, ledger, settings
files, one ``participant.toml`` per node) and starts, in order, each as its
own process under a :class:`~secure_fed.deploy.supervisor.Supervisor`, each
checked healthy before the next one starts:

1. the key authority (``secure-fed keyauthority serve``, mutual TLS);
2. the helper (``secure-fed helper serve``, shares mode only), or the verifier
   (``secure-fed verifier serve``, ckks mode: the key authority decrypts nothing it
   did not attest);
3. the REST API (``secure-fed api``: budgets over HTTPS, audit log, console);
4. the SuperLink (``flower-superlink``, TLS with the run's CA, SuperNode
   authentication on), then each participant's node public key from the key
   ceremony registered with it (``flwr supernode register``, one job each);
5. one SuperNode per participant (``flower-supernode``, its own
   ``participant.toml``, table and node key, its budget charged through the API);
6. the run (``flwr run`` of secure-fed's Flower app, ``server.toml`` in the
   run config), a job that ends when the rounds are done.

A service that exits -- the key authority, the helper, the verifier, the API, a
SuperNode -- is started again by the supervisor (:data:`SERVICE_RESTART`,
:data:`SUPERNODE_RESTART`: a growing delay, a bounded budget; each restart a line of
``<run>/supervisor.jsonl``); the parties reopen their state directories. The SuperLink
and the run are not restarted: their exit ends the run.

Logs: ``<run>/logs/<process>.log``. Every child is stopped (the run and the
SuperLink with the ServerApp first, then the others in reverse order, ``SIGTERM``
then ``SIGKILL``) when the run fails, when the caller stops it
(Ctrl-C: the command line turns ``SIGINT``/``SIGTERM`` into :meth:`stop`), or
when the supervisor's process dies.

:meth:`LocalFederation.resume` takes up a run whose driver was killed: every process
again on the directory's keys, state and ledger (``deploy-local.json`` holds the options
and ports; the driver holds ``deploy-local.lock`` while it runs), the round it cut run
again as a retry (:meth:`LocalFederation.carry_over`), then what is left of the rounds.

Insecure parts, by name: the try-out CA's key lies in ``<run>/keys/tls/ca``
on the same machine, and the keys are unencrypted PEM files (0600). See
``docs/deploy.md`` for one machine per party.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from secure_fed.deploy.api_service import CLI, api_spec
from secure_fed.deploy.local_files import (
    LocalLayout,
    LocalOptions,
    RunLock,
    check_ports_free,
    check_resume_options,
    prepare,
    read_run,
)
from secure_fed.deploy.node_auth import NODE_KEY, node_public_keys, register_argv
from secure_fed.deploy.supervisor import (
    ProcessFailed,
    ProcessSpec,
    Restart,
    RestartPolicy,
    Supervisor,
    free_port,
    http_ready,
    tcp_ready,
)

__all__ = ["LocalFederation", "RUN", "SERVICE_RESTART", "SUPERLINK", "SUPERNODE_RESTART"]

logger = logging.getLogger(__name__)

#: Name of the run job under the supervisor.
RUN = "run"
#: Name of the SuperLink under the supervisor (the nodes are registered once it is up).
SUPERLINK = "superlink"
#: Node registrations run at once (each a ``flwr`` process of its own).
REGISTER_BATCH = 8
#: How the key authority, the helper, the verifier and the API are restarted when
#: they exit: after 0.5 s, 1 s, 2 s ... at most 8 s, at most 5 times in 10 minutes.
SERVICE_RESTART = RestartPolicy(max_restarts=5, window=600.0, initial_delay=0.5, max_delay=8.0)
#: A participant's SuperNode: the same, and the SuperLink's refusal of a node it still
#: counts online (until two 30 s heartbeats are missed; Flower logs ``Exit Code: 305``
#: and the process exits with 1) retried every 10 s for up to 2 minutes without
#: spending the budget.
SUPERNODE_RESTART = dataclasses.replace(
    SERVICE_RESTART, busy_log=("Exit Code: 305",), busy_delay=10.0, busy_for=120.0
)


def _flower_app_dir() -> Path:
    from secure_fed.deploy.flower import app_dir  # imports flwr: only when a run starts

    return app_dir()


@dataclass(kw_only=True)
class LocalFederation:
    """A try-out federation of processes (see the module docstring).

    Parameters
    ----------
    options
        Participants, mode, rounds, run directory, database.
    python
        The interpreter the children run (``sys.executable`` of the caller).
    env
        The children's base environment (the caller's; ``SECURE_FED_*`` are dropped).
    adopt_orphans
        The supervisor adopts, stops and reaps what a dead child left behind
        (:class:`~secure_fed.deploy.supervisor.Supervisor`; the command line's
        choice: it makes the calling process its descendants' subreaper).
    on_restart
        Told of every restart of a service as the supervisor decides it (the
        command line prints it); each is also a line of ``<run>/supervisor.jsonl``.
    """

    options: LocalOptions
    python: str
    env: Mapping[str, str]
    adopt_orphans: bool = False
    on_restart: Callable[[Restart], None] | None = None
    layout: LocalLayout | None = None
    supervisor: Supervisor | None = field(default=None, repr=False)
    #: Started again on an existing run directory (:meth:`resume`), not prepared anew.
    resumed: bool = False
    lock: RunLock | None = field(default=None, repr=False)
    _carried: bool = field(default=False, repr=False)

    @classmethod
    def resume(
        cls,
        run_dir: Path,
        *,
        python: str,
        env: Mapping[str, str],
        given: Mapping[str, object] | None = None,
        adopt_orphans: bool = False,
        on_restart: Callable[[Restart], None] | None = None,
    ) -> LocalFederation:
        """Take up the run in ``run_dir`` again: its keys, state, ledger and ports.

        Nothing is written before every check passed: the directory holds a complete
        run (``deploy-local.json``), ``given`` options (participants, mode, rounds,
        max_retries, database_url) equal the stored ones, no driver holds its lock and
        its services' ports are free. Then the lock is taken. :meth:`start` starts every
        process on the stored files, :meth:`run` the rounds still to run
        (:meth:`carry_over`).

        Raises
        ------
        ResumeRefused
            ``DEPLOY_RESUME_REFUSED``: not a run directory of ``deploy local``, in use by a
            live run, or options that contradict it.
        """
        options, layout = read_run(run_dir)
        check_resume_options(options, dict(given or {}))
        lock = RunLock(layout.run_dir)
        lock.acquire()
        try:
            check_ports_free(options, layout)
        except BaseException:
            lock.release()
            raise
        federation = cls(
            options=options,
            python=python,
            env=env,
            adopt_orphans=adopt_orphans,
            on_restart=on_restart,
            layout=layout,
            resumed=True,
            lock=lock,
        )
        federation.prepare()
        return federation

    def _bin(self, name: str) -> str:
        candidate = Path(self.python).parent / name
        return str(candidate) if candidate.exists() else name

    def _env(self, **extra: str) -> dict[str, str]:
        clean = {k: v for k, v in self.env.items() if not k.startswith("SECURE_FED_")}
        return {**clean, **extra}

    def prepare(self) -> LocalLayout:
        """Write the run's files (keys, ledger, settings) once; return the layout."""
        if self.layout is None:
            self.layout = prepare(self.options)
            self.lock = RunLock(self.layout.run_dir)
            self.lock.acquire()  # a new directory: nobody else holds it
        if self.supervisor is None:
            self.supervisor = Supervisor(
                run_dir=self.layout.run_dir,
                adopt_orphans=self.adopt_orphans,
                on_restart=self.on_restart,
            )
        return self.layout

    def _party(self, layout: LocalLayout, party: str, port: int) -> ProcessSpec:
        cert, key = layout.tls(party)
        client = layout.tls("aggregator")
        return ProcessSpec(
            name=party,
            argv=[
                self.python,
                *CLI,
                party,
                "serve",
                "--keys",
                str(layout.keys / party),
                "--state",
                str(layout.run_dir / party),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--tls-cert",
                str(cert),
                "--tls-key",
                str(key),
                "--client-ca",
                str(layout.ca_file),
            ],  # fmt: skip
            env=self._env(),
            ready=http_ready(
                f"https://127.0.0.1:{port}/healthz", ca_file=layout.ca_file, client_cert=client
            ),
            ready_timeout=120.0,
            restart=SERVICE_RESTART,  # its state dir holds what must survive a restart
        )

    def _superlink(self, layout: LocalLayout) -> ProcessSpec:
        cert, key = layout.tls("superlink")
        return ProcessSpec(
            name=SUPERLINK,
            argv=[
                self._bin("flower-superlink"),
                "--enable-supernode-auth",
                "--ssl-ca-certfile",
                str(layout.ca_file),
                "--ssl-certfile",
                str(cert),
                "--ssl-keyfile",
                str(key),
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(layout.superlink_port),
                *self._superlink_state(layout),
            ],  # fmt: skip
            env=self._env(),
            ready=tcp_ready("127.0.0.1", layout.superlink_port),
            ready_timeout=120.0,
            stop_first=True,  # with it the ServerApp (its SuperExec's child): before the nodes
        )

    def _superlink_state(self, layout: LocalLayout) -> list[str]:
        if not self.options.superlink_database:
            return []  # Flower keeps the state in memory
        return ["--database", str(layout.run_dir / "superlink" / "superlink.db")]

    def _supernode(self, layout: LocalLayout, pid: str) -> ProcessSpec:
        toml = layout.participant_tomls[pid]
        return ProcessSpec(
            name=f"supernode-{pid}",
            argv=[
                self._bin("flower-supernode"),
                "--root-certificates",
                str(layout.ca_file),
                "--superlink",
                f"127.0.0.1:{layout.superlink_port}",
                "--auth-supernode-private-key",
                str(layout.keys / "participants" / pid / NODE_KEY),
                "--port",
                str(free_port()),
                "--node-config",
                f'participant-config="{toml}"',
            ],  # fmt: skip
            env=self._env(),
            cwd=toml.parent,
            restart=SUPERNODE_RESTART,  # meanwhile its participant is a dropout
        )

    def _run(self, layout: LocalLayout) -> ProcessSpec:
        return ProcessSpec(
            name=RUN,
            argv=[
                self._bin("flwr"),
                "run",
                str(_flower_app_dir()),
                "local",
                "--run-config",
                f'server-config="{layout.server_toml}"',
                "--stream",
            ],  # fmt: skip
            env=self._env(FLWR_HOME=str(layout.flwr_home)),
            expect_exit=True,
            stop_first=True,
        )

    def services(self) -> list[ProcessSpec]:
        """Return the long-running processes, in start order."""
        layout = self.prepare()
        specs = [self._party(layout, "keyauthority", layout.authority_port)]
        if self.options.mode == "shares":
            specs.append(self._party(layout, "helper", layout.helper_port))
        elif self.options.verifier:  # ckks: it recomputes every request before decryption
            specs.append(self._party(layout, "verifier", layout.verifier_port))
        api = api_spec(layout.api, python=self.python, env=self._env())
        specs.append(dataclasses.replace(api, restart=SERVICE_RESTART))
        specs.append(self._superlink(layout))
        specs += [self._supernode(layout, pid) for pid in layout.ids]
        return specs

    def start(self) -> None:
        """Prepare, then start every service (each healthy before the next).

        Raises
        ------
        ProcessFailed, ProcessNotReady
            A service did not start (every started one is stopped again).
        """
        specs = self.services()
        supervisor = self._supervisor()
        try:
            for spec in specs:
                supervisor.start(spec)
                if spec.name == SUPERLINK and not self._registered():
                    self.register_nodes()
        except BaseException:
            supervisor.stop_all()
            raise

    def _registered(self) -> bool:
        """Whether the SuperLink's database already holds the node keys (a resumed run)."""
        database = self.prepare().run_dir / "superlink" / "superlink.db"
        return self.resumed and self.options.superlink_database and database.is_file()

    def register_nodes(self) -> None:
        """Register every participant's node public key with the running SuperLink.

        One ``flwr supernode register`` job per participant (log
        ``logs/register-<id>.log``), :data:`REGISTER_BATCH` at a time, each waited
        for. A SuperLink whose state is in memory forgets them when it restarts:
        call this again after a restart.

        Raises
        ------
        ProcessFailed
            A registration failed (its log names Flower's refusal).
        """
        layout = self.prepare()
        keys = list(node_public_keys(layout.keys).items())
        for start in range(0, len(keys), REGISTER_BATCH):
            self._register(layout, keys[start : start + REGISTER_BATCH])

    def _register(self, layout: LocalLayout, keys: list[tuple[str, Path]]) -> None:
        supervisor = self._supervisor()
        env = self._env(FLWR_HOME=str(layout.flwr_home))
        for pid, public in keys:
            argv = register_argv(self._bin("flwr"), public, connection="local", name=pid)
            supervisor.start(
                ProcessSpec(name=f"register-{pid}", argv=argv, env=env, expect_exit=True)
            )
        for pid, _ in keys:
            name = f"register-{pid}"
            if supervisor.wait(name, timeout=120.0) != 0:
                raise supervisor.children[name].failure("registering its node key")

    def run(self, *, timeout: float | None = None, poll: Callable[[], None] | None = None) -> int:
        """Start the run job and wait for it; return its exit status.

        ``poll`` is called every half second while the run lasts (it may raise).

        Raises
        ------
        ProcessFailed
            A service died during the run, or the run did not end in ``timeout``.
        """
        supervisor = self._supervisor()
        if self.resumed and not self._carried:
            self.carry_over()
        supervisor.start(self._run(self.prepare()))
        try:
            return supervisor.wait(RUN, timeout=timeout, poll=poll)
        except ProcessFailed as failed:
            self.stop_round_driver()  # no round opens after this: the ledger's word is final
            raise failed.with_rounds(self.lost_rounds()) from None

    def carry_over(self) -> tuple[str, ...]:
        """Before a resumed run: end the rounds the stopped driver left open; return what it did.

        Each round the ledger holds unfinished is aborted (what the ServerApp does when it
        starts: nothing of it was released) and, while the federation has retries left
        (``max_retries``, counted over its ``round.retried`` events), audited as run again
        under the next round id (``round.retried``): the round a stopped driver cut is an
        infrastructure failure, and the participants' DP plans have room for it (their
        charge for it stands). With no retry left it stays aborted and counts as run, as
        for a restarted ServerApp. The resumed ServerApp then runs what is left of
        ``rounds``; published rounds are never run again.
        """
        from secure_fed.deploy.aggregator_node import AggregatorNode
        from secure_fed.deploy.server_config import load_server_config

        self._carried = True
        node = AggregatorNode.open(load_server_config(self.prepare().server_toml))
        done: list[str] = []
        try:
            for rid in node.abort_unfinished():
                used = len(node.retried_rounds())
                if used >= node.config.max_retries:
                    done.append(f"round {rid} aborted; not run again: {used} retries used")
                    continue
                new = node.last_round_id() + 1
                why = f"deploy local stopped while round {rid} ran; resumed"
                node.record_retry(new, retries=rid, reason=why, attempt=used + 1)
                done.append(f"round {rid} aborted; run again as round {new}")
        finally:
            getattr(node.audit, "sign_pending", lambda: None)()  # as a run's end does
            engine = getattr(node.audit, "engine", None)
            if engine is not None:
                engine.dispose()
        return tuple(done)

    def stop_round_driver(self) -> None:
        """Stop the run and the SuperLink with its ServerApp, before anything else stops.

        Once a SuperNode or a party service is gone the ServerApp would only open
        rounds that abort at once.
        """
        supervisor = self._supervisor()
        for name in (RUN, SUPERLINK):
            if name in supervisor.children:
                supervisor.stop(name)
        supervisor.stop_orphans()  # a ServerApp whose SuperLink died was adopted (if adopting)

    def lost_rounds(self) -> tuple[str, ...]:
        """``round N: <why>`` for every configured round without a publication in the ledger.

        Empty if the ledger cannot be read (the failure itself is the news then).
        """
        from secure_fed.deploy.local_report import lost_rounds, round_summaries

        try:
            stored = round_summaries(self.prepare().database_url)
        except Exception:  # noqa: BLE001 - a ledger we cannot read adds nothing to the failure
            logger.warning("cannot read the rounds from the ledger", exc_info=True)
            return ()
        return lost_rounds(stored, self.options.rounds)

    def round_stages(self) -> dict[str, str]:
        """Return the stage of every round stored in the ledger (``published``, ``aborted``...)."""
        from sqlalchemy import select

        from privacy_ledger.db import create_ledger_engine
        from privacy_ledger.models import RoundRow

        engine = create_ledger_engine(self.prepare().database_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(select(RoundRow.id, RoundRow.stage).order_by(RoundRow.id))
                return {str(r[0]): str(r[1]) for r in rows}
        finally:
            engine.dispose()

    def stop(self) -> None:
        """Stop every process: the run and the SuperLink first, then the rest in reverse order.

        Safe to call twice.
        """
        if self.supervisor is not None:
            self.supervisor.stop_all()
        if self.lock is not None:
            self.lock.release()  # after every child: the directory is free again

    def _supervisor(self) -> Supervisor:
        self.prepare()
        assert self.supervisor is not None
        return self.supervisor

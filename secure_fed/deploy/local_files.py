"""The files of a try-out federation on one machine: keys, ledger, API, server and nodes.

:func:`prepare` lays out a run directory for ``secure-fed deploy local``::

    <run>/keys/                 the key ceremony (secure_fed.deploy.keys.create_keys), TLS CA
    <run>/ledger.db             the ledger (unless a database URL is given)
    <run>/api/api.toml          the REST API's settings (0600)
    <run>/server/server.toml    the ServerApp's settings (Flower run config names it)
    <run>/nodes/<id>/           participant.toml, api-token (0600), state/
    <run>/keyauthority/, <run>/helper/, <run>/verifier/   the services' state directories
    <run>/superlink/            the SuperLink's database
    <run>/flwr/config.toml      FLWR_HOME of ``flwr run`` (the SuperLink connection)
    <run>/logs/<process>.log    one log per process (the supervisor's)
    <run>/deploy-local.json     the options and ports of the run (written last; --resume)
    <run>/deploy-local.lock     locked by the run's driver while it runs

Participants are ``hospital-1``, ``bank-1``, ``hospital-2``... on alternating
architectures, each with its Dirichlet share of a built-in task (``digits``)
and a budget of epsilon 8 at delta 1e-5 in the ledger; each charges it through
the API with its own participant token, and posts a signed upload notice before
each upload to the gatekeeper that opens the mode's values (the key authority in
ckks mode, the helper in shares mode) with a client certificate of the run's CA
(``keys/tls/<id>.pem``). Ports are chosen free on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privacy_ledger.api_tokens import ApiTokenStore
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.api_service import ApiEndpoint, write_api_config
from secure_fed.deploy.ceremony import read_sm2
from secure_fed.deploy.keys import create_keys, read_manifest
from secure_fed.deploy.supervisor import free_port
from secure_fed.deploy.tls import LocalCA
from secure_fed.errors import ConfigurationInvalid, FederationConfigInvalid
from secure_fed.federation.config import ASSET_ID, KINDS
from secure_fed.federation.participant import public_set_digest
from secure_fed.learning.data import load_task

__all__ = [
    "MANIFEST",
    "LocalLayout",
    "LocalOptions",
    "ResumeRefused",
    "RunLock",
    "check_ports_free",
    "check_resume_options",
    "participant_ids",
    "prepare",
    "read_run",
    "run_ports",
]

#: The run's own record of what ``deploy local`` prepared (options, ports): written last.
MANIFEST = "deploy-local.json"
#: Locked (``flock``) by the driver of the run for as long as it runs.
LOCK = "deploy-local.lock"
_MANIFEST_VERSION = 1

MODES = ("ckks", "shares")
ARCHITECTURES = ("mlp", "logreg")
_EVIDENCE_ROWS = 100


@dataclass(frozen=True, kw_only=True)
class LocalOptions:
    """What ``secure-fed deploy local`` runs.

    Raises
    ------
    FederationConfigInvalid
        A mode other than ckks or shares, fewer than 2 participants, or a bad number.
    """

    participants: int
    mode: str
    rounds: int
    run_dir: Path
    database_url: str | None = None
    builtin: str = "digits"
    seed: int = 0
    min_participants: int = 2
    epsilon: float = 8.0
    delta: float = 1e-5
    epochs_per_round: int = 1
    reply_timeout: float = 300.0
    #: Seconds the ServerApp waits before running again a round a failed service aborted
    #: (server.toml's ``[federation] retry_delay``; doubles per attempt, at most 60 s).
    retry_delay: float = 5.0
    #: Rounds the ServerApp runs again after an infrastructure failure (server.toml's
    #: ``[federation] max_retries``, in [0, 100]); each participant's DP plan has room
    #: for them (:attr:`dp_rounds`).
    max_retries: int = 3
    #: Keep the SuperLink's state in a SQLite file (restartable) rather than in memory.
    superlink_database: bool = True
    #: ckks: the key ceremony makes the verifier, the key authority pins it and the run
    #: starts it (``False``: no verifier, forgeries only detected afterwards; benchmarks).
    verifier: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise FederationConfigInvalid(f"mode: one of {', '.join(MODES)}, got {self.mode!r}")
        if not 2 <= self.participants <= 100:
            raise FederationConfigInvalid(f"participants: 2..100, got {self.participants!r}")
        if not 1 <= self.rounds <= 100:
            raise FederationConfigInvalid(f"rounds: 1..100, got {self.rounds!r}")
        if not 2 <= self.min_participants <= self.participants:
            raise FederationConfigInvalid(
                f"min_participants: 2..participants, got {self.min_participants!r}"
            )
        retries = self.max_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
            raise FederationConfigInvalid(f"max_retries: 0..100, got {retries!r}")
        delay = self.retry_delay
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 < delay <= 3600:
            raise FederationConfigInvalid(f"retry_delay: seconds in (0, 3600], got {delay!r}")

    @property
    def dp_rounds(self) -> int:
        """Private rounds of each participant's DP plan (``[dp] rounds``): ``rounds + max_retries``.

        A round aborted after the participants trained keeps their charge (it is not
        refunded) and is run again under the next id: a participant may train once per
        round id the federation can open, at most ``rounds + max_retries``. Its epsilon
        is split over that many rounds up front, the price of the retries, paid whether
        or not one happens.
        """
        return self.rounds + self.max_retries


@dataclass(frozen=True, kw_only=True)
class LocalLayout:
    """Where everything of a prepared run is, and its ports."""

    run_dir: Path
    keys: Path
    ids: tuple[str, ...]
    database_url: str
    api: ApiEndpoint
    server_toml: Path
    participant_tomls: dict[str, Path]
    flwr_home: Path
    superlink_port: int
    authority_port: int
    helper_port: int
    #: The verifier service's port (ckks mode: it attests every decryption request).
    verifier_port: int = 0

    @property
    def ca_file(self) -> Path:
        """The try-out CA every TLS client of the run trusts."""
        return self.keys / "tls" / "ca.pem"

    def tls(self, name: str) -> tuple[Path, Path]:
        """Return the certificate and key of ``name`` (superlink, api, aggregator, ...)."""
        return self.keys / "tls" / f"{name}.pem", self.keys / "tls" / f"{name}.key"


def participant_ids(count: int) -> list[str]:
    """``hospital-1``, ``bank-1``, ``hospital-2``, ``bank-2``, ... (``count`` of them)."""
    return [f"{KINDS[k % len(KINDS)]}-{k // len(KINDS) + 1}" for k in range(count)]


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _q(value: object) -> str:
    text = str(value)
    if any(c in text for c in '"\\\n'):
        raise FederationConfigInvalid(f"run_dir: a path not representable in TOML: {text!r}")
    return f'"{text}"'


def _public_set(options: LocalOptions) -> tuple[str, tuple[int, int]]:
    task = load_task(options.builtin, seed=options.seed)
    classes = int(task.private_y.max()) + 1
    return public_set_digest(task.public_x), (int(task.public_x.shape[0]), classes)


def _seed_ledger(
    options: LocalOptions, layout_keys: Path, url: str, ids: list[str], nodes: Path
) -> None:
    """Register participants and budgets; write each participant's API token (0600)."""
    manifest = read_manifest(layout_keys / "aggregator")
    signer = read_sm2(layout_keys / "api", "audit")
    ledger = PrivacyLedger.from_url(url, audit=AuditLog(signer=signer, origin="secure-fed/local"))
    try:
        tokens = ApiTokenStore(ledger.engine)
        for k, pid in enumerate(ids):
            ledger.register_participant(
                pid,
                institution=pid,
                kind=KINDS[k % len(KINDS)],
                public_key_pem=manifest.participant_keys[pid].to_pem(),
            )
            ledger.register_asset(pid, ASSET_ID)
            ledger.set_budget(pid, ASSET_ID, epsilon=repr(options.epsilon), delta=options.delta)
            issued = tokens.create(name=f"node {pid}", role="participant", participant_id=pid)
            _write_private(nodes / pid / "api-token", issued.secret + "\n")
    finally:
        ledger.engine.dispose()


def _server_toml(options: LocalOptions, layout: LocalLayout, sm3: str) -> str:
    keys = layout.keys
    entries = "".join(
        f"\n[[participants]]\nid = {_q(pid)}\narchitecture = {_q(ARCHITECTURES[k % 2])}\n"
        for k, pid in enumerate(layout.ids)
    )
    cert, key = layout.tls("aggregator")
    # shares: the helper; ckks: the verifier, which attests every decryption request
    second = f"helper_url = {_q(f'https://127.0.0.1:{layout.helper_port}')}\n"
    second = second if options.mode == "shares" else ""
    if options.mode == "ckks" and options.verifier:
        second = f"verifier_url = {_q(f'https://127.0.0.1:{layout.verifier_port}')}\n"
    return f"""[server]
namespace = "local"
ledger_url = {_q(layout.database_url)}
log_signing_key = {_q(keys / "api" / "audit.key.pem")}
key_dir = {_q(keys / "aggregator")}
reply_timeout = {options.reply_timeout}
publication_timeout = 300
join_timeout = 120

[federation]
mode = {_q(options.mode)}
rounds = {options.rounds}
seed = {options.seed}
min_participants = {options.min_participants}
builtin = {_q(options.builtin)}
epochs_per_round = {options.epochs_per_round}
evidence_rows = {_EVIDENCE_ROWS}
retry_delay = {float(options.retry_delay)!r}
max_retries = {options.max_retries}

[public]
sm3 = {_q(sm3)}

[parties]
authority_url = {_q(f"https://127.0.0.1:{layout.authority_port}")}
{second}ca_file = {_q(layout.ca_file)}
client_cert = {_q(cert)}
client_key = {_q(key)}
{entries}"""


def _participant_toml(options: LocalOptions, layout: LocalLayout, k: int, sm3: str) -> str:
    pid = layout.ids[k]
    cert, key = layout.tls(pid)  # its client certificate: it posts its upload notices
    return f"""[participant]
id = {_q(pid)}
architecture = {_q(ARCHITECTURES[k % 2])}
state_dir = "state"

[data]
builtin = {_q(options.builtin)}

[public]
builtin = true
sm3 = {_q(sm3)}

[dp]
epsilon = {options.epsilon!r}
delta = {options.delta!r}
rounds = {options.dp_rounds}

[keys]
dir = {_q(layout.keys / "participants" / pid)}

[budget]
api_url = {_q(layout.api.url)}
token_file = "api-token"
ca_file = {_q(layout.ca_file)}

[notice]
url = {_q(f"https://127.0.0.1:{_notice_port(options, layout)}")}
ca_file = {_q(layout.ca_file)}
cert_file = {_q(cert)}
key_file = {_q(key)}
"""


def _notice_port(options: LocalOptions, layout: LocalLayout) -> int:
    """Return the port of the gatekeeper that opens the mode's values (takes the notices)."""
    return layout.authority_port if options.mode == "ckks" else layout.helper_port


def _flwr_config(layout: LocalLayout) -> str:
    return f"""[superlink]
default = "local"

[superlink.local]
address = "127.0.0.1:{layout.superlink_port}"
root-certificates = {_q(layout.ca_file)}
"""


def prepare(options: LocalOptions) -> LocalLayout:
    """Write every file of the run (keys, ledger, settings) and choose the ports.

    Raises
    ------
    FederationConfigInvalid
        The run directory already holds a run (``keys/`` exists).
    """
    run = options.run_dir.resolve()
    keys = run / "keys"
    if keys.exists():
        raise FederationConfigInvalid(f"run_dir: {run} already holds a run; choose a new one")
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    ids = participant_ids(options.participants)
    sm3, shape = _public_set(options)
    create_keys(
        keys,
        mode=options.mode,
        participant_ids=ids,
        shape=shape,
        min_participants=options.min_participants,
        verifier=options.verifier,
    )
    tls = LocalCA(keys / "tls")
    for pid in ids:  # each participant's client certificate, for its upload notices
        tls.issue_client(pid)
    url = options.database_url or f"sqlite:///{run / 'ledger.db'}"
    _seed_ledger(options, keys, url, ids, run / "nodes")
    api_cert, api_key = keys / "tls" / "api.pem", keys / "tls" / "api.key"
    api = write_api_config(
        run / "api",
        database_url=url,
        port=free_port(),
        audit_key=keys / "api" / "audit.key.pem",
        receipt_key=keys / "api" / "receipts.key.pem",
        tls_cert=api_cert,
        tls_key=api_key,
        ca_file=keys / "tls" / "ca.pem",
    )
    ports = {name: free_port() for name in _PORTS}
    layout = _layout(run, ids, database_url=url, api=api, ports=ports)
    _write_private(layout.server_toml, _server_toml(options, layout, sm3))
    for k, pid in enumerate(ids):
        _write_private(layout.participant_tomls[pid], _participant_toml(options, layout, k, sm3))
    _write_private(layout.flwr_home / "config.toml", _flwr_config(layout))
    for name in ("keyauthority", "helper", "verifier", "superlink"):
        (run / name).mkdir(exist_ok=True, mode=0o700)
    _write_private(run / MANIFEST, _manifest(options, layout))  # last: the run is complete
    return layout


class ResumeRefused(ConfigurationInvalid):
    """``deploy local --resume`` refused a run directory; nothing was started or written.

    ``why`` is ``not-a-run`` (no complete run of ``deploy local`` there), ``in-use`` (its
    driver still runs, or a port of the run is taken) or ``contradicts`` (an option differs
    from the stored run's).
    """

    code = "DEPLOY_RESUME_REFUSED"

    def __init__(self, message: str, *, why: str) -> None:
        super().__init__(message)
        self.why = why


#: The services whose ports a run keeps (``LocalLayout.<name>_port``, the manifest's keys).
_PORTS = ("superlink", "authority", "helper", "verifier")


def _layout(
    run: Path,
    ids: Sequence[str],
    *,
    database_url: str,
    api: ApiEndpoint,
    ports: Mapping[str, int],
) -> LocalLayout:
    """Return the layout of the run in ``run``: its files' places, the database, the ports."""
    return LocalLayout(
        run_dir=run,
        keys=run / "keys",
        ids=tuple(ids),
        database_url=database_url,
        api=api,
        server_toml=run / "server" / "server.toml",
        participant_tomls={pid: run / "nodes" / pid / "participant.toml" for pid in ids},
        flwr_home=run / "flwr",
        superlink_port=ports["superlink"],
        authority_port=ports["authority"],
        helper_port=ports["helper"],
        verifier_port=ports["verifier"],
    )


def _manifest(options: LocalOptions, layout: LocalLayout) -> str:
    stored = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    del stored["run_dir"]
    ports = {name: getattr(layout, f"{name}_port") for name in _PORTS}
    return (
        json.dumps(
            {
                "version": _MANIFEST_VERSION,
                "options": stored,
                "database_url": layout.database_url,
                "ports": ports,
                "api": {"url": layout.api.url, "ca_file": str(layout.api.ca_file or "")},
            },
            indent=2,
        )
        + "\n"
    )


def _not_a_run(run: Path, why: str) -> ResumeRefused:
    return ResumeRefused(f"{run} is not a run directory of deploy local: {why}", why="not-a-run")


def read_run(run_dir: Path) -> tuple[LocalOptions, LocalLayout]:
    """Read back the options and layout of a run :func:`prepare` made, writing nothing.

    Raises
    ------
    ResumeRefused
        ``run_dir`` has no complete run (its :data:`MANIFEST` is missing or unreadable,
        or a file of the run is gone).
    """
    run = Path(run_dir).resolve()
    if not run.is_dir():
        raise _not_a_run(run, "no such directory")
    try:
        stored = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
        if stored.get("version") != _MANIFEST_VERSION:
            raise ValueError(f"version {stored.get('version')!r}")
        options = LocalOptions(**stored["options"], run_dir=run)
        ports, api = stored["ports"], stored["api"]
        url = str(stored["database_url"])
        endpoint = ApiEndpoint(
            url=str(api["url"]),
            ca_file=Path(api["ca_file"]) if api["ca_file"] else None,
            config=run / "api" / "api.toml",
        )
    except FileNotFoundError:
        raise _not_a_run(run, f"no {MANIFEST} (prepare never finished there)") from None
    except (ValueError, TypeError, KeyError, AttributeError, ConfigurationInvalid) as exc:
        raise _not_a_run(run, f"{MANIFEST} is unreadable ({exc})") from None
    ids = participant_ids(options.participants)
    layout = _layout(
        run, ids, database_url=url, api=endpoint, ports={n: int(ports[n]) for n in _PORTS}
    )
    needed = [
        layout.keys / "aggregator",
        layout.ca_file,
        layout.api.config,
        layout.server_toml,
        layout.flwr_home / "config.toml",
        *layout.participant_tomls.values(),
    ]
    missing = [str(p.relative_to(run)) for p in needed if not p.exists()]
    if missing:
        raise _not_a_run(run, f"missing {', '.join(missing)}")
    return options, layout


#: The options ``deploy local --resume`` compares with the stored run (others are not stored).
RESUME_OPTIONS = ("participants", "mode", "rounds", "max_retries", "database_url")


def check_resume_options(stored: LocalOptions, given: dict[str, Any]) -> None:
    """Refuse options given with ``--resume`` that differ from the stored run's.

    ``given`` maps option names of :data:`RESUME_OPTIONS` to what the caller asked for
    (only those it named).

    Raises
    ------
    ResumeRefused
        An option differs (each one named with both values), or is not one of the stored.
    """
    unknown = sorted(set(given) - set(RESUME_OPTIONS))
    if unknown:
        raise ResumeRefused(f"not options of a stored run: {', '.join(unknown)}", why="contradicts")
    differ = [
        f"{name} {value!r} (the run's: {getattr(stored, name)!r})"
        for name, value in given.items()
        if value != getattr(stored, name)
    ]
    if differ:
        raise ResumeRefused(
            f"the options contradict the run in {stored.run_dir}: {'; '.join(differ)}",
            why="contradicts",
        )


class RunLock:
    """The driver's lock of a run directory (``flock`` of :data:`LOCK`, released at exit).

    The file keeps the driver's pid; the lock dies with the process that holds it (a
    killed driver leaves a file, not a lock), and no child inherits it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write this process's pid into the file.

        Raises
        ------
        ResumeRefused
            Another process holds it (``why="in-use"``; its pid named).
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ResumeRefused(
                f"{self.path.parent} is in use: deploy local (pid {holder}) still runs it",
                why="in-use",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self._fd = fd

    def release(self) -> None:
        """Release the lock (the file stays); safe to call twice."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def run_ports(options: LocalOptions, layout: LocalLayout) -> dict[str, int]:
    """Return the ports the run's services listen on: ``{what: port}``."""
    ports = {"SuperLink": layout.superlink_port, "key authority": layout.authority_port}
    if options.mode == "shares":
        ports["helper"] = layout.helper_port
    elif options.verifier:
        ports["verifier"] = layout.verifier_port
    api_port = layout.api.url.rpartition(":")[2]
    if api_port.isdigit():
        ports["API"] = int(api_port)
    return ports


def check_ports_free(options: LocalOptions, layout: LocalLayout) -> None:
    """Refuse a run whose services' ports are taken (a process of it may still be alive).

    Raises
    ------
    ResumeRefused
        A port cannot be bound on 127.0.0.1 (``why="in-use"``).
    """
    taken = []
    for what, port in run_ports(options, layout).items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services do
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                taken.append(f"{port} ({what})")
    if taken:
        raise ResumeRefused(
            f"{layout.run_dir} is in use: port {', '.join(taken)} is taken on 127.0.0.1; "
            "a process of the earlier run may still be alive",
            why="in-use",
        )

"""Deployment-engine scale: N concurrent participants through Flower, each its own process.

Run ``python bench/deploy_scale.py`` (20 participants, shares mode, one round)
or ``--participants N --mode ckks|shares --rounds R``; prints one JSON
document (the machine and its load average before and after, ``deployment``
and, with ``--simulation N``, ``simulation``). It builds the federation
``secure-fed deploy local`` runs
(:class:`secure_fed.deploy.local.LocalFederation`: key authority, helper,
API, SuperLink over TLS, one SuperNode per participant, each charging its
budget through the API) on a fresh PostgreSQL schema (``--pg``), then runs
the rounds and reports:

- ``prepare_s`` (key ceremony, ledger, files), ``start_s`` (every service
  healthy), ``run_s`` (``flwr run`` until it ends) and per round the seconds
  from its opening to its publication, from the ledger's round rows;
- ``server_peak_rss_mib``: the largest resident set of the aggregator side,
  the SuperLink and everything it started (the ServerApp process), sampled
  every 0.5 s; also the peak of the whole federation (all processes);
- where the time goes: CPU seconds used by each kind of process during the
  run (SuperNodes and the ClientApps they start, SuperLink with the
  ServerApp, key authority, helper, API), read from ``/proc``.

CPU seconds of a process are its own (children apart), as last sampled: the
CPU a process spends in its final half second, or in a life shorter than
the 0.5 s sampling period, is missed (an underestimate).

``--simulation N`` adds (after the deployment run) N participants through
Flower's simulation runtime (:mod:`secure_fed.deploy.flower.simulation`: the
same ServerApp and ClientApp, one virtual SuperNode per participant, Ray
running at most two ClientApps at once on two CPUs): plaintext mode, the
``bank_imbalanced`` table split by Dirichlet (alpha 5), one round, a SQLite
ledger; its files are written by the simulation test's writer
(``tests/secure_fed/deploy/flower/workspace.py``). It reports the run's
seconds, the round's stage and seconds, the peak resident set and the CPU
seconds of this process and everything it starts (the ServerApp and Ray's
workers). ``--participants 0`` skips the deployment run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, before bench/

from privacy_ledger.models import RoundRow  # noqa: E402
from secure_fed.deploy.flower.simulation import run_simulated_federation  # noqa: E402
from secure_fed.deploy.local import LocalFederation  # noqa: E402
from secure_fed.deploy.local_files import LocalOptions  # noqa: E402

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _proc(pid: int) -> tuple[int, float, int] | None:
    """(parent, cpu seconds of the process itself, rss bytes) of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime (children apart)
    return int(fields[1]), cpu, int(fields[21]) * _PAGE


class Sampler:
    """Samples the process trees of the supervised children every 0.5 s."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.cpu: dict[int, tuple[str, float]] = {}
        self.peak_server = 0
        self.peak_all = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.5)

    def sample(self) -> None:
        table = {int(p): _proc(int(p)) for p in os.listdir("/proc") if p.isdigit()}
        parent = {pid: row[0] for pid, row in table.items() if row is not None}
        kind_of: dict[int, str] = {}
        for pid in parent:
            walk = pid
            while walk in parent and walk not in self.roots.values() and walk > 1:
                walk = parent[walk]
            for kind, root in self.roots.items():
                if walk == root:
                    kind_of[pid] = kind
        rss_server = rss_all = 0
        for pid, kind in kind_of.items():
            row = table[pid]
            assert row is not None
            self.cpu[pid] = (kind, row[1])
            rss_all += row[2]
            if kind == "superlink":
                rss_server += row[2]
        self.peak_server = max(self.peak_server, rss_server)
        self.peak_all = max(self.peak_all, rss_all)

    def cpu_by_kind(self, before: dict[int, tuple[str, float]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (kind, cpu) in self.cpu.items():
            group = "supernodes" if kind.startswith("supernode-") else kind
            out[group] = out.get(group, 0.0) + cpu - before.get(pid, (kind, 0.0))[1]
        return {k: round(v, 1) for k, v in sorted(out.items())}


def _round_seconds(url: str) -> list[dict[str, object]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(RoundRow.id, RoundRow.stage, RoundRow.created_at, RoundRow.updated_at)
            ).all()
    finally:
        engine.dispose()
    return [{"round": r[0], "stage": r[1], "open_to_end_s": round(r[3] - r[2], 1)} for r in rows]


def simulation(participants: int, rounds: int) -> dict[str, object]:
    """Run ``participants`` virtual nodes through Flower's simulation runtime; return figures."""
    from tests.secure_fed.deploy.flower.workspace import write_federation

    folder = Path(tempfile.mkdtemp(prefix="deploy-scale-sim-"))
    ids = [f"{kind}-{k}" for k, kind in enumerate(["hospital", "bank"] * participants)]
    server, _ = write_federation(
        folder,
        ids=ids[:participants],
        rounds=rounds,
        builtin="bank_imbalanced",
        min_participants=max(2, participants // 2),
        by_partition=True,
        extra="alpha = 5.0\n",
    )
    with Sampler({"simulation": os.getpid()}) as sampler:
        sampler.sample()
        before = dict(sampler.cpu)
        t0 = time.perf_counter()
        run_simulated_federation(server, folder / "nodes", num_supernodes=participants)
        t1 = time.perf_counter()
        sampler.sample()
    return {
        "participants": participants,
        "mode": "plaintext",
        "dataset": "bank_imbalanced",
        "rounds": rounds,
        "run_s": round(t1 - t0, 1),
        "rounds_detail": _round_seconds(f"sqlite:///{server.parent / 'ledger.db'}"),
        "peak_rss_mib": round(sampler.peak_all / 2**20, 1),
        "cpu_s_during_run": _split_driver(sampler, before),
    }


def _split_driver(sampler: Sampler, before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds of this process (the ServerApp) and of the processes it started (Ray)."""
    total = sampler.cpu_by_kind(before).get("simulation", 0.0)
    me = os.getpid()
    own = sampler.cpu.get(me, ("", 0.0))[1] - before.get(me, ("", 0.0))[1]
    return {"serverapp_process": round(own, 1), "ray_and_clientapps": round(total - own, 1)}


def main() -> None:
    """Run the benchmark and print its JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--participants", type=int, default=20)
    parser.add_argument("--mode", default="shares", choices=("ckks", "shares"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pg", default=PG)
    parser.add_argument(
        "--superlink-memory", action="store_true", help="SuperLink state in memory, not SQLite."
    )
    parser.add_argument(
        "--simulation",
        type=int,
        default=0,
        metavar="N",
        help="Also run N participants through Flower's simulation runtime (0: not run).",
    )
    args = parser.parse_args()
    result: dict[str, object] = {
        "benchmark": "deploy_scale",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_before": os.getloadavg(),
    }
    if args.participants:
        result["deployment"] = deployment(args)
    if args.simulation:
        result["simulation"] = simulation(args.simulation, args.rounds)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


def deployment(args: argparse.Namespace) -> dict[str, object]:
    """Run ``args.participants`` SuperNodes through the deployment engine; return figures."""
    schema = "bench_deploy_" + secrets.token_hex(4)
    admin = create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{args.pg}?options=-csearch_path%3D{schema}"
    folder = Path(tempfile.mkdtemp(prefix="deploy-scale-"))
    options = LocalOptions(
        participants=args.participants,
        mode=args.mode,
        rounds=args.rounds,
        run_dir=folder / "run",
        database_url=url,
        reply_timeout=1800.0,
        superlink_database=not args.superlink_memory,
    )
    fed = LocalFederation(options=options, python=sys.executable, env=dict(os.environ))
    result: dict[str, object] = {
        "participants": args.participants,
        "mode": args.mode,
        "rounds": args.rounds,
        "superlink_state": "memory" if args.superlink_memory else "sqlite",
    }
    try:
        t0 = time.perf_counter()
        fed.prepare()
        t1 = time.perf_counter()
        fed.start()
        t2 = time.perf_counter()
        assert fed.supervisor is not None
        roots = {name: child.pid for name, child in fed.supervisor.children.items()}
        with Sampler(roots) as sampler:
            sampler.sample()
            before = dict(sampler.cpu)
            status = fed.run(timeout=3600)
            t3 = time.perf_counter()
            sampler.sample()
        result |= {
            "status": status,
            "prepare_s": round(t1 - t0, 1),
            "start_s": round(t2 - t1, 1),
            "run_s": round(t3 - t2, 1),
            "rounds_detail": _round_seconds(url),
            "server_peak_rss_mib": round(sampler.peak_server / 2**20, 1),
            "federation_peak_rss_mib": round(sampler.peak_all / 2**20, 1),
            "cpu_s_during_run": sampler.cpu_by_kind(before),
        }
    finally:
        fed.stop()
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()
    return result


if __name__ == "__main__":
    main()

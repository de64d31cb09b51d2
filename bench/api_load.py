"""REST API load benchmark: the budget query endpoint at a target rate, 1 and 4 uvicorn workers.

Run ``python bench/api_load.py`` (200 requests/s for 20 s per worker count) or
``--quick`` (100 requests/s, 8 s); prints one JSON document. For each worker
count it creates a fresh PostgreSQL schema (``--pg``, default the local
``test`` database), registers four participants with large budgets, starts
``secure-fed api`` (uvicorn, ``--workers N``) on 127.0.0.1, and then runs two
more processes at the same time:

- a *writer* that keeps reserving and aborting epsilon on the queried budget
  through :class:`privacy_ledger.PrivacyLedger` with the audit log (each
  cycle locks the budget row and appends two audit entries), at
  ``--writer-rate`` cycles per second;
- a *load generator* that sends ``GET /v1/budgets/{participant}/{asset}``
  with an officer token at ``--rate`` requests per second, open loop: request
  ``i`` is due at ``start + i / rate`` and its latency is measured from that
  due time, so a slow server cannot hide queueing (no coordinated omission).

Reported per worker count: achieved requests/s, p50 / p99 / max latency, CPU
milliseconds per answered request of the uvicorn workers, of PostgreSQL (all
its processes, the writer's work included) and of the load generator,
non-200 answers, writer cycles/s. Requests still unanswered 15 s after the
last one was sent count as failed, with infinite latency (a percentile that
falls on them prints -1). Target (docs/benchmarks.md): p99 < 50 ms at
200 requests/s with 4 workers on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ASSET = "records"
PARTICIPANTS = [f"bench-{i}" for i in range(4)]
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
#: Seconds the load generator waits for answers after sending its last request.
_GRACE = 15.0


def _admin(sql: str, base: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def _event() -> Any:
    from privacy_ledger import MechanismEvent

    return MechanismEvent(
        noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
    )


def _prepare(url: str, folder: Path) -> str:
    """Seed participants and budgets; return an officer token."""
    from api.rest import ApiSettings
    from api.rest.context import build_context
    from crypto.sm import SM2PrivateKey

    key = SM2PrivateKey.generate()
    (folder / "log-signing-key.pem").write_bytes(key.to_pem_unencrypted_insecure())
    settings = ApiSettings(
        database_url=url,
        api_audit_key_file=folder / "log-signing-key.pem",
        api_audit_origin="bench/api",
    )
    ctx = build_context(settings)
    for pid in PARTICIPANTS:
        ctx.ledger.register_participant(pid, institution=pid, kind="hospital")
        ctx.ledger.register_asset(pid, ASSET)
        ctx.ledger.set_budget(pid, ASSET, epsilon="100000", delta=1e-5)
        for round_no in range(5):  # a history like the demo's: five committed rounds
            held = ctx.ledger.reserve(pid, ASSET, _event(), round_id=f"r{round_no}")
            ctx.ledger.commit(held.id)
    token = ctx.tokens.create(name="bench", role="officer").secret
    ctx.close()
    return token


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(url: str, folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = _free_port()
    config = folder / "api.toml"
    config.write_text(
        f'database_url = "{url}"\napi_audit_key_file = "{folder / "log-signing-key.pem"}"\n'
        f'api_port = {port}\napi_workers = {workers}\napi_session_secret = "{"b" * 40}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    proc = subprocess.Popen(
        [*CLI, "api", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def _cpu_ms(match: Any) -> float:
    """CPU milliseconds (user + system) of the processes whose /proc stat ``match`` accepts."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        if match(comm, int(fields[2])):  # fields[2] is the process group
            total += int(fields[11]) + int(fields[12])
    return 1000.0 * total / tick


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def writer(url: str, key_file: str, rate: float, duration: float) -> dict[str, Any]:
    """Reserve and abort on the queried budget at ``rate`` cycles/s for ``duration`` s."""
    from crypto.sm import SM2PrivateKey
    from privacy_ledger import AuditLog, PrivacyLedger

    key = SM2PrivateKey.from_pem(Path(key_file).read_bytes(), passphrase=None)
    ledger = PrivacyLedger.from_url(url, audit=AuditLog(signer=key, origin="bench/api"))
    event, cycles = _event(), 0
    start = time.perf_counter()
    while (now := time.perf_counter() - start) < duration:
        held = ledger.reserve(PARTICIPANTS[0], ASSET, event, round_id="writer")
        ledger.abort(held.id)
        cycles += 1
        pause = cycles / rate - (time.perf_counter() - start)
        if pause > 0:
            time.sleep(pause)
    ledger.engine.dispose()
    return {"cycles": cycles, "cycles_per_s": round(cycles / now, 1)}


async def _load(base: str, token: str, rate: float, duration: float) -> dict[str, Any]:
    import httpx

    path = f"/v1/budgets/{PARTICIPANTS[0]}/{ASSET}"
    headers = {"Authorization": f"Bearer {token}"}
    latencies: list[float] = []
    failures = 0
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30) as c:
        for _ in range(20):  # warm-up: connections, first-request imports in every worker
            await c.get(path)

        async def one(due: float) -> None:
            nonlocal failures
            try:
                answer = await c.get(path)
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - due)
            failures += 0 if ok else 1

        total = int(rate * duration)
        start = time.perf_counter()
        tasks = []
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(due)))
        _, pending = await asyncio.wait(tasks, timeout=_GRACE)
        for task in pending:  # a saturated server: what is still queued counts as failed
            task.cancel()
        elapsed = time.perf_counter() - start
    unfinished = len(pending)
    failures += unfinished
    latencies.extend([float("inf")] * unfinished)
    latencies.sort()

    def pct(q: float) -> float:
        value = latencies[min(len(latencies) - 1, int(q * len(latencies)))]
        return round(1000 * value, 2) if value != float("inf") else -1.0

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_ms": 1000.0 * (usage.ru_utime + usage.ru_stime),
        "requests": total,
        "completed_ok": total - failures,
        "achieved_rps": round((total - failures) / elapsed, 1),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(1000 * latencies[-1], 2) if latencies[-1] != float("inf") else -1.0,
        "non_200_or_unfinished": failures,
        "unfinished": unfinished,
    }


def _run_child(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)


def one_config(workers: int, rate: float, duration: float, writer_rate: float, pg: str) -> Any:
    """Measure one worker count on a fresh schema; return its figures."""
    schema = "bench_api_" + secrets.token_hex(4)
    _admin(f"CREATE SCHEMA {schema}", pg)
    url = f"{pg}?options=-csearch_path%3D{schema}"
    folder = Path(tempfile.mkdtemp(prefix="api-load-"))
    try:
        token = _prepare(url, folder)
        proc, base = _start_server(url, folder, workers)
        try:
            key = str(folder / "log-signing-key.pem")
            write = _run_child(["--_writer", url, key, str(writer_rate), str(duration + 3)])
            time.sleep(1.0)
            server_before = _cpu_ms(lambda _c, group: group == proc.pid)
            pg_before = _cpu_ms(lambda comm, _g: comm.startswith("postgres"))
            load = _run_child(["--_load", base, token, str(rate), str(duration)])
            load_out, _ = load.communicate()
            server_cpu = _cpu_ms(lambda _c, group: group == proc.pid) - server_before
            pg_cpu = _cpu_ms(lambda comm, _g: comm.startswith("postgres")) - pg_before
            write_out, _ = write.communicate()
        finally:
            _stop(proc)
        figures = json.loads(load_out)
        done = max(1, figures["completed_ok"])
        cpu = {
            "server_ms": round(server_cpu / done, 2),
            "postgres_ms_incl_writer": round(pg_cpu / done, 2),
            "load_generator_ms": round(figures.pop("cpu_ms") / done, 2),
        }
        return {
            "workers": workers,
            "target_rps": rate,
            **figures,
            "cpu_per_request": cpu,
            "writer": json.loads(write_out),
        }
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg)


def main() -> None:
    """Parse options, run every worker count, print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 req/s for 8 s")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--writer-rate", type=float, default=20.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--_writer", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--_load", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._writer:
        url, key, rate, duration = args._writer
        print(json.dumps(writer(url, key, float(rate), float(duration))))
        return
    if args._load:
        base, token, rate, duration = args._load
        print(json.dumps(asyncio.run(_load(base, token, float(rate), float(duration)))))
        return
    rate, duration = (100.0, 8.0) if args.quick else (args.rate, args.duration)
    runs = [one_config(w, rate, duration, args.writer_rate, args.pg) for w in args.workers]
    print(
        json.dumps(
            {
                "benchmark": "api_load",
                "endpoint": "GET /v1/budgets/{participant}/{asset}",
                "database": "postgresql (127.0.0.1)",
                "duration_s": duration,
                "writer_rate": args.writer_rate,
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                },
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

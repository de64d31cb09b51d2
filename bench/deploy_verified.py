"""Verified release deployed: a ckks ``deploy local`` run with the verifier and without, in one run.

Run ``OMP_NUM_THREADS=1 python bench/deploy_verified.py`` (2 participants, 2 rounds,
``digits``) or ``--participants N --rounds R --order verified,unverified``; prints one
JSON document. Each variant is a whole federation of real processes
(:class:`secure_fed.deploy.local.LocalFederation`: key authority, the verifier or not,
API, SuperLink, one SuperNode per participant), on its own SQLite ledger, the same
options otherwise (``LocalOptions(verifier=False)`` is a key ceremony without the
verifier's key: the key authority pins none and decrypts without attestations). For
each it reports ``start_s`` (every service healthy), ``run_s`` (``flwr run`` until it
ends), each round's seconds from its opening to its publication (the ledger's round
rows) and the CPU seconds of each kind of process during the run (the verifier's own
among them; :class:`bench.deploy_scale.Sampler`). ``ratios`` divides the verified
variant's figures by the unverified one's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, before bench/
sys.path.insert(1, str(Path(__file__).resolve().parent))

from deploy_scale import Sampler, _round_seconds  # noqa: E402

from secure_fed.deploy.local import LocalFederation  # noqa: E402
from secure_fed.deploy.local_files import LocalOptions  # noqa: E402


def variant(*, verified: bool, participants: int, rounds: int) -> dict[str, Any]:
    """Run one ckks federation (with the verifier or not); return its figures."""
    run_dir = Path(tempfile.mkdtemp(prefix="deploy-verified-")) / "run"
    options = LocalOptions(
        participants=participants,
        mode="ckks",
        rounds=rounds,
        run_dir=run_dir,
        verifier=verified,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    federation = LocalFederation(options=options, python=sys.executable, env=env)
    t0 = time.perf_counter()
    federation.prepare()
    t1 = time.perf_counter()
    try:
        federation.start()
        t2 = time.perf_counter()
        supervisor = federation.supervisor
        assert supervisor is not None
        roots = {name: child.pid for name, child in supervisor.children.items()}
        with Sampler(roots) as sampler:
            sampler.sample()
            before = dict(sampler.cpu)
            status = federation.run(timeout=3600)
            t3 = time.perf_counter()
            sampler.sample()
        layout = federation.prepare()
        return {
            "verified": verified,
            "exit": status,
            "prepare_s": round(t1 - t0, 1),
            "start_s": round(t2 - t1, 1),
            "run_s": round(t3 - t2, 1),
            "rounds": _round_seconds(layout.database_url),
            "cpu_s_during_run": sampler.cpu_by_kind(before),
            "services": sorted(roots),
        }
    finally:
        federation.stop()


def main() -> None:
    """Run both variants and print the JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--participants", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--order", default="verified,unverified")
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs: dict[str, dict[str, Any]] = {}
    for name in args.order.split(","):
        runs[name] = variant(
            verified=name == "verified", participants=args.participants, rounds=args.rounds
        )
    with_v, without = runs.get("verified"), runs.get("unverified")
    ratios: dict[str, object] = {}
    if with_v and without:
        ratios["run_s"] = round(float(with_v["run_s"]) / float(without["run_s"]), 2)
        per = [
            round(float(a["open_to_end_s"]) / float(b["open_to_end_s"]), 2)
            for a, b in zip(with_v["rounds"], without["rounds"], strict=False)
            if float(b["open_to_end_s"]) > 0
        ]
        ratios["round_open_to_end"] = per
    print(
        json.dumps(
            {
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "load_average_before": [round(v, 2) for v in load_before],
                "load_average_after": [round(v, 2) for v in os.getloadavg()],
                "participants": args.participants,
                "rounds": args.rounds,
                "runs": runs,
                "ratios_verified_to_unverified": ratios,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

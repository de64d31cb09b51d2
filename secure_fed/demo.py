"""``secure-fed demo``: a complete federation on embedded defaults, all parties in one process.

Loads a built-in task, registers every participant and its epsilon budget in
a SQLite privacy ledger inside the working folder (round state lives in the
same database), runs
:class:`~secure_fed.federation.federation.Federation` for the requested rounds, and
writes ``results.json`` next to the ledger. The round loop is the
federation's (:meth:`~secure_fed.federation.federation.Federation.run`); this
module only configures it, calls it and reports. The command line
(``api/cli/demo.py``) only parses options and renders progress and tables.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.errors import FederationConfigInvalid, UnknownDataset
from secure_fed.evaluation.attacks import parse_attack_spec
from secure_fed.federation.config import ASSET_ID, FederationConfig, plan_participants
from secure_fed.federation.federation import Federation, RoundResult
from secure_fed.federation.store import LedgerRoundStore
from secure_fed.learning.data import DATASET_REGISTRY, load_task
from secure_fed.secure.audit import LedgerAuditSink

__all__ = ["DEMO_FILES", "DemoConfig", "DemoResults", "run_demo"]

_log = logging.getLogger(__name__)

#: Files and folders the demo owns inside its working folder.
DEMO_FILES = (
    "ledger.db",
    "ledger.db-wal",
    "ledger.db-shm",
    "results.json",
    "log-signing-key.pem",
    "log-public-key.pem",
)


def _demo_audit_log(out: Path, passphrase: bytes | None) -> AuditLog:
    """Create the demo's audit log with a fresh SM2 tree-head signing key.

    The signing key is written (mode 0600) as encrypted PKCS#8 under
    ``passphrase``; without one, UNENCRYPTED so that the demo runs with no
    setup (the command line says so). The public key is written beside it for
    ``secure-fed ledger verify --public-key`` and for ``openssl``.
    """
    key = SM2PrivateKey.generate()
    key_path = out / "log-signing-key.pem"
    if passphrase is None:
        pem = key.to_pem_unencrypted_insecure()
    else:
        pem = key.to_pem(passphrase=passphrase)
    key_path.touch(mode=0o600)
    key_path.write_bytes(pem)
    key_path.chmod(0o600)
    (out / "log-public-key.pem").write_bytes(key.public_key.to_pem())
    return AuditLog(signer=key, origin=f"secure-fed-demo/{out.name}")


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Options of ``secure-fed demo`` (the defaults are the embedded demo)."""

    rounds: int = 5
    participants: int = 4
    dataset: str = "digits"
    alpha: float = 0.5
    epsilon: float = 8.0
    attack: str | None = None
    mode: str = "ckks"
    out: Path = Path("secure-fed-work/demo")
    seed: int = 0
    overwrite: bool = False
    central_dp: float | None = None

    def federation_config(self) -> FederationConfig:
        """Validate and translate to a :class:`FederationConfig`.

        Raises
        ------
        UnknownDataset
            Listing the registered datasets.
        FederationConfigInvalid, UnknownMode, UnknownAttack, AttackSpecInvalid
            On any invalid option, naming it.
        """
        if self.dataset not in DATASET_REGISTRY:
            raise UnknownDataset(
                f"unknown dataset {self.dataset!r}; registered: {sorted(DATASET_REGISTRY)}"
            )
        attack = None
        if self.attack:
            attack = parse_attack_spec(self.attack, participants=self.participants)
        return FederationConfig(
            participants=self.participants,
            rounds=self.rounds,
            alpha=self.alpha,
            epsilon=self.epsilon,
            attack=attack,
            mode=self.mode,
            seed=self.seed,
            central_dp=self.central_dp,
        )


@dataclass(kw_only=True)
class DemoResults:
    """What the demo did: per-round tables, budgets, timings, files."""

    config: dict[str, object]
    rounds: list[RoundResult] = field(default_factory=list)
    budgets: dict[str, dict[str, float]] = field(default_factory=dict)
    wall_seconds: float = 0.0
    ledger_url: str = ""
    results_path: str = ""

    def final(self) -> dict[str, float | None]:
        """Mean honest accuracy (federated, local-only) after the last round."""
        if not self.rounds:
            return {"federated": None, "local_only": None}
        fed, local = self.rounds[-1].mean_accuracy()
        return {"federated": fed, "local_only": local}

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (what ``results.json`` and ``--json`` contain)."""
        return {
            "config": self.config,
            "rounds": [asdict(r) for r in self.rounds],
            "final_mean_accuracy": self.final(),
            "budgets": self.budgets,
            "wall_seconds": round(self.wall_seconds, 2),
            "ledger_url": self.ledger_url,
            "results_path": self.results_path,
        }


def _prepare_out(out: Path, overwrite: bool) -> None:
    existing = [name for name in DEMO_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise FederationConfigInvalid(
            f"out folder {str(out)!r} already holds a demo run ({', '.join(existing)}); "
            "pass --overwrite to replace it or choose another --out"
        )
    for name in existing:
        target = out / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    out.mkdir(parents=True, exist_ok=True)


def run_demo(
    config: DemoConfig,
    *,
    on_round: Callable[[RoundResult], None] | None = None,
    key_passphrase: bytes | None = None,
) -> DemoResults:
    """Run the demo federation and write ``results.json`` into ``config.out``.

    Parameters
    ----------
    config
        Demo options.
    on_round
        Called after each round with its result (progress bars, tables).
    key_passphrase
        Encrypts the audit log's signing key in ``config.out`` (``None``: unencrypted).

    Returns
    -------
    DemoResults
        Per-round rows, final budgets, wall time and file locations.
    """
    started = time.perf_counter()
    fed_config = config.federation_config()
    out = Path(config.out)
    _prepare_out(out, config.overwrite)
    url = f"sqlite:///{(out / 'ledger.db').as_posix()}"
    audit = _demo_audit_log(out, key_passphrase)
    ledger = PrivacyLedger.from_url(url, audit=audit)
    plan = plan_participants(fed_config)
    for p in plan:
        ledger.register_participant(p.participant_id, institution=p.institution, kind=p.kind)
        ledger.register_asset(p.participant_id, ASSET_ID)
        ledger.set_budget(
            p.participant_id,
            ASSET_ID,
            epsilon=repr(float(fed_config.epsilon)),
            delta=fed_config.delta,
            accountant="rdp",
        )
    task = load_task(config.dataset, seed=config.seed)
    federation = Federation(
        config=fed_config,
        task=task,
        budget=ledger,
        store=LedgerRoundStore(engine=ledger.engine, namespace="demo"),
        audit=LedgerAuditSink(engine=ledger.engine, log=audit),
    )
    results = DemoResults(
        config={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        ledger_url=url,
        results_path=str(out / "results.json"),
    )
    results.rounds = federation.run(on_round=on_round)
    for p in plan:
        status = ledger.budget_status(p.participant_id, ASSET_ID)
        results.budgets[p.participant_id] = {
            "limit": float(status.limit),
            "spent": float(status.spent),
            "remaining": float(status.remaining),
        }
    with Session(ledger.engine) as session:
        audit.checkpoint(session, force=True)
        session.commit()
    results.wall_seconds = time.perf_counter() - started
    (out / "results.json").write_text(json.dumps(results.to_dict(), indent=2), encoding="utf-8")
    _log.info("demo finished in %.1f s; results in %s", results.wall_seconds, out)
    return results

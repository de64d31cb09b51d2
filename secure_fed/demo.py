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

from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog
from privacy_ledger.audit.models import TreeHeadRow
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.demo_options import DEMO_FILES, DemoConfig
from secure_fed.federation.config import ASSET_ID, FederationConfig, plan_participants
from secure_fed.federation.federation import Federation, RoundResult
from secure_fed.federation.observer import StageObserver
from secure_fed.federation.store import LedgerRoundStore
from secure_fed.report.demo_report import write_demo_report
from secure_fed.secure.audit import LedgerAuditSink

__all__ = ["DEMO_FILES", "DemoConfig", "DemoResults", "run_demo"]

_log = logging.getLogger(__name__)


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


#: What results.json says about the DP noise, by ``DemoConfig.reproducible``.
NOISE = {
    False: "secure: DP-SGD noise and sampling seeded from the secrets module (not reproducible)",
    True: "INSECURE: DP-SGD noise seeded from --seed (--reproducible); no DP guarantee",
}


@dataclass(kw_only=True)
class DemoResults:
    """What the demo did: per-round tables, budgets, privacy terms, ledger head, files."""

    config: dict[str, object]
    data: dict[str, object] = field(default_factory=dict)
    rounds: list[RoundResult] = field(default_factory=list)
    budgets: dict[str, dict[str, float]] = field(default_factory=dict)
    privacy: dict[str, object] = field(default_factory=dict)
    ledger: dict[str, object] = field(default_factory=dict)
    wall_seconds: float = 0.0
    ledger_url: str = ""
    results_path: str = ""
    report_path: str = ""

    def final(self) -> dict[str, float | None]:
        """Mean honest accuracy (federated, local-only) after the last round."""
        if not self.rounds:
            return {"federated": None, "local_only": None}
        fed, local = self.rounds[-1].mean_accuracy()
        return {"federated": fed, "local_only": local}

    def final_metrics(self) -> dict[str, dict[str, float | None]]:
        """Mean honest metrics after the last round: ``{metric: {federated, local_only}}``.

        Accuracy, balanced accuracy, macro F1 and ROC AUC (binary tasks; ``None``
        otherwise), see :mod:`secure_fed.learning.metrics`.
        """
        return self.rounds[-1].mean_metrics() if self.rounds else {}

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (what ``results.json`` and ``--json`` contain)."""
        return {
            "config": self.config,
            "data": self.data,
            "rounds": [asdict(r) for r in self.rounds],
            "final_mean_accuracy": self.final(),
            "final_mean_metrics": self.final_metrics(),
            "budgets": self.budgets,
            "privacy": self.privacy,
            "ledger": self.ledger,
            "wall_seconds": round(self.wall_seconds, 2),
            "ledger_url": self.ledger_url,
            "results_path": self.results_path,
            "report_path": self.report_path,
        }


def _jsonable(value: object) -> object:
    """Paths as strings, tuples as lists, recursively (the demo's options in results.json)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _prepare_out(out: Path) -> None:
    """Remove an earlier run's files (``validate`` refused them without --overwrite)."""
    for name in DEMO_FILES:
        target = out / name
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _register(ledger: PrivacyLedger, fed_config: FederationConfig) -> None:
    for p in plan_participants(fed_config):
        ledger.register_participant(p.participant_id, institution=p.institution, kind=p.kind)
        ledger.register_asset(p.participant_id, ASSET_ID)
        ledger.set_budget(
            p.participant_id,
            ASSET_ID,
            epsilon=repr(float(fed_config.epsilon)),
            delta=fed_config.delta,
            accountant="rdp",
        )


def _budgets(ledger: PrivacyLedger, fed_config: FederationConfig) -> dict[str, dict[str, float]]:
    budgets = {}
    for p in plan_participants(fed_config):
        status = ledger.budget_status(p.participant_id, ASSET_ID)
        budgets[p.participant_id] = {
            "limit": float(status.limit),
            "spent": float(status.spent),
            "remaining": float(status.remaining),
        }
    return budgets


def _signed_head(ledger: PrivacyLedger, audit: AuditLog, out: Path) -> dict[str, object]:
    """Sign a final tree head and describe it (size, root, signature, how to verify)."""
    with Session(ledger.engine) as session:
        audit.checkpoint(session, force=True)
        session.commit()
        row = session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq.desc())).first()
    url = f"sqlite:///{(out / 'ledger.db').as_posix()}"
    verify = f"secure-fed ledger verify --db {url} --public-key {out / 'log-public-key.pem'}"
    head = None
    if row is not None:
        head = {
            "tree_size": row.tree_size,
            "root_hash": row.root_hash.hex(),
            "signature_hex": row.signature.hex(),
            "key_fingerprint": row.key_fingerprint,
            "algorithm": "SM2 with SM3 over the C2SP checkpoint body (tree_heads table)",
        }
    return {
        "signed_tree_head": head,
        "public_key": str(out / "log-public-key.pem"),
        "verify_command": verify,
    }


def run_demo(
    config: DemoConfig,
    *,
    on_round: Callable[[RoundResult], None] | None = None,
    on_stage: StageObserver | None = None,
    key_passphrase: bytes | None = None,
) -> DemoResults:
    """Run the demo federation; write ``results.json`` and ``report.html`` into ``config.out``.

    Parameters
    ----------
    config
        Demo options (validated first, before any file is written).
    on_round
        Called after each round with its result (progress bars, tables).
    on_stage
        Called when each stage of a round starts (see :mod:`secure_fed.federation.observer`).
    key_passphrase
        Encrypts the audit log's signing key in ``config.out`` (``None``: unencrypted).

    Returns
    -------
    DemoResults
        Per-round rows, final budgets, privacy terms, the signed head, file locations.
    """
    started = time.perf_counter()
    fed_config = config.federation_config()
    out = Path(config.out)
    _prepare_out(out)
    url = f"sqlite:///{(out / 'ledger.db').as_posix()}"
    audit = _demo_audit_log(out, key_passphrase)
    task = config.load_data()
    ledger = PrivacyLedger.from_url(url, audit=audit)
    _register(ledger, fed_config)
    federation = Federation(
        config=fed_config,
        task=task,
        budget=ledger,
        store=LedgerRoundStore(engine=ledger.engine, namespace="demo"),
        audit=LedgerAuditSink(engine=ledger.engine, log=audit),
        on_stage=on_stage,
        insecure_noise=config.reproducible,
    )
    options = {k: _jsonable(v) for k, v in asdict(config).items()}
    if config.data is not None or config.participant_tables:
        options["dataset"] = None  # --dataset's default did not run; "data" names the tables
    results = DemoResults(
        config={**options, "task": task.name},
        data=config.data_source(),
        ledger_url=url,
        results_path=str(out / "results.json"),
        report_path=str(out / "report.html"),
        privacy={
            "accountant": "rdp (Opacus RDP accountant; the ledger recomputes every charge)",
            "delta": fed_config.delta,
            "epsilon_budget": fed_config.epsilon,
            "secure_noise": not config.reproducible,
            "noise": NOISE[config.reproducible],
        },
    )
    results.rounds = federation.run(on_round=on_round)
    results.budgets = _budgets(ledger, fed_config)
    results.ledger = _signed_head(ledger, audit, out)
    ledger.engine.dispose()
    results.wall_seconds = time.perf_counter() - started
    data = results.to_dict()
    (out / "results.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    write_demo_report(data, out / "report.html")
    _log.info("demo finished in %.1f s; results in %s", results.wall_seconds, out)
    return results

"""``secure-fed demo``: a complete federation on embedded defaults, all parties in one process.

Loads a built-in task, registers every participant and its epsilon budget in
a SQLite privacy ledger inside the working folder (round state lives in the
same database), runs
:class:`~secure_fed.federation.federation.Federation` for the requested rounds, and
writes ``results.json`` next to the ledger, and, in ckks mode, the public contexts of
its two key epochs (``scoring.context``, ``publication.context``: public material only)
for ``secure-fed ledger verify --recompute``. The run writes into a new sibling
folder and swaps it in only when it has succeeded (:func:`run_demo`), so a
failed or interrupted run leaves the previous one as it was. The round loop is the
federation's (:meth:`~secure_fed.federation.federation.Federation.run`); this
module only configures it, calls it and reports. The command line
(``api/cli/demo.py``) only parses options and renders progress and tables.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog
from privacy_ledger.audit.models import TreeHeadRow
from privacy_ledger.budget.empirical import latest_empirical_audits
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.demo_options import DEMO_FILES, MANIFEST, DemoConfig
from secure_fed.federation.config import ASSET_ID, FederationConfig, plan_participants
from secure_fed.federation.federation import Federation, RoundResult
from secure_fed.federation.observer import StageObserver
from secure_fed.federation.store import LedgerRoundStore
from secure_fed.report.demo_report import write_demo_report
from secure_fed.report.noise import NOISE_RNG_RUN_SEED, NOISE_RNG_SECRETS, noise_text
from secure_fed.secure.audit import LedgerAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.ckks import CkksDeployment

__all__ = ["DEMO_FILES", "DemoConfig", "DemoResults", "run_demo"]

_log = logging.getLogger(__name__)


def _write_key(out: Path, name: str, key: SM2PrivateKey, passphrase: bytes | None) -> None:
    """Write ``key`` as ``<name>-key.pem`` (mode 0600) and its public key beside it.

    Encrypted PKCS#8 under ``passphrase``; without one, UNENCRYPTED so that the
    demo runs with no setup (the command line says so).
    """
    if passphrase is None:
        pem = key.to_pem_unencrypted_insecure()
    else:
        pem = key.to_pem(passphrase=passphrase)
    key_path = out / f"{name}-key.pem"
    key_path.touch(mode=0o600)
    key_path.chmod(0o600)
    key_path.write_bytes(pem)
    public = name.removesuffix("-signing")
    (out / f"{public}-public-key.pem").write_bytes(key.public_key.to_pem())


def _demo_audit_log(out: Path, passphrase: bytes | None, *, name: str) -> AuditLog:
    """Create the demo's audit log with a fresh SM2 tree-head signing key.

    The key is ``log-signing-key.pem`` (see :func:`_write_key`); the public key
    beside it is for ``secure-fed ledger verify --public-key`` and ``openssl``.
    """
    key = SM2PrivateKey.generate()
    _write_key(out, "log-signing", key, passphrase)
    return AuditLog(signer=key, origin=f"secure-fed-demo/{name}")


def _service_keys(out: Path, passphrase: bytes | None) -> None:
    """Leave the keys ``secure-fed api`` uses beside the demo's ledger, each its own.

    ``report-signing-key.pem`` signs the JSON report bundles the console exports;
    ``receipt-key.pem`` is the ledger's receipt key (budget receipts). Both are
    fresh SM2 keys, distinct from the log's, written like it (mode 0600).
    """
    _write_key(out, "report-signing", SM2PrivateKey.generate(), passphrase)
    _write_key(out, "receipt", SM2PrivateKey.generate(), passphrase)


#: The CKKS public contexts the demo leaves for ``ledger verify --recompute`` (public only).
CONTEXT_FILES = {"scoring": "scoring.context", "publication": "publication.context"}


def _write_contexts(deployment: SecureDeployment, staging: Path) -> dict[str, str]:
    """Write the CKKS key epochs' public contexts; return the file of each epoch's role.

    Public material only, as the key authority distributes it (public key,
    relinearisation and Galois keys; :class:`~crypto.ckks.PublicContext` never
    holds the secret key). Other modes have no context: nothing is written.
    """
    if not isinstance(deployment, CkksDeployment):
        return {}
    epochs = {"scoring": deployment.public_context, "publication": deployment.publication_context}
    written = {}
    for role, context in epochs.items():
        if context is not None:
            (staging / CONTEXT_FILES[role]).write_bytes(context.data)
            written[role] = CONTEXT_FILES[role]
    return written


def _recompute_commands(out: Path, contexts: dict[str, str]) -> list[str]:
    """Return the ``ledger verify --recompute`` command of each key epoch the demo used."""
    url = f"sqlite:///{(out / 'ledger.db').as_posix()}"
    base = f"secure-fed ledger verify --db {url} --public-key {out / 'log-public-key.pem'}"
    return [f"{base} --recompute --public-context {out / name}" for name in contexts.values()]


#: What results.json says about the DP noise, by ``DemoConfig.reproducible`` (the words of
#: :mod:`secure_fed.report.noise`, which the compliance report shares).
NOISE = {flag: noise_text(reproducible=flag) for flag in (False, True)}


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
    #: Where the previous contents of the folder were kept (``""``: none kept), and why.
    kept_aside: str = ""
    kept_because: list[str] = field(default_factory=list)

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


_SIDECARS = ("ledger.db-wal", "ledger.db-shm", "ledger.db-journal")


def _staging_pattern(out: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(out.name)}\.partial-(\d+)-[0-9a-f]+")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _staging_dir(out: Path) -> Path:
    """Create the run's own sibling folder; remove those of earlier runs that died.

    Its name, ``.<out>.partial-<pid>-<random>``, is the demo's alone; one whose
    process no longer exists is what a crash left behind, removed here so that it
    never blocks (or pollutes) a later run.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    pattern = _staging_pattern(out)
    for candidate in out.parent.iterdir():
        match = pattern.fullmatch(candidate.name)
        if match and candidate.is_dir() and not _alive(int(match[1])):
            _log.info("removing %s, left by a demo run that did not finish", candidate)
            shutil.rmtree(candidate, ignore_errors=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(6)}"
    staging.mkdir()
    return staging


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_manifest(staging: Path) -> None:
    """Record every file the run wrote with its SHA-256 (what ``--overwrite`` may remove)."""
    files = {p.name: _digest(p) for p in sorted(staging.iterdir()) if p.is_file()}
    (staging / MANIFEST).write_text(json.dumps({"files": files}, indent=2), encoding="utf-8")


def _not_ours(out: Path) -> list[str]:
    """List what in ``out`` the previous run did not write or changed since (empty: all ours).

    The previous run's manifest names its files and their digests: a ledger that
    gained API tokens, participants or budgets after the demo no longer matches
    it, and neither does any file the demo did not write.
    """
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not an object")
    except (OSError, ValueError, TypeError, KeyError):
        return [f"no readable {MANIFEST}: not known to be a finished demo run"]
    reasons = []
    for path in sorted(out.iterdir()):
        if path.name == MANIFEST:
            continue
        if path.name in _SIDECARS and path.is_file() and path.stat().st_size == 0:
            continue
        if path.name not in files or not path.is_file():
            reasons.append(f"{path.name} was not written by the demo")
        elif _digest(path) != files[path.name]:
            reasons.append(f"{path.name} changed after the demo wrote it")
    return reasons


def _aside(out: Path, label: str) -> Path:
    """Return a free sibling name ``<out>.<label>-<UTC time>`` (``-2``, ``-3``... if taken)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = out.with_name(f"{out.name}.{label}-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = out.with_name(f"{out.name}.{label}-{stamp}-{n}")
    return candidate


def _swap_in(staging: Path, out: Path, *, overwrite: bool) -> tuple[Path | None, list[str]]:
    """Rename the finished run to ``out``; return where the previous contents were kept.

    A previous run whose every file is the demo's own, unchanged, is renamed
    aside and removed only after the swap (with ``overwrite``: without it, a run
    that appeared in ``out`` while this one ran is kept too); anything else in
    ``out`` is kept aside as ``<out>.kept-<UTC time>`` and never deleted.
    """
    if not out.exists():
        staging.rename(out)
        return None, []
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
        staging.rename(out)
        return None, []
    reasons = _not_ours(out)
    if not overwrite and not reasons and (out / "results.json").exists():
        reasons = ["a demo run appeared in the folder while this one ran (no --overwrite)"]
    aside = _aside(out, "kept" if reasons else "previous")
    out.rename(aside)
    try:
        staging.rename(out)
    except BaseException:
        aside.rename(out)
        raise
    if reasons:
        _log.warning("previous contents of %s kept as %s: %s", out, aside, "; ".join(reasons))
        return aside, reasons
    shutil.rmtree(aside)
    return None, []


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


def _empirical_audits(ledger: PrivacyLedger) -> dict[str, dict[str, object]]:
    """Return each participant's newest empirical audit, read back from the signed log."""
    return {
        participant: {**recorded.audit.fields(), "entry": recorded.index}
        for (participant, asset), recorded in sorted(latest_empirical_audits(ledger).items())
        if asset == ASSET_ID
    }


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

    Every file is written into a new sibling folder, renamed to ``config.out``
    only once the run has succeeded; a failed or interrupted run (also by
    ``KeyboardInterrupt``) removes its own folder and leaves ``config.out`` as it
    was. A previous run in ``config.out`` is removed after the swap only when
    its manifest (``.secure-fed-demo.json``) still matches every file in it;
    otherwise the old folder is kept aside (``DemoResults.kept_aside``).

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
    staging = _staging_dir(out)
    try:
        results = _run_into(
            config, fed_config, staging, out, on_round, on_stage, key_passphrase, started
        )
        _write_manifest(staging)
        kept, reasons = _swap_in(staging, out, overwrite=config.overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    results.kept_aside = "" if kept is None else str(kept)
    results.kept_because = reasons
    _log.info("demo finished in %.1f s; results in %s", results.wall_seconds, out)
    return results


def _run_into(
    config: DemoConfig,
    fed_config: FederationConfig,
    staging: Path,
    out: Path,
    on_round: Callable[[RoundResult], None] | None,
    on_stage: StageObserver | None,
    key_passphrase: bytes | None,
    started: float,
) -> DemoResults:
    """Run the federation with every file in ``staging``; name ``out`` in what it writes."""
    url = f"sqlite:///{(out / 'ledger.db').as_posix()}"
    audit = _demo_audit_log(staging, key_passphrase, name=out.name)
    _service_keys(staging, key_passphrase)
    task = config.load_data()
    ledger = PrivacyLedger.from_url(f"sqlite:///{(staging / 'ledger.db').as_posix()}", audit=audit)
    try:
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
                "noise": NOISE[config.reproducible],
                "noise_rng": NOISE_RNG_RUN_SEED if config.reproducible else NOISE_RNG_SECRETS,
                "secure_rng": False,
            },
        )
        contexts = _write_contexts(federation.deployment, staging)
        results.rounds = federation.run(on_round=on_round)
        results.budgets = _budgets(ledger, fed_config)
        if fed_config.privacy_audit is not None:
            results.privacy["empirical_audit"] = _empirical_audits(ledger)
        results.ledger = _signed_head(ledger, audit, out)
        if contexts:
            results.ledger["public_contexts"] = {r: str(out / n) for r, n in contexts.items()}
            results.ledger["recompute_commands"] = _recompute_commands(out, contexts)
    finally:
        ledger.engine.dispose()
    results.wall_seconds = time.perf_counter() - started
    data = results.to_dict()
    (staging / "results.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    write_demo_report(data, staging / "report.html")
    return results

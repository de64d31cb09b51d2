"""Options of ``secure-fed demo``, validated with light code before anything heavy loads.

:meth:`DemoConfig.validate` checks every option the command line exposes
(and the output folder) importing neither torch, Opacus nor the models, so a
bad option fails at once with its typed error, before a progress display is
drawn or a file written. :class:`~secure_fed.federation.config.FederationConfig`
checks the same values again when the run starts (it stays the authority);
the checks here repeat its messages for the options a user types.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from secure_fed.errors import FederationConfigInvalid, UnknownDataset
from secure_fed.evaluation.attacks import AttackSpec, parse_attack_spec
from secure_fed.learning.architectures import ARCHITECTURES
from secure_fed.learning.data import DATASET_REGISTRY
from secure_fed.secure.mode import get_mode, mode_names

if TYPE_CHECKING:
    from secure_fed.federation.config import FederationConfig
    from secure_fed.learning.data import TaskData

#: Participant ids the privacy ledger accepts (``privacy_ledger.budget.participants``).
_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")

__all__ = ["DEMO_FILES", "MANIFEST", "DemoConfig"]

#: The file naming every other file a finished run wrote, with its SHA-256.
MANIFEST = ".secure-fed-demo.json"

#: Files the demo owns inside its working folder.
DEMO_FILES = (
    MANIFEST,
    "ledger.db",
    "ledger.db-wal",
    "ledger.db-shm",
    "results.json",
    "report.html",
    "log-signing-key.pem",
    "log-public-key.pem",
    "report-signing-key.pem",
    "report-public-key.pem",
    "receipt-key.pem",
    "receipt-public-key.pem",
    "scoring.context",
    "publication.context",
)


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Options of ``secure-fed demo`` (the defaults are the embedded demo).

    ``reproducible`` seeds the DP noise from ``seed`` (INSECURE: identical
    numbers run after run in plaintext mode, no DP guarantee; recorded in the
    ledger and in ``results.json``; CKKS and shares keep their own randomness).
    Without it, ``seed`` fixes the data split, the initial models and the
    attacks, but not the DP noise, which comes from ``secrets``.
    ``logit_adjustment`` (default on) is ``FederationConfig.logit_adjustment``: the
    logit-adjusted DP-SGD and distillation losses that keep minority classes.
    ``id_column`` and ``drop_columns`` name columns of the user's tables that are not
    features (row identifiers, which must be distinct, and any others).
    ``privacy_audit`` (default on) runs the one-run empirical audit with
    ``audit_canaries`` canaries per participant, a quarter of them guessed on
    each side, at 95% confidence (:mod:`secure_fed.learning.privacy_audit`).
    """

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
    reproducible: bool = False
    data: Path | None = None
    label_column: str | None = None
    participant_tables: tuple[tuple[str, Path], ...] = ()
    participant_ids: tuple[str, ...] | None = None
    architectures: tuple[str, ...] | None = None
    logit_adjustment: bool = True
    id_column: str | None = None
    drop_columns: tuple[str, ...] = ()
    privacy_audit: bool = True
    audit_canaries: int = 64

    def validate(self) -> AttackSpec | None:
        """Check every option and the output folder; return the parsed attack.

        Raises
        ------
        FederationConfigInvalid
            Naming the option (or the folder that already holds a run).
        UnknownDataset, UnknownMode, UnknownAttack, AttackSpecInvalid
            Listing what is registered.
        """
        self._check_data()  # before the count: --participant tables fix it
        self._check_ids()
        checks = [
            ("participants", 2 <= self.participants <= 100, "an integer in [2, 100]"),
            ("rounds", 1 <= self.rounds <= 1000, "an integer in [1, 1000]"),
            ("alpha", math.isfinite(self.alpha) and self.alpha > 0, "a number > 0"),
            ("epsilon", math.isfinite(self.epsilon) and self.epsilon > 0, "a number > 0"),
            ("audit_canaries", 4 <= self.audit_canaries <= 100_000, "an integer in [4, 100000]"),
        ]
        for name, ok, what in checks:
            if not ok:
                raise FederationConfigInvalid(f"{name} must be {what}, got {getattr(self, name)!r}")
        if self.dataset not in DATASET_REGISTRY:
            raise UnknownDataset(
                f"unknown dataset {self.dataset!r}; registered: {sorted(DATASET_REGISTRY)}"
            )
        self._check_central_dp()
        self._check_architectures()
        attack = None
        if self.attack:
            attack = parse_attack_spec(self.attack, participants=self.participants)
            if attack.count >= self.participants:
                raise FederationConfigInvalid(
                    f"attack count {attack.count} leaves no honest participant"
                )
        self._check_out()
        return attack

    def federation_config(self) -> FederationConfig:
        """Validate, then translate to a :class:`FederationConfig` (imports the learning stack).

        Raises
        ------
        FederationConfigInvalid, UnknownDataset, UnknownMode, UnknownAttack, AttackSpecInvalid
            As :meth:`validate`.
        """
        attack = self.validate()
        from secure_fed.federation.config import FederationConfig
        from secure_fed.learning.privacy_audit import AuditSettings

        audit = AuditSettings(canaries=self.audit_canaries) if self.privacy_audit else None
        config = FederationConfig(
            participants=self.participants,
            rounds=self.rounds,
            alpha=self.alpha,
            epsilon=self.epsilon,
            attack=attack,
            mode=self.mode,
            seed=self.seed,
            central_dp=self.central_dp,
            participant_ids=self.ids(),
            logit_adjustment=self.logit_adjustment,
            privacy_audit=audit,
        )
        if self.architectures:
            config = replace(config, architectures=self.architectures)
        return config

    def ids(self) -> tuple[str, ...] | None:
        """Participant ids chosen by the user (``--participant`` or ``--participant-ids``)."""
        if self.participant_tables:
            return tuple(pid for pid, _ in self.participant_tables)
        return self.participant_ids

    def load_data(self) -> TaskData:
        """Load the task: a built-in dataset, the ``--data`` table or the participants' tables.

        Raises
        ------
        UnknownDataset, DatasetUnavailable
            The built-in dataset is unknown or not installed.
        TabularDataInvalid
            Or one of its subclasses, naming the bad table (see
            :mod:`secure_fed.learning.user_tables`).
        """
        from secure_fed.learning.data import load_task
        from secure_fed.learning.user_tables import task_from_participant_tables, task_from_table

        label = self.label_column or ""
        if self.participant_tables:
            paths = [path for _, path in self.participant_tables]
            return task_from_participant_tables(
                paths,
                label_column=label,
                seed=self.seed,
                id_column=self.id_column,
                drop_columns=self.drop_columns,
            )
        if self.data is not None:
            return task_from_table(
                self.data,
                label_column=label,
                participants=self.participants,
                seed=self.seed,
                id_column=self.id_column,
                drop_columns=self.drop_columns,
            )
        return load_task(self.dataset, seed=self.seed)

    def data_source(self) -> dict[str, object]:
        """Describe what the run learns from (``results.json``): a built-in dataset or tables.

        Tables are named by path, file name, size and SHA-256 (``sha256sum`` checks
        it), with the label, id and dropped columns; a built-in dataset by its name.
        """
        import hashlib

        if self.data is None and not self.participant_tables:
            return {"kind": "built-in", "dataset": self.dataset}
        named = [(None, self.data)] if self.data is not None else list(self.participant_tables)
        files: list[dict[str, object]] = []
        for participant, path in named:
            assert path is not None
            digest = hashlib.sha256()
            with Path(path).open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            entry: dict[str, object] = {"path": str(path), "name": Path(path).name}
            if participant is not None:
                entry["participant"] = participant
            entry.update(bytes=Path(path).stat().st_size, sha256=digest.hexdigest())
            files.append(entry)
        return {
            "kind": "table" if self.data is not None else "participant tables",
            "files": files,
            "label_column": self.label_column,
            "id_column": self.id_column,
            "drop_columns": list(self.drop_columns),
        }

    def _check_data(self) -> None:
        if self.data is not None and self.participant_tables:
            raise FederationConfigInvalid(
                "data: give either --data FILE (one table split among participants) or "
                "--participant ID=FILE (one table each), not both"
            )
        own = self.data is not None or bool(self.participant_tables)
        if own and not self.label_column:
            raise FederationConfigInvalid(
                "label_column: --data and --participant need --label-column NAME"
            )
        if self.label_column and not own:
            raise FederationConfigInvalid(
                "label_column: --label-column applies to --data or --participant tables only"
            )
        self._check_columns(own)
        tables = len(self.participant_tables)
        if tables and tables != self.participants:
            raise FederationConfigInvalid(
                f"participants must be {tables}, the number of --participant tables, "
                f"got {self.participants}"
            )

    def _check_columns(self, own: bool) -> None:
        named = [*([self.id_column] if self.id_column is not None else []), *self.drop_columns]
        if named and not own:
            raise FederationConfigInvalid(
                "id_column: --id-column and --drop-columns apply to --data or --participant "
                "tables only"
            )
        if any(not name for name in named):
            raise FederationConfigInvalid("drop_columns: column names must not be empty")
        if self.label_column in named:
            raise FederationConfigInvalid(
                f"label_column: {self.label_column!r} is the label; it cannot also be "
                "--id-column or in --drop-columns"
            )
        repeated = sorted({n for n in named if named.count(n) > 1})
        if repeated:
            raise FederationConfigInvalid(
                f"drop_columns: {repeated!r} named twice (--id-column is left out already)"
            )

    def _check_ids(self) -> None:
        if self.participant_tables and self.participant_ids is not None:
            raise FederationConfigInvalid(
                "participant_ids: --participant ID=FILE already names the participants; "
                "leave out --participant-ids"
            )
        ids = self.ids()
        if ids is None:
            return
        bad = [pid for pid in ids if not _ID.fullmatch(pid)]
        if bad:
            raise FederationConfigInvalid(
                f"participant ids must be 1-128 characters of [A-Za-z0-9._:@-], got {bad!r}"
            )
        duplicates = sorted({pid for pid in ids if ids.count(pid) > 1})
        if duplicates:
            raise FederationConfigInvalid(f"participant ids must be distinct: {duplicates!r}")
        if len(ids) != self.participants:
            raise FederationConfigInvalid(
                f"participant_ids: {len(ids)} ids for {self.participants} participants"
            )

    def _check_architectures(self) -> None:
        archs = self.architectures
        if archs is None:
            return
        unknown = [a for a in archs if a not in ARCHITECTURES]
        if not archs or unknown:
            raise FederationConfigInvalid(
                f"architectures must name registered models ({', '.join(ARCHITECTURES)}), "
                f"got {list(archs)!r}"
            )

    def _check_central_dp(self) -> None:
        mode = get_mode(self.mode)  # UnknownMode lists the registered names
        dp = self.central_dp
        if dp is not None and not (math.isfinite(dp) and dp > 0 and mode.central_dp):
            able = [m for m in mode_names() if get_mode(m).central_dp]
            raise FederationConfigInvalid(
                f"central_dp must be a noise multiplier > 0 in a mode that adds it before the "
                f"aggregator sees the aggregate ({able}), got {dp!r} in mode {self.mode!r}"
            )

    def _check_out(self) -> None:
        """Refuse a folder holding a finished run or other files, unless ``overwrite``.

        A folder with demo files but no ``results.json`` is what an interrupted
        run of an earlier version left: it does not block (the run keeps it aside).
        """
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise FederationConfigInvalid(f"out {str(out)!r} exists and is not a folder")
        _check_not_enclosing(out)
        if self.overwrite or not out.is_dir():
            return
        names = sorted(p.name for p in out.iterdir())
        if "results.json" in names:
            raise FederationConfigInvalid(
                f"out folder {str(out)!r} already holds a demo run (results.json); "
                "pass --overwrite to replace it or choose another --out"
            )
        others = [name for name in names if name not in DEMO_FILES]
        if others:
            shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
            raise FederationConfigInvalid(
                f"out folder {str(out)!r} holds files that are not a demo run ({shown}); "
                "choose another --out, or pass --overwrite to keep them aside in a "
                "timestamped sibling folder"
            )


def _check_not_enclosing(out: Path) -> None:
    """Refuse an output folder that holds the working directory, the home folder or ``/``.

    A run is swapped in by renaming, and what it did not write is renamed aside: with
    ``--out .`` (or a parent of the working directory, the home folder, the root) that
    would move the user's own folder.
    """
    target = out.resolve()
    here = Path.cwd().resolve()
    protected = {Path(target.anchor), Path.home().resolve()}
    if target == here or target in here.parents or target in protected:
        raise FederationConfigInvalid(
            f"out {str(out)!r} is the working directory, one of its parents, the home folder "
            "or the filesystem root; choose a folder of its own, e.g. --out secure-fed-work/demo"
        )

"""``participant.toml``: one participant's node, read and validated field by field.

Every participant runs one SuperNode whose node config names this file
(``flower-supernode --node-config 'participant-config="/etc/secure-fed/participant.toml"'``).
Relative paths are taken from the file's own folder. Format::

    [participant]
    id = "hospital-1"              # its ledger participant id, as the server lists it
    architecture = "mlp"           # a MODEL_REGISTRY name
    state_dir = "state"            # model checkpoint and its own round record

    [data]                         # either its own table ...
    path = "hospital-1.csv"        # CSV or Parquet, features already scaled
    label_column = "diagnosis"
    classes = ["benign", "malignant"]  # label numbering shared by the federation
    # ... or a built-in data set, this participant's Dirichlet share of it:
    # builtin = "digits"

    [public]                       # the public reference set D_pub
    path = "public.npy"            # float32 [N_pub, features]; or builtin = true
    sm3 = "<64 hex>"               # checked before any training

    [dp]                           # the participant's own DP goal
    epsilon = 8.0
    delta = 1e-5
    rounds = 3
    insecure_seeded_noise = false  # true: DP-SGD noise seeded from the federation seed --
                                   # reproducible runs for tests, NO DP guarantee (recorded)

    [audit]                        # optional: the one-run empirical privacy audit
    canaries = 64                  # synthetic canaries kept in state_dir (0 or absent: off)

    [keys]
    dir = "keys/participants/hospital-1"   # from `secure-fed deploy keys`

    [budget]                       # where its DP-SGD charges go: the ledger's API ...
    api_url = "https://127.0.0.1:8443"
    token_file = "api-token"
    ca_file = "keys/tls/ca.pem"    # optional
    retry_seconds = 60             # optional: how long one call retries an API that does not
                                   # answer (exponential backoff, jitter), in (0, 3600)
    # ... or a local ledger of its own (try-outs): ledger_url = "sqlite:///ledger.db"
    # audit_key = "log-signing-key.pem"  # its log's SM2 key (default: beside a SQLite
    #                                    # ledger file, made for a new ledger)

    [notice]                       # optional: signed upload notices, sent before each upload
    url = "https://127.0.0.1:8444" # the round's opening gatekeeper: key authority (ckks)
                                   # or helper (shares); POST /v1/notice
    ca_file = "keys/tls/ca.pem"
    cert_file = "keys/tls/hospital-1.pem"  # this participant's client certificate
    key_file = "keys/tls/hospital-1.key"

Every bad field raises :class:`~secure_fed.deploy.config_errors.ParticipantConfigInvalid`
naming the file and the field; a public set whose SM3 differs from ``public.sm3``
raises :class:`~secure_fed.deploy.config_errors.PublicSetMismatch`.
"""

from __future__ import annotations

import logging
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.deploy.config_errors import ParticipantConfigInvalid, PublicSetMismatch

__all__ = [
    "ParticipantConfig",
    "TomlFields",
    "load_participant_config",
    "node_config_path",
    "read_participant_id",
]

_log = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9._@-]{1,100}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class TomlFields:
    """Typed reads of one TOML file's fields; each bad field raises ``error`` naming it."""

    def __init__(
        self, path: Path, data: dict[str, Any], error: type[ParticipantConfigInvalid] | Any
    ):
        self.path, self.data, self.error = path, data, error

    @classmethod
    def read(cls, path: str | Path, error: Any) -> TomlFields:
        """Parse ``path``; an unreadable or malformed file raises ``error``."""
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise error(f"{file}: cannot read the file: {exc}", field="") from None
        return cls(file, data, error)

    def fail(self, name: str, what: str) -> Exception:
        """Return the typed error for field ``name``."""
        return self.error(f"{self.path}: {name} must be {what}", field=name)

    def get(self, name: str) -> Any:
        """Return the raw value of dotted field ``name`` (None when absent)."""
        node: Any = self.data
        for part in name.split("."):
            if not isinstance(node, dict):
                return None
            node = node.get(part)
        return node

    def text(
        self, name: str, *, pattern: re.Pattern[str] | None = None, optional: bool = False
    ) -> str:
        """Return a non-empty string field."""
        value = self.get(name)
        if value is None and optional:
            return ""
        if not isinstance(value, str) or not value or (pattern and not pattern.match(value)):
            raise self.fail(
                name, "a non-empty string" + (f" matching {pattern.pattern}" if pattern else "")
            )
        return value

    def number(self, name: str, *, low: float, high: float, default: float | None = None) -> float:
        """Return a finite number in ``(low, high)`` (``default`` when absent and given)."""
        value = self.get(name)
        if value is None and default is not None:
            return default
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low < value < high:
            raise self.fail(name, f"a number in ({low:g}, {high:g}), got {value!r}")
        return float(value)

    def integer(self, name: str, *, low: int, high: int, default: int | None = None) -> int:
        """Return an integer in ``[low, high]`` (``default`` when absent and given)."""
        value = self.get(name)
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(name, f"an integer in [{low}, {high}], got {value!r}")
        return value

    def path_of(self, name: str, *, must_exist: bool = True, optional: bool = False) -> Path | None:
        """Return a path field, relative paths taken from the file's folder."""
        raw = self.text(name, optional=optional)
        if not raw:
            return None
        found = Path(raw) if Path(raw).is_absolute() else self.path.parent / raw
        if must_exist and not found.exists():
            raise self.fail(name, f"an existing path, {found} does not exist")
        return found


@dataclass(frozen=True, kw_only=True)
class ParticipantConfig:
    """A validated ``participant.toml`` (see the module docstring for the format)."""

    source: Path
    participant_id: str
    architecture: str
    state_dir: Path
    data_path: Path | None
    label_column: str
    classes: tuple[str, ...]
    builtin: str
    public_path: Path | None
    public_sm3: str
    epsilon: float
    delta: float
    dp_rounds: int
    insecure_seeded_noise: bool
    key_dir: Path
    api_url: str
    token_file: Path | None
    ca_file: Path | None
    ledger_url: str
    audit_key: Path | None = None
    retry_seconds: float = 60.0
    audit_canaries: int = 0
    notice_url: str = ""
    notice_ca: Path | None = None
    notice_cert: Path | None = None
    notice_key: Path | None = None

    def load_public(self, builtin_public: np.ndarray | None = None) -> np.ndarray:
        """Return the public set, checked against ``public.sm3`` before anything uses it.

        Raises
        ------
        ParticipantConfigInvalid
            If the file cannot be read as a 2-d float array.
        PublicSetMismatch
            If its SM3 differs from the configured one.
        """
        if self.public_path is None:
            if builtin_public is None:
                raise ParticipantConfigInvalid(
                    f"{self.source}: public.path is needed with own data", field="public.path"
                )
            public = np.asarray(builtin_public, dtype=np.float32)
        else:
            try:
                public = np.asarray(np.load(self.public_path, allow_pickle=False), dtype=np.float32)
            except (OSError, ValueError) as exc:
                raise ParticipantConfigInvalid(
                    f"{self.source}: public.path {self.public_path} is not a .npy array: {exc}",
                    field="public.path",
                ) from None
            if public.ndim < 2 or len(public) == 0:
                raise ParticipantConfigInvalid(
                    f"{self.source}: public.path must hold a [rows, features...] array",
                    field="public.path",
                )
        from secure_fed.federation.participant import public_set_digest

        found = public_set_digest(public)
        if found != self.public_sm3:
            raise PublicSetMismatch(
                f"{self.source}: the public set's SM3 is {found}, public.sm3 says "
                f"{self.public_sm3}",
                field="public.sm3",
            )
        return public


def _insecure_flag(f: TomlFields) -> bool:
    value = f.get("dp.insecure_seeded_noise")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise f.fail("dp.insecure_seeded_noise", f"true or false, got {value!r}")
    if value:
        _log.warning("%s: DP-SGD noise seeded from the federation seed: NO DP guarantee", f.path)
    return value


def node_config_path(value: object) -> Path:
    """Return the ``participant-config`` node-config value as a path.

    Raises
    ------
    ParticipantConfigInvalid
        If the SuperNode was started without ``--node-config participant-config=...``.
    """
    if not isinstance(value, str) or not value:
        raise ParticipantConfigInvalid(
            "the SuperNode needs --node-config 'participant-config=\"/path/participant.toml\"'",
            field="participant-config",
        )
    return Path(value)


def read_participant_id(path: str | Path) -> str:
    """Return ``participant.id`` of ``participant.toml`` without validating the rest.

    What a node answers when the ServerApp asks who it is; the whole file is
    validated by :func:`load_participant_config` before the node does any work.

    Raises
    ------
    ParticipantConfigInvalid
        For an unreadable file or a missing or malformed id.
    """
    return TomlFields.read(path, ParticipantConfigInvalid).text("participant.id", pattern=_ID)


def load_participant_config(path: str | Path) -> ParticipantConfig:
    """Read and validate ``participant.toml``.

    Raises
    ------
    ParticipantConfigInvalid
        For an unreadable file or any bad field (named in the message and ``field``).
    """
    # The registries import torch: loaded here, not at import time, so that a node
    # answering who it is (``read_participant_id``) starts in a second, not in ten.
    from secure_fed.learning.data import DATASET_REGISTRY
    from secure_fed.learning.models import MODEL_REGISTRY

    f = TomlFields.read(path, ParticipantConfigInvalid)
    architecture = f.text("participant.architecture")
    if architecture not in MODEL_REGISTRY:
        raise f.fail("participant.architecture", f"one of {sorted(MODEL_REGISTRY)}")
    builtin = f.text("data.builtin", optional=True)
    if builtin and builtin not in DATASET_REGISTRY:
        raise f.fail("data.builtin", f"one of {sorted(DATASET_REGISTRY)}")
    data_path = f.path_of("data.path", optional=bool(builtin))
    if bool(builtin) == (data_path is not None):
        raise f.fail("data", "either data.path (own table) or data.builtin, not both")
    classes = f.get("data.classes")
    if data_path is not None and (
        not isinstance(classes, list)
        or len(classes) < 2
        or len(set(map(str, classes))) != len(classes)
    ):
        raise f.fail("data.classes", "a list of at least 2 distinct labels")
    public_builtin = f.get("public.builtin") is True
    if public_builtin and not builtin:
        raise f.fail("public.builtin", "used only with data.builtin")
    token_file = f.path_of("budget.token_file", optional=True)
    api_url = f.text("budget.api_url", optional=True)
    ledger_url = f.text("budget.ledger_url", optional=True)
    if bool(api_url) == bool(ledger_url):
        raise f.fail("budget", "either budget.api_url (with token_file) or budget.ledger_url")
    if api_url and token_file is None:
        raise f.fail("budget.token_file", "the API token file when budget.api_url is set")
    return ParticipantConfig(
        source=f.path,
        participant_id=f.text("participant.id", pattern=_ID),
        architecture=architecture,
        state_dir=f.path_of("participant.state_dir", must_exist=False) or f.path.parent,
        data_path=data_path,
        label_column=f.text("data.label_column", optional=not data_path),
        classes=tuple(str(c) for c in classes) if data_path is not None else (),
        builtin=builtin,
        public_path=None if public_builtin else f.path_of("public.path"),
        public_sm3=f.text("public.sm3", pattern=_HEX64),
        epsilon=f.number("dp.epsilon", low=0, high=1e6),
        delta=f.number("dp.delta", low=0, high=1),
        dp_rounds=f.integer("dp.rounds", low=1, high=1000),
        insecure_seeded_noise=_insecure_flag(f),
        key_dir=f.path_of("keys.dir") or f.path.parent,
        api_url=api_url,
        token_file=token_file,
        ca_file=f.path_of("budget.ca_file", optional=True),
        ledger_url=ledger_url,
        audit_key=f.path_of("budget.audit_key", optional=True),
        retry_seconds=f.number("budget.retry_seconds", low=0, high=3600, default=60.0),
        audit_canaries=_audit_canaries(f),
        **_notice_fields(f),
    )


def _notice_fields(f: TomlFields) -> dict[str, Any]:
    """``[notice]``: the gatekeeper's HTTPS URL and the TLS files (all or none)."""
    url = f.text("notice.url", optional=True)
    if not url:
        return {}
    if not url.startswith("https://"):
        raise f.fail("notice.url", f"an https:// URL, got {url!r}")
    return {
        "notice_url": url.rstrip("/"),
        "notice_ca": f.path_of("notice.ca_file"),
        "notice_cert": f.path_of("notice.cert_file"),
        "notice_key": f.path_of("notice.key_file"),
    }


def _audit_canaries(f: TomlFields) -> int:
    """``audit.canaries``: 0 (off, the default) or a canary count in [4, 100000]."""
    value = f.integer("audit.canaries", low=0, high=100_000, default=0)
    if 0 < value < 4:
        raise f.fail("audit.canaries", f"0 (off) or at least 4, got {value}")
    return value

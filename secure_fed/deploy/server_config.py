"""``server.toml``: the aggregator operator's ServerApp, read and validated field by field.

Its path goes to the run as Flower run config (``flwr run <app> <connection>
--run-config 'server-config="/etc/secure-fed/server.toml"'``). Relative paths
are taken from the file's folder. Format::

    [server]
    namespace = "consortium"         # separates this federation's rounds in the store
    ledger_url = "postgresql+psycopg://ledger@db/ledger"   # or sqlite:///ledger.db
    log_signing_key = "keys/aggregator/log-signing-key.pem"   # SM2 PEM, signs tree heads
    log_key_passphrase_file = "log-key-passphrase"            # optional (unencrypted PEM)
    log_origin = "secure-fed/consortium"   # audit log origin (default: secure-fed/<namespace>)
    key_dir = "keys/aggregator"      # the aggregator's directory of the key ceremony
    reply_timeout = 600              # seconds a node has to answer a round (dropouts after)
    publication_timeout = 300        # seconds a node has to acknowledge the publication
    join_timeout = 120               # seconds to wait for every node to say who it is

    [federation]                     # what every node trains with (sent to the nodes)
    mode = "plaintext"               # plaintext | ckks | shares
    rounds = 3
    seed = 0
    min_participants = 2
    builtin = "digits"               # a built-in task split among the participants; or
    num_classes = 2                  # with own tables: the number of classes
    num_public = 400                 # with own tables: rows of the public set
    epochs_per_round = 8             # optional training knobs (FederationConfig's defaults)
    lr = 0.3
    batch_size = 128
    evidence_rows = 100              # built-in tasks only: rows of each round's slice
    insecure_seeded_slice = false    # true: the slice's key follows from the seed --
                                     # PREDICTABLE by every participant (tests only)
    max_retries = 3                  # aggregator only: rounds run again after an
                                     # infrastructure failure (0: never), in [0, 100]
    retry_delay = 5                  # seconds before the first retry (doubles, at most 60)

    [public]
    sm3 = "<64 hex>"                 # SM3 of the public set every node must hold

    [[participants]]                 # one table per participant, in a fixed order
    id = "hospital-1"
    architecture = "mlp"
    rows = 300                       # its base share (own tables; built-in: the split's)

    [parties]                        # ckks and shares modes: the key authority / helper
    authority_url = "https://127.0.0.1:8601"
    helper_url = "https://127.0.0.1:8602"      # shares mode
    verifier_url = "https://127.0.0.1:8603"    # ckks mode: required when the key
                                               # ceremony made a verifier (its default)
    ca_file = "keys/tls/ca.pem"                # the CA of their server certificates
    client_cert = "keys/tls/aggregator.pem"    # the aggregator's client certificate (mTLS)
    client_key = "keys/tls/aggregator.key"

    [receipts]
    required = true                  # uploads need the ledger's signed budget receipt
    public_key = "keys/api/receipt-public.pem" # optional: the key ceremony's manifest has it

Each round's labeled slice (built-in tasks) is drawn with the aggregator's secret
key, ``<key_dir>/evidence-slice.key`` (:mod:`secure_fed.deploy.slice_key`, made on
the first start); ``insecure_seeded_slice`` derives it from the seed instead, so
that a test can compare a deployment with an in-process run.

``key_dir`` is the aggregator's directory of the key ceremony
(:func:`secure_fed.deploy.keys.create_keys`), whose manifest names the mode,
the participants' SM2 keys and the receipt key. In ``plaintext`` mode a folder
holding ``participants/<id>.pub.pem`` serves instead (no secret keys exist).

Every bad field raises :class:`~secure_fed.deploy.config_errors.ServerConfigInvalid`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from secure_fed.deploy.config_errors import ServerConfigInvalid
from secure_fed.deploy.participant_config import TomlFields
from secure_fed.errors import ConfigurationInvalid
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.learning.architectures import ARCHITECTURES
from secure_fed.learning.data import DATASET_REGISTRY
from secure_fed.secure.mode import mode_names

__all__ = ["ServerConfig", "config_from_settings", "load_server_config", "settings_of"]

_ID = re.compile(r"^[A-Za-z0-9._@-]{1,100}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: Optional ``[federation]`` knobs passed to :class:`FederationConfig` as they are.
_KNOBS = {
    "alpha": float,
    "epochs_per_round": int,
    "lr": float,
    "batch_size": int,
    "weighting_alpha": float,
    "weighting_beta": float,
    "evidence_rows": int,
    "sharpen_temperature": float,
    "exclude_outliers": bool,
    "max_flagged": int,
    "max_weight": float,
    "epsilon": float,
    "delta": float,
    "private": bool,
    "logit_adjustment": bool,
}


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """A validated ``server.toml`` (see the module docstring for the format)."""

    source: Path
    namespace: str
    ledger_url: str
    log_signing_key: Path | None
    log_key_passphrase_file: Path | None
    log_origin: str
    key_dir: Path | None
    reply_timeout: float
    publication_timeout: float
    join_timeout: float
    federation: FederationConfig
    builtin: str
    num_classes: int
    num_public: int
    public_sm3: str
    rows: dict[str, int]
    authority_url: str
    helper_url: str
    ca_file: Path | None
    client_cert: Path | None
    client_key: Path | None
    receipts_required: bool
    receipt_public_key: Path | None
    insecure_seeded_slice: bool = False
    #: The verifier service (ckks mode; ``""``: none configured).
    verifier_url: str = ""
    #: Rounds run again after an infrastructure failure (``[federation] max_retries``).
    max_retries: int = 3
    #: Seconds before the first retry; doubled before each later check, at most 60.
    retry_delay: float = 5.0


def load_server_config(path: str | Path) -> ServerConfig:
    """Read and validate ``server.toml``.

    Raises
    ------
    ServerConfigInvalid
        For an unreadable file or any bad field (named in the message and ``field``).
    """
    f = TomlFields.read(path, ServerConfigInvalid)
    mode = f.text("federation.mode")
    if mode not in mode_names():
        raise f.fail("federation.mode", f"one of {sorted(mode_names())}")
    builtin = f.text("federation.builtin", optional=True)
    if builtin and builtin not in DATASET_REGISTRY:
        raise f.fail("federation.builtin", f"one of {sorted(DATASET_REGISTRY)}")
    ids, archs, rows = _participants(f, need_rows=not builtin)
    federation = _federation(f, mode=mode, ids=ids, archs=archs)
    return ServerConfig(
        source=f.path,
        namespace=f.text("server.namespace", pattern=_ID),
        ledger_url=f.text("server.ledger_url"),
        log_signing_key=f.path_of("server.log_signing_key", optional=True),
        log_key_passphrase_file=f.path_of("server.log_key_passphrase_file", optional=True),
        log_origin=f.text("server.log_origin", optional=True)
        or f"secure-fed/{f.text('server.namespace', pattern=_ID)}",
        key_dir=f.path_of("server.key_dir", optional=mode == "plaintext"),
        reply_timeout=f.number("server.reply_timeout", low=0, high=86400, default=600.0),
        publication_timeout=f.number(
            "server.publication_timeout", low=0, high=86400, default=300.0
        ),
        join_timeout=f.number("server.join_timeout", low=0, high=86400, default=120.0),
        federation=federation,
        builtin=builtin,
        num_classes=0 if builtin else f.integer("federation.num_classes", low=2, high=10_000),
        num_public=0 if builtin else f.integer("federation.num_public", low=1, high=10**7),
        public_sm3=f.text("public.sm3", pattern=_HEX64),
        rows=rows,
        authority_url=f.text("parties.authority_url", optional=mode != "ckks"),
        helper_url=f.text("parties.helper_url", optional=mode != "shares"),
        verifier_url=f.text("parties.verifier_url", optional=True),
        ca_file=f.path_of("parties.ca_file", optional=True),
        client_cert=f.path_of("parties.client_cert", optional=True),
        client_key=f.path_of("parties.client_key", optional=True),
        receipts_required=_flag(f, "receipts.required", default=mode != "plaintext"),
        receipt_public_key=f.path_of("receipts.public_key", optional=True),
        insecure_seeded_slice=_flag(f, "federation.insecure_seeded_slice", default=False),
        max_retries=f.integer("federation.max_retries", low=0, high=100, default=3),
        retry_delay=f.number("federation.retry_delay", low=0, high=3600, default=5.0),
    )


def _flag(f: TomlFields, name: str, *, default: bool) -> bool:
    value = f.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise f.fail(name, f"true or false, got {value!r}")
    return value


def _participants(
    f: TomlFields, *, need_rows: bool
) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, int]]:
    entries = f.get("participants")
    if not isinstance(entries, list) or len(entries) < 2:
        raise f.fail("participants", "a list of at least 2 [[participants]] tables")
    ids, archs, rows = [], [], {}
    for k, entry in enumerate(entries):
        sub = TomlFields(f.path, entry if isinstance(entry, dict) else {}, f.error)
        pid = sub.text("id", pattern=_ID)
        arch = sub.text("architecture")
        if arch not in ARCHITECTURES:
            raise f.fail(f"participants[{k}].architecture", f"one of {sorted(ARCHITECTURES)}")
        if need_rows:
            rows[pid] = sub.integer("rows", low=1, high=10**9)
        ids.append(pid)
        archs.append(arch)
    if len(set(ids)) != len(ids):
        raise f.fail("participants", f"distinct ids, got {ids}")
    return tuple(ids), tuple(archs), rows


def _federation(
    f: TomlFields, *, mode: str, ids: tuple[str, ...], archs: tuple[str, ...]
) -> FederationConfig:
    knobs: dict[str, Any] = {}
    for name, kind in _KNOBS.items():
        value = f.get(f"federation.{name}")
        if value is None:
            continue
        ok = (
            isinstance(value, bool)
            if kind is bool
            else (isinstance(value, int | float) and not isinstance(value, bool))
        )
        if not ok or (kind is int and not isinstance(value, int)):
            raise f.fail(f"federation.{name}", f"of type {kind.__name__}, got {value!r}")
        knobs[name] = value
    settings = {
        **knobs,
        "participants": len(ids),
        "participant_ids": list(ids),
        "architectures": list(archs),
        "mode": mode,
        "rounds": f.integer("federation.rounds", low=1, high=1000),
        "seed": f.integer("federation.seed", low=0, high=2**31 - 1, default=0),
        "min_participants": f.integer("federation.min_participants", low=1, high=len(ids)),
    }
    try:
        return config_from_settings(settings)
    except ConfigurationInvalid as exc:
        raise ServerConfigInvalid(
            f"{f.path}: [federation]: {exc.message}", field="federation"
        ) from None


def settings_of(config: FederationConfig) -> dict[str, Any]:
    """Return the JSON-ready settings the ServerApp sends every node (inverse: below)."""
    out: dict[str, Any] = {}
    for field in fields(config):
        value = getattr(config, field.name)
        if field.name in ("attack", "central_dp"):
            continue
        if isinstance(value, DistillSettings):
            value = asdict(value)
        out[field.name] = list(value) if isinstance(value, tuple) else value
    return out


def config_from_settings(settings: dict[str, Any], **overrides: Any) -> FederationConfig:
    """Rebuild the :class:`FederationConfig` from :func:`settings_of` output.

    Raises
    ------
    FederationConfigInvalid
        If a setting is out of range or unknown.
    """
    values = {**settings, **overrides}
    values.setdefault("baseline", False)
    if isinstance(values.get("distill"), dict):
        values["distill"] = DistillSettings(**values["distill"])
    for name in ("architectures", "participant_ids"):
        if isinstance(values.get(name), list):
            values[name] = tuple(values[name])
    try:
        return FederationConfig(**values)
    except TypeError as exc:
        raise ServerConfigInvalid(
            f"unknown federation setting: {exc}", field="federation"
        ) from None

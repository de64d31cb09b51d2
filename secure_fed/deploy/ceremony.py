"""The key ceremony's files: the public manifest, per-party directories, file readers.

:func:`create_keys` generates every key of a try-out in one process and writes
each party's share of it (layout in :mod:`secure_fed.deploy.keys`). Secret files
are created with mode 0600 in 0700 directories; SM2 keys are unencrypted PKCS#8
PEM (``to_pem_unencrypted_insecure``: a try-out on one machine), CKKS secret keys
are sealed with SM4-GCM under a random 16-byte ``seal.key`` kept beside them (in
production that key comes from the operator's KMS). ``party.json`` is public.
Each participant also gets its SuperNode key pair (``node.key``, ``node.pub``) and
the SuperLink operator every node's public key (``superlink/nodes/<id>.pub``:
:mod:`secure_fed.deploy.node_auth`).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey
from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.node_auth import write_node_keys
from secure_fed.deploy.tls import create_local_ca, private_dir, write_private
from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy, PolicyPin, SignedPolicy
from secure_fed.secure.deployment import DeploymentPlan
from secure_fed.secure.plan_journal import PlanJournal

if TYPE_CHECKING:
    from crypto.shares import ShareMacKey

__all__ = [
    "DEALER_MASK",
    "FORMAT",
    "INPUT_MASKS",
    "MAC_KEY",
    "MAC_KEY_BYTES",
    "MAC_KEY_SHARE",
    "MANIFEST",
    "MODES",
    "KeyManifest",
    "create_keys",
    "read_json",
    "read_mac",
    "read_mac_lanes",
    "read_manifest",
    "pin_policy",
    "read_policy",
    "read_secret",
    "read_sm2",
    "require_mode",
]

_log = logging.getLogger(__name__)

MANIFEST = "party.json"
#: The consortium policy every participant signed (public; in every party's directory).
POLICY = "policy.json"
FORMAT = "secure-fed-keys/1"
MODES = ("ckks", "shares")
ROLES = ("aggregator", "keyauthority", "helper", "participant", "api", "verifier")
SECRET_BYTES = 32
_PARAMS = {"shares": "Z2^64/f12"}
#: Authenticated shares' files (shares mode): a server's share of the MAC keys, the
#: dealer's whole keys, the dealer-helper mask secret, the dealer's participant secrets.
MAC_KEY_SHARE = "mac-key-share.secret"
MAC_KEY = "mac-key.secret"
DEALER_MASK = "dealer-mask.secret"
INPUT_MASKS = "input-masks.json"
#: Bytes of the MAC keys (two lanes of Z_2^64, :data:`crypto.shares.mac.MAC_LANES`).
MAC_KEY_BYTES = 16


@dataclass(frozen=True)
class KeyManifest:
    """The public facts every party of a deployment shares (``party.json``)."""

    role: str
    mode: str
    shape: tuple[int, int]
    participant_ids: tuple[str, ...]
    min_participants: int
    publication_preset: str | None
    params: str
    fingerprints: Mapping[str, str]
    aggregator_key: SM2PublicKey
    participant_keys: Mapping[str, SM2PublicKey] = field(repr=False)
    receipt_key: SM2PublicKey | None = field(default=None, repr=False)
    participant_id: str | None = None
    #: The verifier's attestation key (ckks mode): the key authority pins it and then
    #: decrypts nothing the verifier did not attest. ``None``: no verifier.
    verifier_key: SM2PublicKey | None = field(default=None, repr=False)

    def public_view(self) -> dict[str, Any]:
        """Return the manifest as JSON-ready data (what ``party.json`` holds)."""
        out: dict[str, Any] = {
            "format": FORMAT,
            "role": self.role,
            "mode": self.mode,
            "shape": list(self.shape),
            "participant_ids": list(self.participant_ids),
            "min_participants": self.min_participants,
            "publication_preset": self.publication_preset,
            "params": self.params,
            "fingerprints": dict(self.fingerprints),
            "aggregator_key": self.aggregator_key.to_pem().decode("ascii"),
            "participant_keys": {
                p: k.to_pem().decode("ascii") for p, k in self.participant_keys.items()
            },
            "receipt_key": None
            if self.receipt_key is None
            else self.receipt_key.to_pem().decode("ascii"),
        }
        if self.verifier_key is not None:
            out["verifier_key"] = self.verifier_key.to_pem().decode("ascii")
        if self.participant_id is not None:
            out["participant_id"] = self.participant_id
        return out


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object file.

    Raises
    ------
    KeyDirectoryInvalid
        Missing, unreadable or not a JSON object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KeyDirectoryInvalid(f"{path} cannot be read as JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise KeyDirectoryInvalid(f"{path} is not a JSON object")
    return data


def read_policy(directory: Path) -> SignedPolicy:
    """Read the signed consortium policy of a party's directory (signatures checked on pin).

    Raises
    ------
    KeyDirectoryInvalid
        Missing or unreadable.
    PolicyInvalid
        Not a signed policy file.
    """
    path = Path(directory) / POLICY
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyDirectoryInvalid(f"consortium policy {path} cannot be read: {exc}") from exc
    return SignedPolicy.from_json(data)


def pin_policy(
    directory: Path,
    manifest: KeyManifest,
    *,
    party: str,
    audit: AuditSink | None,
    journal: PlanJournal,
) -> PolicyPin:
    """Verify the directory's ``policy.json`` against the manifest's participants and pin it.

    Raises
    ------
    KeyDirectoryInvalid
        The file is missing or unreadable.
    PolicyInvalid
        A signature is missing or wrong, or ``journal`` pins a newer or other policy.
    """
    keys = manifest.participant_keys
    return PolicyPin(read_policy(directory), keys, party=party, audit=audit, journal=journal)


def read_secret(path: Path, *, size: int = SECRET_BYTES) -> bytes:
    """Read a hex-encoded secret of exactly ``size`` bytes.

    Raises
    ------
    KeyDirectoryInvalid
        Missing, not hex, or of another length.
    """
    try:
        value = bytes.fromhex(Path(path).read_text(encoding="ascii").strip())
    except (OSError, ValueError) as exc:
        raise KeyDirectoryInvalid(f"secret {path} cannot be read: {exc}") from exc
    if len(value) != size:
        raise KeyDirectoryInvalid(f"secret {path} must be {size} bytes, got {len(value)}")
    return value


def read_mac(directory: Path, name: str) -> ShareMacKey:
    """Derive the MAC key of ``directory/<name>.secret`` (recipient ``name``).

    Raises
    ------
    KeyDirectoryInvalid
        Missing or malformed secret.
    """
    from crypto.shares import ShareMacKey

    return ShareMacKey.derive(read_secret(Path(directory) / f"{name}.secret"), recipient=name)


def read_sm2(directory: Path, name: str) -> SM2PrivateKey:
    """Read ``directory/<name>.key.pem`` (unencrypted PKCS#8).

    Raises
    ------
    KeyDirectoryInvalid
        Missing or not an SM2 private key.
    """
    path = Path(directory) / f"{name}.key.pem"
    try:
        return SM2PrivateKey.from_pem(path.read_bytes(), passphrase=None)
    except (OSError, CryptoError) as exc:
        raise KeyDirectoryInvalid(f"SM2 key {path} refused: {exc}") from exc


def _public(pem: object, what: str) -> SM2PublicKey:
    try:
        return SM2PublicKey.from_pem(str(pem).encode("ascii"))
    except (CryptoError, UnicodeError) as exc:
        raise KeyDirectoryInvalid(f"manifest {what} is not an SM2 public key: {exc}") from exc


def _shape(raw: object) -> tuple[int, int]:
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(v, int) for v in raw)):
        raise KeyDirectoryInvalid(f"manifest shape must be [N, C], got {raw!r}")
    return raw[0], raw[1]


def read_manifest(directory: Path, *, role: str | None = None) -> KeyManifest:
    """Read and check ``directory/party.json`` (of ``role``, when given).

    Raises
    ------
    KeyDirectoryInvalid
        Missing, of another format or role, or with a malformed field.
    """
    data = read_json(Path(directory) / MANIFEST)
    if data.get("format") != FORMAT:
        raise KeyDirectoryInvalid(f"{directory} is not a {FORMAT} key directory")
    if role is not None and data.get("role") != role:
        raise KeyDirectoryInvalid(f"{directory} holds the {data.get('role')!r} keys, not {role!r}")
    try:
        plan = DeploymentPlan(
            shape=_shape(data.get("shape")),
            participant_ids=tuple(data.get("participant_ids") or ()),
            min_participants=data.get("min_participants"),  # type: ignore[arg-type]
            publication_preset=data.get("publication_preset"),
        )
    except (ModeSetupInvalid, TypeError) as exc:
        raise KeyDirectoryInvalid(f"manifest of {directory} refused: {exc}") from exc
    keys = data.get("participant_keys")
    if data.get("mode") not in MODES or not isinstance(keys, dict):
        raise KeyDirectoryInvalid(f"manifest of {directory} names no mode {MODES} or keys")
    receipt, verifier = data.get("receipt_key"), data.get("verifier_key")
    return KeyManifest(
        role=str(data.get("role")),
        mode=str(data["mode"]),
        shape=plan.shape,
        participant_ids=plan.participant_ids,
        min_participants=plan.min_participants,
        publication_preset=plan.publication_preset,
        params=str(data.get("params")),
        fingerprints={str(k): str(v) for k, v in dict(data.get("fingerprints") or {}).items()},
        aggregator_key=_public(data.get("aggregator_key"), "aggregator_key"),
        participant_keys={str(p): _public(k, f"key of {p!r}") for p, k in keys.items()},
        receipt_key=None if receipt is None else _public(receipt, "receipt_key"),
        participant_id=data.get("participant_id"),
        verifier_key=None if verifier is None else _public(verifier, "verifier_key"),
    )


def require_mode(manifest: KeyManifest, mode: str) -> None:
    """Raise ``KeyDirectoryInvalid`` unless the deployment runs ``mode``."""
    if manifest.mode != mode:
        raise KeyDirectoryInvalid(f"this party serves only the {mode} mode, not {manifest.mode}")


class _Writer:
    """Writes one deployment's files (every key generated here, each written once)."""

    def __init__(self, root: Path, manifest: KeyManifest) -> None:
        self.root, self.manifest = root, manifest

    def party(self, sub: str, role: str, files: Mapping[str, bytes], **extra: str) -> None:
        directory = private_dir(self.root / sub)
        view = {**self.manifest.public_view(), "role": role, **extra}
        write_private(directory / MANIFEST, json.dumps(view, indent=2, sort_keys=True).encode())
        for name, data in files.items():
            write_private(directory / name, data)


def _mac_sum(share0: bytes, share1: bytes) -> bytes:
    """Return the whole MAC keys: the two servers' shares added lane by lane in Z_2^64."""
    lanes = [
        (int.from_bytes(share0[i : i + 8], "little") + int.from_bytes(share1[i : i + 8], "little"))
        % (1 << 64)
        for i in range(0, MAC_KEY_BYTES, 8)
    ]
    return b"".join(v.to_bytes(8, "little") for v in lanes)


def read_mac_lanes(path: Path) -> tuple[int, ...]:
    """Read MAC key lanes (``mac-key.secret`` or ``mac-key-share.secret``): one uint64 each.

    Raises
    ------
    KeyDirectoryInvalid
        Missing, not hex, or of another length.
    """
    raw = read_secret(path, size=MAC_KEY_BYTES)
    return tuple(int.from_bytes(raw[i : i + 8], "little") for i in range(0, MAC_KEY_BYTES, 8))


def _sm2_pem(key: SM2PrivateKey) -> bytes:
    return key.to_pem_unencrypted_insecure()


def _secret() -> bytes:
    return secrets.token_hex(SECRET_BYTES).encode("ascii")


def _ckks_files(
    publication_preset: str | None,
) -> tuple[dict[str, str], dict[str, bytes], dict[str, bytes]]:
    """Generate the epochs; return fingerprints, public files, the key authority's files."""
    from crypto.ckks import export_secret_key_encrypted, generate_keys
    from secure_fed.secure.modes.ckks import PRESET

    seal = secrets.token_bytes(16)
    epochs = {"scoring": generate_keys(PRESET)}
    if publication_preset is not None:
        epochs["publication"] = generate_keys(publication_preset)
    fingerprints = {role: keys.fingerprint.hex() for role, keys in epochs.items()}
    public = {f"{role}.context": keys.public_context.data for role, keys in epochs.items()}
    sealed = {
        f"{role}.sealed": export_secret_key_encrypted(keys, key=seal)
        for role, keys in epochs.items()
    }
    return fingerprints, public, {**sealed, "seal.key": seal.hex().encode("ascii")}


def create_keys(
    root: Path,
    *,
    mode: str,
    participant_ids: Sequence[str],
    shape: tuple[int, int],
    min_participants: int,
    publication_preset: str | None = "CKKS_PUBLICATION",
    tls_hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    isolation: int = 1,
    verifier: bool = True,
    max_flagged: int | None = None,
) -> None:
    """Run the try-out key ceremony: write every party's directory under ``root``.

    In ckks mode (with ``verifier``, the default) it also makes the verifier's SM2
    attestation key: ``root/verifier/`` holds it (with the public contexts and an audit
    key) and every manifest names its public half (``verifier_key``), which the key
    authority pins: it then decrypts nothing the verifier did not attest.

    Every participant signs the consortium policy (quorum ``min_participants``, cap
    ``1 / min_participants``, scoring required, the multi-round rule's ``isolation``,
    the outlier budget ``max_flagged`` when given: the most participants one round may
    exclude or down-weight), written to every party's directory as ``policy.json``.

    Raises
    ------
    KeyDirectoryInvalid
        If ``root`` already holds a key directory (keys are never overwritten).
    ModeSetupInvalid
        If the mode, roster, shape, quorum or publication preset is invalid.
    PolicyInvalid
        If ``isolation`` is below 1 or above the quorum, or ``max_flagged`` is not an
        integer >= 0.
    """
    root = Path(root)
    if (root / "aggregator" / MANIFEST).exists():
        raise KeyDirectoryInvalid(f"{root} already holds keys; choose an empty directory")
    if mode not in MODES:
        raise ModeSetupInvalid(f"mode must be one of {list(MODES)}, got {mode!r}")
    preset = publication_preset if mode == "ckks" else None
    plan = DeploymentPlan(
        shape=(shape[0], shape[1]),
        participant_ids=tuple(participant_ids),
        min_participants=min_participants,
        publication_preset=preset,
    )
    if plan.min_participants < 2:
        raise ModeSetupInvalid("min_participants must be >= 2 (the gatekeepers' minimum)")
    aggregator, receipts, audit_keys = SM2PrivateKey.generate(), SM2PrivateKey.generate(), {}
    signing = {p: SM2PrivateKey.generate() for p in plan.participant_ids}
    fingerprints, public, authority = ({}, {}, {}) if mode != "ckks" else _ckks_files(preset)
    attesting = SM2PrivateKey.generate() if mode == "ckks" and verifier else None
    manifest = KeyManifest(
        role="",
        mode=mode,
        shape=plan.shape,
        participant_ids=plan.participant_ids,
        min_participants=plan.min_participants,
        publication_preset=preset,
        params=_PARAMS.get(mode, "CKKS_SCORING"),
        fingerprints=fingerprints,
        aggregator_key=aggregator.public_key,
        participant_keys={p: k.public_key for p, k in signing.items()},
        receipt_key=receipts.public_key,
        verifier_key=None if attesting is None else attesting.public_key,
    )
    for server in ("keyauthority", "helper", "api", "verifier"):
        audit_keys[server] = _sm2_pem(SM2PrivateKey.generate())
    # every participant signs the consortium policy both gatekeepers will pin
    policy = ConsortiumPolicy(
        participant_ids=plan.participant_ids,
        shape=plan.shape,
        quorum=plan.min_participants,
        isolation=isolation,
        max_flagged=max_flagged,
    )
    public = {**public, POLICY: SignedPolicy.sign(policy, signing).to_json()}
    w = _Writer(root, manifest)
    agg_files = {"aggregator.key.pem": _sm2_pem(aggregator), **public}
    part_files = {p: {"signing.key.pem": _sm2_pem(k), **public} for p, k in signing.items()}
    ka_files = {"audit.key.pem": audit_keys["keyauthority"], POLICY: public[POLICY], **authority}
    if mode == "shares":
        _shares_files(w, plan.participant_ids, agg_files, part_files, ka_files, audit_keys)
    w.party("aggregator", "aggregator", agg_files)
    w.party("keyauthority", "keyauthority", ka_files)
    if mode == "ckks":
        _log.info(
            "the sealed CKKS secret keys (%s) are in %s only, with the seal key beside them "
            "(a try-out: in production the seal key stays in the key authority's KMS or HSM)",
            ", ".join(sorted(fingerprints)),
            root / "keyauthority",
        )
    api_files = {"audit.key.pem": audit_keys["api"], "receipts.key.pem": _sm2_pem(receipts)}
    w.party("api", "api", {**api_files, POLICY: public[POLICY]})
    if attesting is not None:  # the uploads' public contexts, its own keys, no secret key
        own = {"verifier.key.pem": _sm2_pem(attesting), "audit.key.pem": audit_keys["verifier"]}
        w.party("verifier", "verifier", {**own, **public})
    for pid, files in part_files.items():
        w.party(f"participants/{pid}", "participant", files, participant_id=pid)
    write_node_keys(root, plan.participant_ids)
    create_local_ca(root / "tls", hosts=tls_hosts)
    _log.info("key ceremony for %s wrote %d parties under %s", mode, len(signing) + 4, root)


def _shares_files(
    w: _Writer,
    ids: Sequence[str],
    agg_files: dict[str, bytes],
    part_files: dict[str, dict[str, bytes]],
    ka_files: dict[str, bytes],
    audit_keys: Mapping[str, bytes],
) -> None:
    """Enrolment secrets, dealer and channel secrets, the MAC keys; writes the helper's directory.

    Authenticated shares (:mod:`crypto.shares.mac`): the MAC keys (``mac-key.secret``,
    whole, the dealer's only), one share for each server (``mac-key-share.secret``),
    the dealer-helper mask secret (``dealer-mask.secret``) and each participant's dealer
    secret (its ``enrolment.json``; the dealer's ``input-masks.json``), all from
    :mod:`secrets`, each written to the parties that hold it only.
    """
    enrol = {p: (secrets.token_bytes(SECRET_BYTES), secrets.token_bytes(SECRET_BYTES)) for p in ids}
    dealer_agg, dealer_helper, channel, request = _secret(), _secret(), _secret(), _secret()
    masks = {p: secrets.token_bytes(SECRET_BYTES) for p in ids}
    share0, share1 = secrets.token_bytes(MAC_KEY_BYTES), secrets.token_bytes(MAC_KEY_BYTES)
    agg_files.update(
        {
            "enrolment.json": json.dumps({p: a.hex() for p, (a, _) in enrol.items()}).encode(),
            "dealer-aggregator.secret": dealer_agg,
            "channel.secret": channel,
            "request.secret": request,
            MAC_KEY_SHARE: share0.hex().encode("ascii"),
        }
    )
    for pid, (agg, helper) in enrol.items():
        own = {
            "aggregator_secret": agg.hex(),
            "helper_secret": helper.hex(),
            "dealer_secret": masks[pid].hex(),
        }
        part_files[pid]["enrolment.json"] = json.dumps(own).encode()
    mask_secret = _secret()
    ka_files.update(
        {
            "dealer-aggregator.secret": dealer_agg,
            "dealer-helper.secret": dealer_helper,
            MAC_KEY: _mac_sum(share0, share1).hex().encode("ascii"),
            DEALER_MASK: mask_secret,
            INPUT_MASKS: json.dumps({p: m.hex() for p, m in masks.items()}).encode(),
        }
    )
    helper_files = {
        "audit.key.pem": audit_keys["helper"],
        POLICY: agg_files[POLICY],
        "enrolment.json": json.dumps({p: h.hex() for p, (_, h) in enrol.items()}).encode(),
        "dealer-helper.secret": dealer_helper,
        "channel.secret": channel,
        "request.secret": request,
        MAC_KEY_SHARE: share1.hex().encode("ascii"),
        DEALER_MASK: mask_secret,
    }
    w.party("helper", "helper", helper_files)

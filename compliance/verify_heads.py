"""Bundle checks of the keys and the two signed tree heads.

The log key signs tree heads (C2SP checkpoint bodies, SM2-with-SM3, ID
``1234567812345678``, DER); the signer key signs the report. Either is
compared with a key pinned out of band when one is given. The cited head
(the smallest head covering every cited entry) must be consistent with the
newest head (RFC 9162 consistency proof), and the report metadata must state
both heads as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compliance.bundle import unb64
from compliance.errors import (
    BundleHeadInvalid,
    BundleInvalid,
    BundleKeyMismatch,
    BundleMalformed,
    BundleProofInvalid,
)
from crypto import CryptoError
from crypto.sm import SM2PublicKey
from privacy_ledger.audit.checkpoint import Checkpoint, verify_head
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.audit.proofs import verify_consistency
from privacy_ledger.errors import LedgerError

__all__ = ["check_keys", "check_heads"]

Fail = Callable[[type[BundleInvalid], str], None]


def _key(
    keys: dict[str, Any], name: str, pinned: SM2PublicKey | None, stated: object, fail: Fail
) -> SM2PublicKey | None:
    try:
        key = SM2PublicKey.from_der(unb64(keys.get(name), f"keys.{name}"))
    except (CryptoError, BundleMalformed) as exc:
        fail(BundleKeyMismatch, f"keys.{name}: not an SM2 public key ({exc})")
        return pinned
    if pinned is not None and pinned.fingerprint() != key.fingerprint():
        fail(
            BundleKeyMismatch,
            f"keys.{name}: {key.fingerprint()} is not the pinned key {pinned.fingerprint()}",
        )
        return pinned
    if stated != key.fingerprint():
        fail(
            BundleKeyMismatch,
            f"keys.{name}: fingerprint {key.fingerprint()} differs from "
            f"the one the report states ({stated})",
        )
    return key


def check_keys(
    keys: Any,
    meta: dict[str, Any],
    pinned_signer: SM2PublicKey | None,
    pinned_log: SM2PublicKey | None,
    fail: Fail,
) -> tuple[SM2PublicKey, SM2PublicKey, bytes] | None:
    """Return ``(signer, log key, signer distid)``, or ``None`` if a key is unusable."""
    if not isinstance(keys, dict) or set(keys) != {"log", "signer", "signer_distid"}:
        fail(BundleMalformed, "keys: want exactly log, signer, signer_distid")
        return None
    produced, log = meta.get("produced", {}), meta.get("log", {})
    signer = _key(keys, "signer", pinned_signer, produced.get("signer_fingerprint"), fail)
    log_key = _key(keys, "log", pinned_log, log.get("key_fingerprint"), fail)
    distid = keys["signer_distid"]
    if signer is None or log_key is None or not isinstance(distid, str) or not distid.isascii():
        return None
    return signer, log_key, distid.encode("ascii")


def _head(
    heads: dict[str, Any], name: str, key: SM2PublicKey, origin: object, fail: Fail
) -> Checkpoint | None:
    head = heads.get(name)
    if not isinstance(head, dict) or set(head) != {"body", "signature"}:
        fail(BundleMalformed, f"heads.{name}: want body and signature")
        return None
    try:
        body = unb64(head["body"], f"heads.{name}.body")
        signature = unb64(head["signature"], f"heads.{name}.signature")
        return verify_head(body, signature, key, origin=str(origin))
    except (LedgerError, BundleMalformed) as exc:
        fail(BundleHeadInvalid, f"heads.{name}: {exc}")
        return None


def _meta_agrees(meta: dict[str, Any], cited: Checkpoint, newest: Checkpoint, fail: Fail) -> None:
    log, stated = meta.get("log", {}), meta.get("cited", {})
    if (log.get("newest_head_size"), log.get("newest_head_root")) != (
        newest.tree_size,
        newest.root_hash.hex(),
    ):
        fail(BundleHeadInvalid, "meta.log: newest head size/root differ from the signed head")
    if stated.get("head_size") != cited.tree_size:
        fail(
            BundleHeadInvalid,
            f"meta.cited.head_size differs from the cited head ({cited.tree_size})",
        )
    size, unsigned = log.get("size"), log.get("unsigned_entries")
    if (
        not isinstance(size, int)
        or not isinstance(unsigned, int)
        or (size - unsigned != newest.tree_size)
    ):
        fail(BundleHeadInvalid, "meta.log: size - unsigned_entries must be the newest head size")
    elif unsigned == 0 and log.get("root") != newest.root_hash.hex():
        fail(BundleHeadInvalid, "meta.log.root differs from the newest head's root")


def check_heads(
    heads: Any, meta: dict[str, Any], log_key: SM2PublicKey | None, fail: Fail
) -> tuple[int, bytes, int] | None:
    """Return ``(cited size, cited root, newest size)`` if both heads verify."""
    if not isinstance(heads, dict) or set(heads) != {"cited", "newest", "consistency"}:
        fail(BundleMalformed, "heads: want exactly cited, newest, consistency")
        return None
    if log_key is None:
        return None
    origin = meta.get("log", {}).get("origin")
    cited = _head(heads, "cited", log_key, origin, fail)
    newest = _head(heads, "newest", log_key, origin, fail)
    if cited is None or newest is None:
        return None
    _meta_agrees(meta, cited, newest, fail)
    proof = heads["consistency"]
    try:
        nodes = [unb64(n, f"heads.consistency[{i}]") for i, n in enumerate(proof)]
        verify_consistency(
            SM3_HASHER, cited.tree_size, newest.tree_size, nodes, cited.root_hash, newest.root_hash
        )
    except (LedgerError, BundleMalformed, TypeError) as exc:
        fail(
            BundleProofInvalid,
            f"heads.consistency: cited head ({cited.tree_size}) is not "
            f"proven consistent with the newest head ({newest.tree_size}): {exc}",
        )
        return None
    return cited.tree_size, cited.root_hash, newest.tree_size

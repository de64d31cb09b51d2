"""CKKS (TenSEAL) for secure-fed: presets, key handles, class-major packing, validation.

See ``docs/crypto-ckks.md`` for the presets, what each party holds and the
noise-flooding parameters.
"""

from crypto.ckks.aggregate import quadratic_score, weighted_sum
from crypto.ckks.authority import (
    decrypt_aggregate,
    decrypt_checked_publication,
    decrypt_score,
    publication_tolerance,
)
from crypto.ckks.export import export_secret_key_encrypted, import_secret_key_encrypted
from crypto.ckks.keys import KeyAuthorityKeys, PublicContext, generate_keys, resume_release_count
from crypto.ckks.packing import EncryptedMatrix, Layout, pack_class_major
from crypto.ckks.presets import (
    CKKS_AGGREGATION,
    CKKS_PUBLICATION,
    CKKS_SCORING,
    PRESETS,
    CkksPreset,
    get_preset,
)
from crypto.ckks.wire import load_encrypted

__all__ = [
    "CKKS_AGGREGATION",
    "CKKS_PUBLICATION",
    "CKKS_SCORING",
    "PRESETS",
    "CkksPreset",
    "EncryptedMatrix",
    "KeyAuthorityKeys",
    "Layout",
    "PublicContext",
    "decrypt_aggregate",
    "decrypt_checked_publication",
    "decrypt_score",
    "export_secret_key_encrypted",
    "generate_keys",
    "get_preset",
    "import_secret_key_encrypted",
    "load_encrypted",
    "pack_class_major",
    "publication_tolerance",
    "quadratic_score",
    "resume_release_count",
    "weighted_sum",
]

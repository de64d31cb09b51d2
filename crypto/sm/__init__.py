"""National cryptography: SM2 signatures, SM3 hashing, SM4-GCM (GB/T 32918, 32905, 32907).

See ``docs/crypto-sm.md`` for the threat each primitive answers and the encodings.
"""

from crypto.sm.sm2 import DEFAULT_SM2_ID, SM2PrivateKey, SM2PublicKey
from crypto.sm.sm3 import SM3Hasher, sm3_backend, sm3_digest, sm3_file
from crypto.sm.sm4 import SM4GCM

__all__ = [
    "DEFAULT_SM2_ID",
    "SM2PrivateKey",
    "SM2PublicKey",
    "SM3Hasher",
    "SM4GCM",
    "sm3_backend",
    "sm3_digest",
    "sm3_file",
]

from __future__ import annotations

import pytest

from crypto.sm import SM4GCM
from privacy_ledger.audit.evidence import evidence_associated_data, seal, unseal
from privacy_ledger.errors import EvidenceUnreadable

KEY = SM4GCM(SM4GCM.generate_key())


def test_roundtrip_and_binding() -> None:
    sealed = seal(KEY, origin="log", index=7, field="score", plaintext=b'"3.25"')
    assert unseal(KEY, origin="log", index=7, field="score", sealed=sealed) == "3.25"
    expected = b'["secure-fed/audit-evidence/v1","log",7,"score"]'
    assert evidence_associated_data("log", 7, "score") == expected
    for origin, index, field in (("log", 8, "score"), ("log", 7, "other"), ("log2", 7, "score")):
        with pytest.raises(EvidenceUnreadable, match="failed SM4-GCM authentication"):
            unseal(KEY, origin=origin, index=index, field=field, sealed=sealed)
    other = SM4GCM(SM4GCM.generate_key())
    with pytest.raises(EvidenceUnreadable, match="'score' of entry 7 failed"):
        unseal(other, origin="log", index=7, field="score", sealed=sealed)


def test_not_base64() -> None:
    with pytest.raises(EvidenceUnreadable, match="'score' of entry 7 is not base64"):
        unseal(KEY, origin="log", index=7, field="score", sealed="***")


def test_truncated_blob() -> None:
    with pytest.raises(EvidenceUnreadable, match="failed SM4-GCM"):
        unseal(KEY, origin="log", index=7, field="score", sealed="AAAA")

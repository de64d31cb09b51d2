"""More guards of the shares-mode helper that surviving mutants showed unchecked.

``scripts/mutation gatekeepers`` changed each of these and the selected tests
stayed green: the element count of a sealed share (a share sealed correctly,
under the participant's own enrolment secret, but of another size loaded and
failed only later), and the load's acknowledgement.
"""

from __future__ import annotations

import secrets

import pytest

from crypto.shares import ShareBundle, ShareLabel, ShareMacKey
from crypto.sm import SM4GCM
from secure_fed.errors import UploadMalformed
from secure_fed.secure.modes.share_ops import CODEC
from secure_fed.secure.parties.helper import seal_key
from secure_fed.wire import HELPER_REPLY, decode_frame
from tests.secure_fed.secure.conftest import IDS, C, N
from tests.secure_fed.secure.signed_requests import signed


def _sealed(secret: bytes, pid: str, uid: str, count: int) -> bytes:
    """Party 1's seeded share of ``count`` values, tagged and sealed as a participant does."""
    label = ShareLabel(round_id=0, participant_id=pid, tensor=f"pred-{uid}")
    bundle = ShareBundle.from_seed(
        secrets.token_bytes(32), label=label, count=count, frac_bits=CODEC.frac_bits
    )
    blob = bundle.to_bytes(ShareMacKey.derive(secret, recipient="helper"))
    return SM4GCM(seal_key(secret)).encrypt(blob, associated_data=f"{pid}|{uid}".encode())


def _load(dep, pid: str, uid: str, payload: bytes) -> bytes:  # type: ignore[no-untyped-def]
    return bytes(
        dep.helper.handle(
            signed(dep, {"op": "load", "participant_id": pid, "upload_id": uid}, payload)
        )
    )


@pytest.mark.parametrize("count", [N * C - 1, N * C + 1, C, 1])
def test_a_sealed_share_of_another_size_is_refused(shares, count: int) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    pid = IDS[1]
    payload = _sealed(dep.helper.secrets[pid], pid, "u-size", count)
    with pytest.raises(
        UploadMalformed,
        match=rf"^\[UPLOAD_MALFORMED\] helper share of '{pid}' refused: "
        rf"\[CRYPTO_SHARE_TAMPERED\] share blob count {count} is not the expected count {N * C}$",
    ):
        _load(dep, pid, "u-size", payload)
    # nothing was kept: the upload id is still free for a share of the right size
    assert decode_frame(
        _load(dep, pid, "u-size", _sealed(dep.helper.secrets[pid], pid, "u-size", N * C)),
        HELPER_REPLY,
    ) == ({"ok": True}, b"")


def test_a_load_and_its_reload_are_acknowledged_without_a_body(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    pid = IDS[2]
    payload = _sealed(dep.helper.secrets[pid], pid, "u-ack", N * C)
    assert decode_frame(_load(dep, pid, "u-ack", payload), HELPER_REPLY) == ({"ok": True}, b"")
    assert decode_frame(_load(dep, pid, "u-ack", payload), HELPER_REPLY) == ({"ok": True}, b"")

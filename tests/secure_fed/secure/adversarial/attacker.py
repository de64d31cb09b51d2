"""A cheating aggregator's raw requests to the gatekeepers (the project's own frames)."""

from __future__ import annotations

from typing import Any

from crypto.ckks import EncryptedMatrix
from secure_fed.secure.parties.key_authority import decryption_request
from tests.secure_fed.secure.signed_requests import signed


def helper_uids(dep) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Participant id -> upload id of every upload the helper holds (last one wins)."""
    return {pid: uid for uid, (pid, _) in dep.helper._seeds.items()}


def helper_linear(
    dep, uids: list[str], weights: list[float], *, purpose: str = "aggregate", round_id: int = 1
) -> Any:  # type: ignore[no-untyped-def]
    """Ask the helper for its share of ``sum_k w_k x_k`` (a linear opening)."""
    head = {
        "op": "linear",
        "purpose": purpose,
        "uids": uids,
        "weights": weights,
        "round_id": round_id,
    }
    return dep.helper.handle(signed(dep, head))  # the aggregator holds the channel key


def ka_decrypt(
    agg,
    *,
    purpose: str,
    ids: list[str],
    matrix: EncryptedMatrix,
    claim: dict[str, Any],
    shape,
    round_id: int = 1,
) -> Any:  # type: ignore[no-untyped-def]
    """Send the key authority a signed decryption request of the aggregator's choosing."""
    request = decryption_request(
        round_id=round_id,
        purpose=purpose,
        participant_ids=ids,
        shape=shape,
        ciphertext=matrix.to_bytes(),
        signer=agg.keys.signer,
        claim=claim,
    )
    return agg.keys.authority(request)

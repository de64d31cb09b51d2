"""Console rows from the other parties' own audit logs (key authority, helper).

The service reads the party logs named by ``api_party_logs_dir`` (by default
the ``secure-fed deploy local`` folder of its ledger), verifies each one as the
compliance report does (:func:`compliance.parties.read_party_logs`: hash chain,
Merkle roots, every signed head under the party's key) and shows the
decryptions and refusals of the verified ones: who (key authority or helper),
the requester, the reason of a refusal and the contributors. A log that is
missing or does not verify is listed with the reason, never skipped silently.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from api.rest.context import AppContext
from compliance.parties import PartyLog, read_party_logs
from compliance.party_check import cross_check_parties, ledger_rounds

__all__ = ["PartyView", "party_view"]


@dataclass(frozen=True)
class PartyView:
    """What the console shows of the party logs."""

    configured_from: str
    logs: tuple[PartyLog, ...]
    decryptions: list[dict[str, Any]] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)


def party_view(ctx: AppContext, *, rounds: Collection[str] | None = None) -> PartyView:
    """Read and verify the configured party logs; keep the rows of ``rounds`` (all if None)."""
    read = read_party_logs(ctx.party_logs, configured_from=ctx.party_logs_from)
    rows = [r for r in read.decryptions if rounds is None or str(r["round"]) in rounds]
    checks = cross_check_parties(read, ledger_rounds(ctx.engine)) if ctx.party_logs else []
    return PartyView(
        configured_from=ctx.party_logs_from,
        logs=read.logs,
        decryptions=rows,
        disagreements=[
            c for c in checks if c["agree"] is not True and (rounds is None or c["round"] in rounds)
        ],
    )

"""Recording empirical privacy audits in a real ledger for the display tests (no fakes)."""

from __future__ import annotations

from decimal import Decimal

from privacy_ledger import PrivacyLedger
from privacy_ledger.budget.empirical import (
    EmpiricalAudit,
    accounted_epsilon_over,
    record_empirical_audit,
)


def record_audit(
    ledger: PrivacyLedger,
    participant: str,
    asset: str,
    rounds: tuple[str, str],
    *,
    above: bool = False,
    canaries: int = 1000,
) -> EmpiricalAudit:
    """Record an audit whose bound is 0.5 below (or, ``above``, 0.5 above) the accounted epsilon.

    The bound is chosen against the ledger's own epsilon over ``rounds``, so a
    display that shows it shows the ledger's figure, and a check comparing it
    sees what the ledger accounted.
    """
    accounted = accounted_epsilon_over(ledger, participant, asset, *rounds)
    shift = Decimal("0.5") if above else -min(Decimal("0.5"), accounted / 2)
    audit = EmpiricalAudit(
        participant=participant,
        asset=asset,
        rounds_from=rounds[0],
        rounds_to=rounds[1],
        canaries=canaries,
        guesses=canaries // 5,
        correct=canaries // 8,
        score="loss",
        confidence=Decimal("0.95"),
        delta=Decimal("0.00001"),
        epsilon_lower_bound=(accounted + shift).quantize(Decimal("0.0001")),
        epsilon_accounted=accounted,
        method="steinke-nasr-jagielski-2023",
    )
    record_empirical_audit(ledger, audit)
    return audit

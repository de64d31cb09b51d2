"""Shared helpers of the ledger tests (plain functions, not fixtures)."""

from __future__ import annotations

from privacy_ledger import MechanismEvent, PrivacyLedger


def event(sigma: float = 1.0, q: float = 0.01, steps: int = 500) -> MechanismEvent:
    return MechanismEvent(
        noise_multiplier=sigma,
        sample_rate=q,
        steps=steps,
        delta=1e-5,
        max_grad_norm=1.0,
        versions={"opacus": "1.6.0"},
    )


def setup_budget(
    led: PrivacyLedger,
    epsilon: str = "4",
    *,
    pid: str = "h1",
    asset: str = "ct",
    accountant: str = "rdp",
) -> None:
    led.register_participant(pid, institution="Hospital One", kind="hospital")
    led.register_asset(pid, asset, description="CT scans")
    led.set_budget(pid, asset, epsilon=epsilon, delta=1e-5, accountant=accountant)

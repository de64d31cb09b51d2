"""One vocabulary for where the DP noise comes from, in every report.

What is true of every privacy event this code records (DP-SGD steps and the
label-prior release): Opacus runs with ``secure_mode`` off (its cryptographic
generator needs torchcsprng, which does not install on current torch), so the
Gaussian noise and the Poisson sampling come from a PyTorch generator, which is
not cryptographic. The generator is seeded from the ``secrets`` module (the OS
CSPRNG) for each round, or, with ``--reproducible``, from the run seed. The
ledger records the first fact as ``secure_rng: "false"`` and the second, when
seeded from the run seed, as ``noise_rng: "insecure-seeded"``.

The demo's terminal, ``report.html`` and ``results.json`` use :func:`noise_text`;
the compliance report (which may not import this package) shows the recorded
``secure_rng`` with the same words, :data:`NOT_CRYPTOGRAPHIC`
(:func:`compliance.view.rng_cell`), so no page calls the noise "secure" while
another says its generator is not cryptographic.
"""

from __future__ import annotations

__all__ = ["NOISE_RNG_RUN_SEED", "NOISE_RNG_SECRETS", "NOT_CRYPTOGRAPHIC", "noise_text"]

#: What ``secure_rng: "false"`` means, in the words every report uses.
NOT_CRYPTOGRAPHIC = "not cryptographic (Opacus secure_mode off)"

#: ``noise_rng`` of a generator seeded from the ``secrets`` module (not recorded in the ledger).
NOISE_RNG_SECRETS = "secrets-seeded"
#: ``noise_rng`` the ledger records for noise seeded from the run seed (``--reproducible``).
NOISE_RNG_RUN_SEED = "insecure-seeded"


def noise_text(*, reproducible: bool) -> str:
    """Return the sentence on the DP noise of a run (seeded from the run seed or not)."""
    if reproducible:
        return (
            "INSECURE: PyTorch generator seeded from --seed (--reproducible), "
            f"{NOT_CRYPTOGRAPHIC}: no DP guarantee"
        )
    return (
        "PyTorch generator seeded from the secrets module each round, "
        f"{NOT_CRYPTOGRAPHIC}: not reproducible"
    )

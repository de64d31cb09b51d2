"""In-process deployments: a mode's aggregator and its gatekeepers built in one process.

This package is the one place where the aggregator side of a mode
(:mod:`secure_fed.secure.modes`) and the gatekeepers it talks to
(:mod:`secure_fed.secure.parties`: key authority, helper, replay registry) are
constructed together, with their key material exchanged in memory. It serves
the demo, the tests and the benchmarks, and it registers the gatekept built-in
modes (``ckks``, ``shares``) whose ``deploy`` hook builds such a deployment.

A real deployment builds each party in its own process, from its own key
directory, under :mod:`secure_fed.deploy`; there ``modes/`` and ``parties/``
meet only through bytes. Neither of them imports this package (import-linter
contracts in ``pyproject.toml``).
"""

"""The key authority, helper and verifier services: FastAPI applications over byte handlers.

:mod:`api.services.apps` builds the applications (``create_keyauthority_app``,
``create_helper_app``), :mod:`api.services.verifier` the ckks mode's verifier
(``create_verifier_app``); :mod:`api.services.run` serves one under uvicorn with
mutual TLS (``secure-fed keyauthority serve``, ``secure-fed helper serve``,
:mod:`api.cli.parties`; ``secure-fed verifier serve``, :mod:`api.cli.verifier`).
See ``docs/deploy.md``.
"""

"""The key authority and helper services: FastAPI applications over the parties' byte handlers.

:mod:`api.services.apps` builds the applications (``create_keyauthority_app``,
``create_helper_app``); :mod:`api.services.run` serves one under uvicorn with
mutual TLS (``secure-fed keyauthority serve``, ``secure-fed helper serve``,
:mod:`api.cli.parties`). See ``docs/deploy.md``.
"""

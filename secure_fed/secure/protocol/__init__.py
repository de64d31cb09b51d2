"""The gatekeeper protocol shared by the aggregator's modes and the parties.

:mod:`.vocabulary` names every step, purpose, operation and header key of the
key authority's and the helper's requests (``StrEnum``: the wire bytes are the
strings'); :mod:`.authority_requests` and :mod:`.helper_requests` (with
:mod:`.helper_step_requests`, the scoring steps' requests) parse each request
once, on receipt, into a frozen model, and build the aggregator's requests;
:mod:`.helper_wire` is the helper's request and reply framing; :mod:`.codecs`
the header codecs both sides use. Nothing here imports
:mod:`secure_fed.secure.modes` or :mod:`secure_fed.secure.parties`
(an import-linter contract in ``pyproject.toml``).
"""

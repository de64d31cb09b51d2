"""Composition root: FastAPI services and the ``secure-fed`` command line.

Nothing in the project imports ``api``.
"""

__all__: list[str] = []

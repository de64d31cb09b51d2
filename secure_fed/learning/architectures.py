"""Names of the registered architectures, importable without torch.

The command line validates ``--architectures`` before the learning stack
loads; :data:`ARCHITECTURES` equals the keys of
:data:`secure_fed.learning.models.MODEL_REGISTRY` (a test checks it).
"""

from __future__ import annotations

__all__ = ["ARCHITECTURES"]

#: Registered architectures, in the order a federation cycles through them by default.
ARCHITECTURES = ("mlp", "cnn", "transformer", "logreg")

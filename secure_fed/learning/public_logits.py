"""The public bound on uploaded predictions, importable without torch.

Participants clip their public-set logits to it (:func:`secure_fed.learning.distill.predict_public`)
and the aggregator declares it in every round's output schema and encodes against it.
"""

from __future__ import annotations

__all__ = ["PUBLIC_LOGIT_BOUND"]

PUBLIC_LOGIT_BOUND = 8.0
"""Public bound on every entry of an uploaded prediction: ``|v| <= 8``."""

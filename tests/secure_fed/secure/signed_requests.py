"""Test utility: helper requests tagged with the deployment's channel key.

Tests that drive :meth:`HelperParty.handle` directly (as the aggregator would)
tag their requests like the aggregator does; an unauthenticated request is
refused before any operation runs (``adversarial/test_helper_channel.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.secure.parties.helper import helper_request


def signed(
    dep: Any, header: Mapping[str, object], payload: bytes = b"", round_id: int = 0
) -> bytes:
    """Tag ``header`` and ``payload`` for ``dep``'s helper (the header's round, if any)."""
    raw = header.get("round_id")
    rnd = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else round_id
    fresh = {k: v for k, v in header.items() if k not in ("auth", "signature")}  # re-tag
    return helper_request(fresh, payload, key=dep.helper.request_key, round_id=rnd)

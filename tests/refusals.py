"""Exact refusal assertions: an error's type, its stable code and its whole message."""

from __future__ import annotations

import re
from typing import Any

import pytest

from secure_fed.errors import SecureFedError


def exactly(kind: type[SecureFedError], text: str) -> Any:
    """``pytest.raises`` for ``kind`` with exactly ``text`` after its code."""
    return pytest.raises(kind, match=f"^{re.escape(f'[{kind.code}] {text}')}$")

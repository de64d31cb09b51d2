from __future__ import annotations

import pytest

from secure_fed.federation.schema import SchemaRegistry
from tests.secure_fed.federation.helpers import schema


@pytest.fixture
def registry() -> SchemaRegistry:
    reg = SchemaRegistry()
    for version in ("1.0.0", "1.1.0", "1.0.3", "2.0.0"):
        reg.register(schema(version=version))
    return reg

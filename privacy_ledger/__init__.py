"""privacy_ledger package."""

__all__: list[str] = []

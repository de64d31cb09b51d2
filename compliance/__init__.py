"""compliance package."""

__all__: list[str] = []

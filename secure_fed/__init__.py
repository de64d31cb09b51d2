"""secure_fed package."""

__all__: list[str] = []

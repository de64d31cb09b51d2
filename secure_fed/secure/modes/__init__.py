"""secure_fed.secure.modes."""

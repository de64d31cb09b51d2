"""secure_fed.secure.parties."""

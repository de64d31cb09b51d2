"""secure_fed.secure."""

"""secure_fed.secure.scoring."""

"""secure_fed.learning."""

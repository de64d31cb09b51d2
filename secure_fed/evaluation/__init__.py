"""secure_fed.evaluation."""

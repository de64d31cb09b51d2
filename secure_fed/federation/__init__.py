"""secure_fed.federation.federation."""

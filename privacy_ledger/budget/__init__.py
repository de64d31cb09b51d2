"""privacy_ledger.budget."""

"""privacy_ledger.audit.log."""

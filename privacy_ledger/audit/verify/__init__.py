"""privacy_ledger.audit.log.verify."""

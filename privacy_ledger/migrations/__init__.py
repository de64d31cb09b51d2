"""Alembic migrations of the privacy ledger (schema source of truth)."""

"""Alembic revisions: 0001 budgets and rounds, 0002 audit log."""

"""Alembic environment of the privacy ledger, run programmatically by ``privacy_ledger.db``.

The caller passes an open connection in ``config.attributes["connection"]``;
offline (SQL script) mode is not supported: the schema is applied to a live
database only.
"""

from __future__ import annotations

from alembic import context

from privacy_ledger.db import ledger_metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("privacy_ledger migrations run only through privacy_ledger.db.upgrade")

context.configure(
    connection=connection,
    target_metadata=ledger_metadata(),
    compare_type=True,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()

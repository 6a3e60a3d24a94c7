"""Alembic environment: runs migrations on the connection Reprise hands over."""

from __future__ import annotations

from alembic import context

from reprise.store._schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - Reprise always passes a connection
    raise RuntimeError("Reprise migrations run through reprise.store.upgrade_database().")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

"""Alembic's entry point: migrations run on the connection `Database.migrate` passes in."""

from __future__ import annotations

from alembic import context

context.configure(connection=context.config.attributes["connection"])
with context.begin_transaction():
    context.run_migrations()

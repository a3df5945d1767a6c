"""Alembic's entry: the store hands its open connection in (service.runs.migrate); there is no alembic.ini."""

from alembic import context

connection = context.config.attributes["connection"]
# render_as_batch: SQLite alters a table by copying it, which batch mode does for it.
context.configure(connection=connection, render_as_batch=True, transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()

"""Migrations run when a store opens: Alembic upgrades the database to the newest revision.

Several processes may open a fresh database at once (service workers, trainers): the upgrade runs in one
transaction that first takes a lock (SQLite: the write lock; PostgreSQL: an advisory lock), and reads the
database's revision under it, so one process migrates and the others find it done.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).with_name("migrations")
_ADVISORY_LOCK = 0x52554E53  # "RUNS"


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine):
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_to(engine: Engine, revision: str) -> None:
    """Migrate to ``revision`` ("head" or an id) under the store's lock."""
    config = alembic_config()
    with engine.connect().execution_options(writes=True) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK})")
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def upgrade_to_head(engine: Engine) -> None:
    if current_revision(engine) != head_revision():  # the common case reads one row and takes no lock
        upgrade_to(engine, "head")

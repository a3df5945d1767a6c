"""Migrations run when a store opens: Alembic upgrades the database to the newest revision.

Several processes may open a fresh database at once (service workers, trainers): the upgrade runs in one
transaction that first takes a lock (SQLite: the write lock; PostgreSQL: an advisory lock), and reads the
database's revision under it, so one process migrates and the others find it done.

Opening a store that is already at the newest revision (nearly every open) imports no Alembic: the newest
revision is read from the migration files' ``revision`` / ``down_revision`` lines and the database's from its
``alembic_version`` table with a plain query; Alembic (about a third of a second of imports) is loaded only to
migrate.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

import sqlalchemy as sa
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"  # Alembic's default; env.py does not rename it
_ADVISORY_LOCK = 0x52554E53  # "RUNS"
_REVISION_LINE = re.compile(r"^(down_revision|revision)\s*(?::[^=\n]*)?=\s*(?:['\"]([^'\"]*)['\"]|None)", re.M)


def alembic_config():
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision: the one no other revision names as its ``down_revision`` (the history is linear)."""
    revisions, parents = set(), set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        for name, value in _REVISION_LINE.findall(path.read_text(encoding="utf-8")):
            if value:
                (revisions if name == "revision" else parents).add(value)
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"the runs store's migrations have {len(heads)} heads ({sorted(heads)}); they must "
                           f"form one line, each revising the one before ({MIGRATIONS / 'versions'})")
    return heads.pop()


def current_revision(engine: Engine) -> Optional[str]:
    """The database's revision, None when it has none yet (or, which Alembic would read the same, several)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(VERSION_TABLE):
            return None
        rows = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return rows[0] if len(rows) == 1 else None


def upgrade_to(engine: Engine, revision: str) -> None:
    """Migrate to ``revision`` ("head" or an id) under the store's lock."""
    from alembic import command

    config = alembic_config()
    with engine.connect().execution_options(writes=True) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK})")
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def upgrade_to_head(engine: Engine) -> None:
    if current_revision(engine) != head_revision():  # the common case reads one row and takes no lock
        upgrade_to(engine, "head")

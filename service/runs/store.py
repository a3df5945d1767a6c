"""The runs store: SQLite by default (a file under the user's data directory), PostgreSQL for shared stores.

``RunsStore(url)`` opens (and migrates) the database that ``url`` names, else ``RECIPE_ADVISOR_DB``, else
``<user data dir>/recipe-advisor/runs.sqlite``. A run is stored once: its content key
(``RunRecord.content_key``) is unique, so adding the same run again returns the stored id with
``created=False``, also when two writers race (the database's unique constraint decides, not a read before the
write). SQLite runs in WAL mode with a busy timeout, and every write transaction takes the write lock when it
begins (``BEGIN IMMEDIATE``), so concurrent writers wait their turn instead of failing; a writer killed
mid-transaction leaves nothing behind (the journal rolls it back).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from service.runs.keys import layout_text, run_request_key
from service.runs.migrate import upgrade_to_head
from service.runs.schema import RunRecord, utcnow

DB_ENV = "RECIPE_ADVISOR_DB"
BUSY_TIMEOUT_MS = 30_000

metadata = sa.MetaData()
runs_table = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("content_key", sa.String(64), nullable=False, unique=True),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("gpu_type", sa.String(256), nullable=False),
    sa.Column("engine", sa.String(32), nullable=False),
    sa.Column("team", sa.String(4096)),
    sa.Column("cluster", sa.String(4096)),
    sa.Column("config_hash", sa.String(128)),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("release", sa.String(4096)),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("request_key", sa.String(32)),
    sa.Column("layout_key", sa.String(128)),
    sa.Column("step_time_s", sa.Float),
    sa.Column("tokens_per_s_per_gpu", sa.Float),
)
calibrations_table = sa.Table(
    "calibrations", metadata,
    sa.Column("group_key", sa.String(1024), primary_key=True),
    sa.Column("runs", sa.Integer, nullable=False),
    sa.Column("newest_run_id", sa.Integer, nullable=False),
    sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
)

CACHED_CALIBRATIONS = sa.select(calibrations_table.c.group_key, calibrations_table.c.payload).where(
    calibrations_table.c.group_key.in_(sa.bindparam("groups", expanding=True)),
    calibrations_table.c.runs == sa.bindparam("runs"), calibrations_table.c.newest_run_id == sa.bindparam("newest"))

# query() filters: keyword -> column
FILTERS = ("model", "gpu_type", "engine", "team", "cluster", "config_hash", "outcome", "release", "source",
           "request_key")


class StoreError(RuntimeError):
    """The store cannot be opened or written: which database, why, what to do."""


def user_data_dir() -> Path:
    """The user's data directory: platformdirs' answer where installed, else XDG's rule."""
    try:
        import platformdirs
        return Path(platformdirs.user_data_dir("recipe-advisor", appauthor=False))
    except ImportError:
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        return Path(base) / "recipe-advisor"


def default_url() -> str:
    return f"sqlite:///{user_data_dir() / 'runs.sqlite'}"


def resolve_url(url: Optional[str] = None) -> str:
    """``url`` (or RECIPE_ADVISOR_DB, or the default file) as an SQLAlchemy URL; a plain path is a SQLite file."""
    value = url or os.environ.get(DB_ENV) or default_url()
    if "://" not in value:
        value = f"sqlite:///{Path(value).expanduser().resolve()}"
    return value


def _sqlite_engine(url: str) -> Engine:
    path = sa.engine.make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # transactions begin below, not in the driver
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")  # WAL keeps it consistent; a power loss may lose the last commit
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # A write transaction takes the lock up front: a deferred one that reads first and then writes would
        # fail at once (SQLITE_BUSY, no wait) when another writer committed in between.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("writes") else "BEGIN")

    return engine


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    if url.startswith("postgresql"):
        return sa.create_engine(url, pool_pre_ping=True)
    raise StoreError(f"unsupported database URL {url!r}: use a SQLite path or sqlite:///FILE, or "
                     "postgresql+psycopg://USER@HOST/DB")


def _row_values(record: RunRecord, key: str) -> dict:
    p, r = record.provenance, record.request
    return {"content_key": key, "recorded_at": record.recorded_at, "model": r.model, "gpu_type": r.gpu_type,
            "engine": p.engine, "team": p.team, "cluster": p.cluster, "config_hash": record.config_hash,
            "outcome": record.outcome, "release": p.release, "source": p.source,
            "request_key": run_request_key(record), "layout_key": layout_text(record),
            "step_time_s": record.measurement.step_time_s,
            "tokens_per_s_per_gpu": record.measured_tokens_per_s_per_gpu,
            "record": record.model_dump_json(exclude={"id"})}


def record_from_row(row) -> RunRecord:
    """A run as stored (a row of ``id`` and ``record``)."""
    return RunRecord.model_validate({**json.loads(row.record), "id": row.id})


class RunsStore:
    """The runs of one database. Thread- and process-safe; open one per process and share it."""

    def __init__(self, url: Optional[str] = None):
        self.url = resolve_url(url)
        self.engine = make_engine(self.url)
        try:
            upgrade_to_head(self.engine)
        except sa.exc.OperationalError as exc:
            raise StoreError(f"cannot open the runs store {self.display_url}: {exc.orig}; check --db / "
                             f"{DB_ENV}") from exc

    @property
    def display_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "RunsStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        with self.engine.connect().execution_options(writes=True) as conn, conn.begin():
            yield conn

    def add(self, record: RunRecord) -> tuple[int, bool]:
        """Store ``record`` unless the same run is stored: (id, True) when added, (stored id, False) if not."""
        key = record.content_key()
        stamped = record.model_copy(update={"recorded_at": record.recorded_at or utcnow()})
        try:
            with self._writing() as conn:
                new_id = conn.execute(runs_table.insert().values(**_row_values(stamped, key))
                                      .returning(runs_table.c.id)).scalar_one()
            return new_id, True
        except IntegrityError:
            with self.engine.connect() as conn:
                stored = conn.execute(sa.select(runs_table.c.id).where(runs_table.c.content_key == key)).scalar()
            if stored is None:  # not the key: another constraint failed, which is a bug to surface
                raise
            return stored, False

    def get(self, run_id: int) -> Optional[RunRecord]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs_table).where(runs_table.c.id == run_id)).first()
        return record_from_row(row) if row is not None else None

    def query(self, *, limit: Optional[int] = None, newest_first: bool = True,
              **filters: Optional[str]) -> list[RunRecord]:
        """Runs matching every given filter (FILTERS; None: any), newest first unless asked otherwise."""
        unknown = set(filters) - set(FILTERS)
        if unknown:
            raise TypeError(f"unknown filter(s) {sorted(unknown)}; filters are {', '.join(FILTERS)}")
        stmt = sa.select(runs_table.c.id, runs_table.c.record)
        for name, value in filters.items():
            if value is not None:
                stmt = stmt.where(runs_table.c[name] == value)
        order = runs_table.c.id.desc() if newest_first else runs_table.c.id.asc()
        stmt = stmt.order_by(order)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.engine.connect() as conn:
            return [record_from_row(row) for row in conn.execute(stmt)]

    def count(self, **filters: Optional[str]) -> int:
        return self.count_and_newest(**filters)[0]

    def count_and_newest(self, **filters: Optional[str]) -> tuple[int, int]:
        """How many runs match, and the newest one's id (0 when none): what a cached calibration is checked by."""
        stmt = sa.select(sa.func.count(), sa.func.max(runs_table.c.id)).select_from(runs_table)
        for name, value in filters.items():
            if value is not None:
                stmt = stmt.where(runs_table.c[name] == value)
        with self.engine.connect() as conn:
            count, newest = conn.execute(stmt).one()
        return count, newest or 0

    def cached_calibration(self, group: str, runs: int, newest_run_id: int,
                           conn: Optional[Connection] = None) -> Optional[dict]:
        """The calibration fitted for ``group`` when its runs are still those (count and newest id); else None."""
        return self.cached_calibrations([group], runs, newest_run_id, conn).get(group)

    def cached_calibrations(self, groups: list[str], runs: int, newest_run_id: int,
                            conn: Optional[Connection] = None) -> dict[str, dict]:
        """Group -> calibration, of those of ``groups`` fitted on these runs (count and newest id), in one read.
        ``conn``: an open connection of this store to read on (plan reads everything on one)."""
        values = {"groups": groups, "runs": runs, "newest": newest_run_id}
        if conn is not None:
            found = conn.execute(CACHED_CALIBRATIONS, values).all()
        else:
            with self.engine.connect() as own:
                found = own.execute(CACHED_CALIBRATIONS, values).all()
        return {group: json.loads(payload) for group, payload in found}

    def keep_calibration(self, group: str, runs: int, newest_run_id: int, payload: dict) -> None:
        values = {"runs": runs, "newest_run_id": newest_run_id, "fitted_at": utcnow(), "payload": json.dumps(payload)}
        with self._writing() as conn:
            conn.execute(calibrations_table.delete().where(calibrations_table.c.group_key == group))
            conn.execute(calibrations_table.insert().values(group_key=group, **values))

    def delete(self, run_id: int) -> bool:
        """Remove one run; False when no run has that id."""
        with self._writing() as conn:
            gone = conn.execute(runs_table.delete().where(runs_table.c.id == run_id)).rowcount > 0
            if gone:  # a later run may take the deleted id: a calibration is not checked by ids alone
                conn.execute(calibrations_table.delete())
            return gone

    def export_json(self, **filters: Optional[str]) -> str:
        """Every run (or those matching ``filters``) as a JSON list, oldest first: what ``runs export`` writes."""
        runs = self.query(newest_first=False, **filters)
        return json.dumps([run.model_dump(mode="json") for run in runs], indent=1)

"""The runs store on SQLite and PostgreSQL: adding once, querying, deleting, exporting, concurrent writers, a
writer killed mid-transaction, and migrations from an empty database and from the previous revision."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from service.runs.migrate import alembic_config, current_revision, head_revision, upgrade_to
from service.runs.schema import RunRecord, config_hash, utcnow
from service.runs.store import DB_ENV, RunsStore, _row_values, make_engine, resolve_url, runs_table
from tests.paths import REPO
from tests.service.runs.writer import tiny_run


def test_the_same_run_added_twice_is_stored_once(store_url):
    store = RunsStore(store_url)
    first = store.add(tiny_run(1))
    again = store.add(tiny_run(1))
    assert first[1] is True and again == (first[0], False)
    assert store.count() == 1
    stored = store.get(first[0])
    assert stored.id == first[0] and stored.recorded_at is not None
    assert stored.measurement.step_time_s == pytest.approx(0.101)


def test_a_team_or_log_path_does_not_make_a_run_new(store_url):
    store = RunsStore(store_url)
    run = tiny_run(3)
    relabelled = run.model_copy(update={"provenance": run.provenance.model_copy(update={"team": "other"}),
                                        "reproduce": run.reproduce.model_copy(update={"log_path": "/x.log"})})
    assert store.add(run)[1] and store.add(relabelled) == (1, False)


def test_query_filters_by_the_request_and_labels(store_url):
    store = RunsStore(store_url)
    for i in range(4):
        store.add(tiny_run(i))
    store.add(tiny_run(9, model="tiny-moe"))
    assert len(store.query(model="tiny-llama")) == 4
    assert [r.provenance.team for r in store.query(team="a", model="tiny-llama")] == ["a", "a"]
    assert [r.request.model for r in store.query(model="tiny-moe", gpu_type="cpu", engine="bundled")] == ["tiny-moe"]
    assert store.query(model="tiny-llama", limit=1)[0].id == 4  # newest first
    assert store.query(cluster="nowhere") == []
    with pytest.raises(TypeError, match="unknown filter"):
        store.query(colour="red")


def test_config_hash_is_computed_and_queryable(store_url):
    store = RunsStore(store_url)
    run = tiny_run(5).model_copy(update={"config_text": "a: 1\r\nb: 2  \n"})
    run = RunRecord.model_validate(run.model_dump())
    assert run.config_hash == config_hash("a: 1\nb: 2")
    store.add(run)
    assert [r.config_text for r in store.query(config_hash=run.config_hash)] == ["a: 1\r\nb: 2  \n"]


def test_delete_and_export(store_url):
    store = RunsStore(store_url)
    ids = [store.add(tiny_run(i))[0] for i in range(3)]
    assert store.delete(ids[1]) is True and store.delete(ids[1]) is False
    exported = json.loads(store.export_json())
    assert [run["id"] for run in exported] == [ids[0], ids[2]]
    assert RunRecord.model_validate(exported[0]).content_key() == tiny_run(0).content_key()


@pytest.mark.parametrize("field, value, message", [
    ("step_time_s", -1.0, "must not be negative"),
    ("step_time_s", math.nan, "finite"),
    ("tokens_per_s_per_gpu", math.inf, "finite"),
    ("step_time_s", 0.0, "must be positive"),
])
def test_a_bad_measurement_names_its_field(field, value, message):
    data = tiny_run(1).model_dump()
    data["measurement"][field] = value
    with pytest.raises(ValidationError, match=message) as info:
        RunRecord.model_validate(data)
    assert info.value.errors()[0]["loc"] == ("measurement", field)


def test_a_completed_run_needs_a_step_time():
    data = tiny_run(1).model_dump()
    data["measurement"]["step_time_s"] = None
    with pytest.raises(ValidationError, match="step_time_s"):
        RunRecord.model_validate(data)
    data["outcome"] = "out_of_memory"
    assert RunRecord.model_validate(data).outcome == "out_of_memory"


def test_the_url_comes_from_the_argument_then_the_environment_then_the_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(DB_ENV, str(tmp_path / "env.sqlite"))
    assert resolve_url() == f"sqlite:///{tmp_path / 'env.sqlite'}"
    assert resolve_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    monkeypatch.delenv(DB_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_url().endswith("/recipe-advisor/runs.sqlite")


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = RunsStore(str(tmp_path / "w.sqlite"))
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000


def test_migrations_upgrade_an_empty_database(store_url):
    engine = make_engine(store_url)
    assert current_revision(engine) is None
    RunsStore(store_url)
    assert current_revision(engine) == head_revision()


@pytest.mark.parametrize("previous", ["r0001", "r0002", "r0003", "r0004"])
def test_migrations_upgrade_a_previous_revision_keeping_its_runs(store_url, previous):
    engine = make_engine(store_url)
    upgrade_to(engine, previous)
    old = tiny_run(7).model_copy(update={"provenance": tiny_run(7).provenance.model_copy(
        update={"release": "25.09", "cluster": "eos"})})
    table = sa.Table("runs", sa.MetaData(), autoload_with=engine)
    row = {**_row_values(old.model_copy(update={"recorded_at": utcnow()}), old.content_key())}
    with engine.begin() as conn:
        conn.execute(table.insert().values(**{k: v for k, v in row.items() if k in table.c}))
    store = RunsStore(store_url)
    assert current_revision(engine) == head_revision() != previous
    assert [r.provenance.release for r in store.query(release="25.09", source="yours")] == ["25.09"]
    assert [r.id for r in store.query(request_key=row["request_key"])] == [1]
    with engine.connect() as conn:  # what plan reads as columns, filled from the stored record
        layout_key, speed = conn.execute(sa.select(runs_table.c.layout_key, runs_table.c.tokens_per_s_per_gpu)).one()
    assert (layout_key, speed) == ("1,1,1,1,1,1,4,none", pytest.approx(1007.0))
    assert store.add(old) == (1, False)


def test_the_head_read_from_the_migration_files_is_alembics_head():
    from alembic.script import ScriptDirectory

    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


OPEN_AND_REPORT = ("import sys; from service.runs.store import RunsStore; RunsStore(sys.argv[1]); "
                   "print('alembic' in sys.modules)")


def _opens_with_alembic(url: str) -> bool:
    """Whether a fresh process opening the store at ``url`` loaded Alembic (it does only to migrate)."""
    done = subprocess.run([sys.executable, "-c", OPEN_AND_REPORT, url], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, check=True, cwd=REPO)
    return done.stdout.strip() == "True"


@pytest.mark.slow  # two fresh processes: whether Alembic is imported shows only in a new interpreter
def test_a_store_at_head_opens_without_alembic_and_an_older_one_is_still_upgraded(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    upgrade_to(engine, "r0003")
    assert _opens_with_alembic(url)  # r0003 -> head: migrated
    assert current_revision(engine) == head_revision() != "r0003"
    assert "tokens_per_s_per_gpu" in {c["name"] for c in sa.inspect(engine).get_columns("runs")}
    assert not _opens_with_alembic(url)  # at head: one plain query, no Alembic


def _writer(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.service.runs.writer", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


@pytest.mark.slow
def test_six_concurrent_writers_lose_nothing_and_duplicate_nothing(store_url):
    """4 service-like and 2 trainer-like processes add 200 runs in overlapping ranges onto a fresh database
    (they also race to migrate it): each run is stored exactly once."""
    ranges = [(0, 45), (35, 80), (70, 115), (105, 150), (140, 200), (0, 200, 4)]
    procs = [_writer("add", store_url, *map(str, r)) for r in ranges]
    created = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        created.append(int(out))
    store = RunsStore(store_url)
    assert sum(created) == 200 == store.count()
    keys = {r.content_key() for r in store.query()}
    assert keys == {tiny_run(i).content_key() for i in range(200)}


@pytest.mark.slow
def test_a_writer_killed_mid_transaction_leaves_the_store_consistent(store_url):
    store = RunsStore(store_url)
    store.add(tiny_run(1))
    proc = _writer("hold", store_url)
    assert proc.stdout.readline().strip() == "inserted", proc.stderr.read()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert store.count() == 1
    assert store.add(tiny_run(2))[1] is True  # the dead writer's lock is gone
    assert store.count() == 2
    if store_url.startswith("sqlite"):
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(runs_table)).scalar() == 2

"""`recipe-advisor runs`: add from a run folder, a Megatron log, JSON or the published rows; list, show, compare,
delete, export; bad input exits 2 naming the file and line, and stores nothing."""

from __future__ import annotations

import json

import pytest

from service.runs.store import RunsStore
from tests.cli import run_cli
from tests.paths import REPO
from tests.service.runs.test_bundled_runs import write_run

DENSE_LOG = REPO / "tests" / "service" / "runs" / "fixtures" / "megatron" / "dense_llama32_1b_memory.log"


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "cli.sqlite")


def test_add_a_run_folder_then_list_show_and_compare(capsys, tmp_path, db):
    folder = write_run(tmp_path / "run")
    code, out, _ = run_cli(capsys, "runs", "add", str(folder), "--config", str(folder / "run.yaml"), "--db", db,
                           "--cluster", "laptop", "--team", "infra")
    assert code == 0 and "run 1: tiny-llama on 2 x cpu" in out and "1 of 1 run(s) added" in out
    code, out, _ = run_cli(capsys, "runs", "add", "--megatron-log", str(DENSE_LOG), "--gpu-type", "h100", "--db", db,
                           "--format", "json")
    assert code == 0 and json.loads(out) == [{"id": 2, "created": True}]
    code, out, _ = run_cli(capsys, "runs", "list", "--db", db, "--team", "infra")
    assert code == 0 and "laptop/infra" in out and "llama32-1b" not in out
    code, out, _ = run_cli(capsys, "runs", "show", "1", "--db", db)
    assert "sharding=none" in out and "cluster=laptop" in out
    code, out, _ = run_cli(capsys, "runs", "compare", "1", "2", "--db", db, "--format", "json")
    rows = json.loads(out)
    assert [row["id"] for row in rows] == [1, 2] and all(row["measured_over_estimate"] > 0 for row in rows)


def test_the_same_log_added_twice_is_stored_once(capsys, db):
    for created in (True, False):
        code, out, _ = run_cli(capsys, "runs", "add", "--megatron-log", str(DENSE_LOG), "--gpu-type", "h100",
                               "--db", db, "--format", "json")
        assert json.loads(out) == [{"id": 1, "created": created}]


def test_a_malformed_log_exits_2_naming_its_line_and_stores_nothing(capsys, tmp_path, db):
    log = tmp_path / "bad.log"
    log.write_text(DENSE_LOG.read_text().replace("(ms): 1399.9", "(ms): 13,99.9"))
    code, out, err = run_cli(capsys, "runs", "add", "--megatron-log", str(log), "--gpu-type", "h100", "--db", db)
    assert code == 2 and f"{log}:" in err and "is not a number" in err
    assert RunsStore(db).count() == 0


def test_a_truncated_metrics_file_exits_2_and_stores_nothing(capsys, tmp_path, db):
    folder = write_run(tmp_path / "run", tail='{"step": 7, "tp')
    code, _, err = run_cli(capsys, "runs", "add", str(folder), "--config", str(folder / "run.yaml"), "--db", db)
    assert code == 2 and "training.jsonl:7" in err and "truncated" in err
    assert RunsStore(db).count() == 0


def test_export_then_import_into_another_store(capsys, tmp_path, db):
    folder = write_run(tmp_path / "run")
    run_cli(capsys, "runs", "add", str(folder), "--config", str(folder / "run.yaml"), "--db", db)
    exported = tmp_path / "runs.json"
    code, _, err = run_cli(capsys, "runs", "export", "-o", str(exported), "--db", db)
    assert code == 0 and "wrote 1 run(s)" in err
    other = str(tmp_path / "other.sqlite")
    code, out, _ = run_cli(capsys, "runs", "add", "--json", str(exported), "--db", other, "--format", "json")
    assert json.loads(out) == [{"id": 1, "created": True}]
    assert RunsStore(other).get(1).content_key() == RunsStore(db).get(1).content_key()


def test_a_json_run_with_a_negative_step_time_names_the_field(capsys, tmp_path, db):
    folder = write_run(tmp_path / "run")
    run_cli(capsys, "runs", "add", str(folder), "--config", str(folder / "run.yaml"), "--db", db)
    run_cli(capsys, "runs", "export", "-o", str(tmp_path / "runs.json"), "--db", db)
    data = json.loads((tmp_path / "runs.json").read_text())
    data[0]["measurement"]["step_time_s"] = -0.5
    (tmp_path / "bad.json").write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "runs", "add", "--json", str(tmp_path / "bad.json"), "--db", str(tmp_path / "x"))
    assert code == 2 and "bad.json[0].measurement.step_time_s: step_time_s must not be negative" in err


def test_delete_refuses_an_unknown_id_and_deletes_nothing(capsys, tmp_path, db):
    folder = write_run(tmp_path / "run")
    run_cli(capsys, "runs", "add", str(folder), "--config", str(folder / "run.yaml"), "--db", db)
    code, _, err = run_cli(capsys, "runs", "delete", "1", "99", "--db", db)
    assert code == 2 and "no run 99" in err and RunsStore(db).count() == 1
    code, out, _ = run_cli(capsys, "runs", "delete", "1", "--db", db)
    assert code == 0 and RunsStore(db).count() == 0


def test_published_rows_load_as_published_runs_apart_from_yours(capsys, db):
    code, out, _ = run_cli(capsys, "runs", "add", "--published", "--db", db)
    assert code == 0
    store = RunsStore(db)
    assert store.count(source="published") > 250 and store.count(source="yours") == 0
    code, out, _ = run_cli(capsys, "runs", "list", "--db", db, "--source", "published", "--limit", "2")
    assert out.count("published (") == 2


def test_plan_reads_the_store_named_by_db(capsys, tmp_path, db):
    run_cli(capsys, "runs", "add", "--megatron-log", str(DENSE_LOG), "--gpu-type", "h100", "--db", db)
    code, out, _ = run_cli(capsys, "plan", "--model", "llama32-1b", "--gpus", "8", "--gpu-type", "h100",
                           "--seq-length", "8192", "--global-batch-size", "128", "--precision", "bf16", "--db", db,
                           "--format", "json", "--top", "0")
    rows = [row for row in json.loads(out)["layouts"] if row["measured"] and row["measured"]["yours"]]
    assert code == 0 and len(rows) == 1 and (rows[0]["tp"], rows[0]["micro_batch_size"]) == (1, 2)
    code, out, _ = run_cli(capsys, "plan", "--model", "llama32-1b", "--gpus", "8", "--gpu-type", "h100",
                           "--seq-length", "8192", "--global-batch-size", "128", "--precision", "bf16", "--db", db)
    assert code == 0 and out.count("measured in your runs: ") == 1

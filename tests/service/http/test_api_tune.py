"""POST /v1/tune: the trials a tune would run and what the store measured of them; it launches nothing."""

from service.runs.advice import writing_store
from service.runs.ingest import prepared as prepared_record
from service.runs.schema import RunRecord
from service.tune.search import stored_trial, trial_text
from service.tune.trials import candidate_config
from tests.service.tune.conftest import tuned_request

BODY = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled", "trials": 3, "steps": 4,
        "warmup": 1}


def test_the_trials_are_listed_with_commands_and_nothing_runs(client, tmp_path):
    answer = client.post("/v1/tune", json=BODY)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert [t["index"] for t in data["trials"]] == [1, 2, 3]
    assert data["trials"][0]["kind"] == "recommended"
    assert all(t["outcome"] is None for t in data["trials"]) and data["measured"] == 0
    assert data["commands"]["here"].startswith("recipe-advisor tune --model tiny-llama --gpus 2 --gpu-type cpu")
    assert "--emit-sweep" in data["commands"]["sweep"]
    assert any(s["reason"].startswith("RA-E008") for s in data["skipped"])


def test_a_trial_the_store_holds_shows_its_measurement(client):
    prepared, candidates = tuned_request()
    text = trial_text(candidate_config(prepared, candidates.trials[1]), 4, 1)
    from service.runs.ingest import software_here

    record = RunRecord.model_validate({
        "provenance": {"engine": "bundled", "software": software_here()},
        "request": {"model": "tiny-llama", "gpu_type": "cpu", "gpus_per_node": 2, "seq_length": 64,
                    "global_batch_size": 16, "precision": "fp32"},
        "config_text": text, "measurement": {"step_time_s": 0.5, "tokens_per_s_per_gpu": 1024.0, "timed_steps": 4},
        "outcome": "completed"})
    store = writing_store()
    store.add(prepared_record(record))
    assert stored_trial(store, text, software_here()) is not None
    data = client.post("/v1/tune", json=BODY).json()
    assert data["measured"] == 1
    assert data["trials"][1]["measured_tokens_per_s_per_gpu"] == 1024.0
    assert data["best_measured"]["index"] == 2


def test_an_unknown_model_is_404_and_a_bad_trial_count_422(client):
    assert client.post("/v1/tune", json={**BODY, "model": "no-such-model"}).status_code == 404
    assert client.post("/v1/tune", json={**BODY, "trials": 0}).status_code == 422

"""The Tune view: a request's stored trials sorted by measurement beside the estimate, and the sweep to run; it
reads the runs store, escapes what it shows, and offers nothing that starts training."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
import yaml
from fastapi.testclient import TestClient

from service.cli.app import main
from service.http.app import create_app
from service.runs.ingest import prepared as prepared_record
from service.runs.ingest import software_here
from service.runs.schema import RunRecord
from service.runs.store import RunsStore
from service.tune.search import trial_text
from service.tune.trials import candidate_config
from tests.service.tune.conftest import tuned_request
from tests.service.tune.test_sweep import LLAMA_8B, megatron_log

TINY = {"model": "tiny-llama", "gpus": "2", "gpu_type": "cpu", "engine": "bundled", "trials": "4", "steps": "4",
        "warmup": "1"}
HOSTILE = "<script>alert('x')</script>"


@pytest.fixture
def page(tmp_path, monkeypatch):
    db = tmp_path / "web.sqlite"
    monkeypatch.setenv("RECIPE_ADVISOR_DB", str(db))
    with RunsStore(str(db)) as store, TestClient(create_app()) as client:
        yield client, store


def _trial_record(text: str, outcome: str, tokens: float = 0.0, detail: str | None = None) -> RunRecord:
    """A trial as `tune` records it: its trial config, this machine's software, its outcome."""
    measurement = {"step_time_s": 1024.0 / tokens, "tokens_per_s_per_gpu": tokens, "timed_steps": 4} if tokens else {}
    return prepared_record(RunRecord.model_validate({
        "provenance": {"engine": "bundled", "software": software_here()},
        "request": {"model": "tiny-llama", "gpu_type": "cpu", "gpus_per_node": 2, "seq_length": 64,
                    "global_batch_size": 16, "precision": "fp32"},
        "config_text": text, "measurement": measurement, "outcome": outcome, "outcome_detail": detail}))


def _store_trials(store, outcomes: dict[int, tuple]) -> None:
    """Record tune's trial ``i`` (1-based, tune order) of the tiny request with the given (outcome, tokens, detail)."""
    prepared, candidates = tuned_request()
    for index, (outcome, tokens, detail) in outcomes.items():
        text = trial_text(candidate_config(prepared, candidates.trials[index - 1]), int(TINY["steps"]),
                          int(TINY["warmup"]))
        store.add(_trial_record(text, outcome, tokens, detail))


def _trial_rows(html: str) -> list[str]:
    body = html.split('id="trials"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr><td class="num">(\d+)</td>', body)


class _Forms(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "form":
            self.forms.append(dict(attrs))


def test_stored_trials_are_sorted_by_measurement_beside_the_estimate(page):
    client, store = page
    _store_trials(store, {2: ("completed", 900.0, None), 3: ("completed", 1200.0, None),
                          4: ("out_of_memory", 0.0, "CUDA out of memory. Tried to allocate 2.00 GiB")})
    response = client.get("/tune", params=TINY)
    assert response.status_code == 200, response.text
    html = response.text
    assert _trial_rows(html) == ["3", "2", "4", "1"]  # fastest measured, measured, failed, not run yet
    assert "1,200" in html and "900" in html and "out of memory</span>: CUDA out of memory" in html
    assert "not run yet" in html and 'href="/runs/2"' in html
    assert "2 of 4 trial(s) measured" in html
    assert re.search(r"[01] of 1</div><div class=\"label\">pairs the estimate orders as measured", html)
    assert "the estimate&#39;s first choice (TP1 PP1 CP1 EP1 mbs8 rc:none fsdp2) is not measured yet" in html
    assert "recipe-advisor tune --model tiny-llama --gpus 2 --gpu-type cpu" in html
    assert "--emit-sweep tune-sweep" in html
    assert html.count("/run.sh and trial.yaml</summary>") == 4 and "$LAUNCH -m trainer trial.yaml" in html


def test_hostile_strings_in_stored_fields_and_the_query_are_escaped(page):
    client, store = page
    _store_trials(store, {1: ("crashed", 0.0, HOSTILE)})
    html = client.get("/tune", params=TINY).text
    assert HOSTILE not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    answer = client.get("/tune", params={**TINY, "model": HOSTILE})
    assert answer.status_code == 404 and HOSTILE not in answer.text and "&lt;script&gt;" in answer.text


def test_the_page_has_no_form_that_posts_and_no_endpoint_that_launches(page):
    client, store = page
    _store_trials(store, {1: ("completed", 1000.0, None)})
    for html in (client.get("/tune").text, client.get("/tune", params=TINY).text):
        forms = _Forms()
        forms.feed(html)
        assert forms.forms and all(f.get("method", "get").lower() == "get" for f in forms.forms)
        assert all(not f.get("action", "").startswith("/v1/") for f in forms.forms)
        assert "formmethod" not in html and 'method="post"' not in html.lower()
    assert client.post("/tune", data=TINY).status_code == 405


def test_an_automodel_sweep_shows_its_recipes_and_commands(page):
    client, _ = page
    html = client.get("/tune", params={**TINY, "emit": "automodel"}).text
    assert "NeMo AutoModel trial(s)" in html and "automodel trial.yaml --nproc-per-node 2" in html
    assert "--emit automodel --emit-sweep tune-sweep" in html and "-o best.yaml" not in html


def test_a_collected_megatron_sweep_shows_on_the_page(tmp_path, monkeypatch, capsys):
    sweep, db = tmp_path / "sweep", tmp_path / "runs.sqlite"
    assert main([*LLAMA_8B, "--emit-sweep", str(sweep)]) == 0
    for index, step_ms in ((1, 2000.0), (2, 1500.0)):
        config = yaml.safe_load((sweep / f"trial-0{index}" / "trial.yaml").read_text())
        (sweep / f"trial-0{index}" / "megatron.log").write_text(megatron_log(config, step_ms))
    (sweep / "trial-03" / "megatron.log").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    assert main([*LLAMA_8B, "--collect", str(sweep), "--db", str(db)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("RECIPE_ADVISOR_DB", str(db))
    query = {"model": "llama3-8b", "gpus": "8", "gpu_type": "h100", "engine": "megatron", "trials": "4",
             "steps": "8", "warmup": "2"}
    with TestClient(create_app()) as client:
        html = client.get("/tune", params=query).text
    assert _trial_rows(html) == ["2", "1", "3", "4"] and html.count("(collected sweep)") == 3
    assert "out of memory</span>: " in html and html.count(">not run yet</span>") == 1
    assert "Megatron Bridge trial(s)" in html and "run_recipe.py --recipe" in html


def test_a_recommendation_links_to_the_tune_of_its_request(page):
    client, _ = page
    query = {"model": "tiny-llama", "gpus": "2", "gpu_type": "cpu", "engine": "bundled", "precision": "fp32",
             "grad_reduce_dtype": "fp32"}
    link = re.search(r'href="(/tune\?[^"]+)"', client.get("/recommend", params=query).text).group(1)
    answer = client.get(link.replace("&amp;", "&"))
    assert answer.status_code == 200 and "2 x cpu" in answer.text and 'value="fp32" selected' in answer.text

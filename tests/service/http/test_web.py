"""The HTML pages through the ASGI test client: form, validate page, escaping, errors as pages."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

import recipe_index
from service.http.app import create_app
from service.request import least

SCRIPT = "<script>alert('x')</script>"
GOOD = """\
model:
  pretrained_model_name_or_path: llama3-8b
step_scheduler:
  global_batch_size: 64
distributed:
  strategy: megatron
  tp_size: 2
  sequence_parallel: true
hardware:
  gpu_type: h100
  gpus_per_node: 8
"""
BAD_TP_LINE = 7
BAD_TP = GOOD.replace("tp_size: 2", "tp_size: 3")


def finding_rows(html: str) -> list[tuple[int, str]]:
    """(line, row html) of each finding row of the validate listing."""
    return [(int(line), row)
            for line, row in re.findall(r'<tr class="finding[^"]*" data-line="(\d+)">(.*?)</tr>', html, re.S)]


def test_form_lists_models_and_hardware(client):
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    for card in recipe_index.list_models()[:5]:
        assert f'<option value="{card.id}">' in r.text
    for card in recipe_index.list_hardware():
        assert f'<option value="{card.name}"' in r.text
    for name in ("model", "gpu_type", "gpus", "nodes", "goal", "seq_length", "engine"):
        assert f'name="{name}"' in r.text
    assert 'action="/recommend"' in r.text


def test_form_prefills_from_the_query_and_escapes_it(client):
    r = client.get("/", params={"model": SCRIPT, "gpus": "4"})
    assert SCRIPT not in r.text
    assert "&lt;script&gt;" in r.text
    assert 'name="gpus" type="number" min="1"' in r.text and 'value="4"' in r.text


def test_pages_link_css_and_need_no_inline_script(client):
    r = client.get("/")
    assert '/static/style.css' in r.text
    assert "<script>" not in r.text  # only the external, optional app.js
    assert client.get("/static/style.css").status_code == 200
    assert client.get("/static/app.js").status_code == 200


def test_validate_page_form(client):
    r = client.get("/validate")
    assert r.status_code == 200
    assert 'enctype="multipart/form-data"' in r.text and 'name="yaml"' in r.text and 'name="file"' in r.text


def test_validate_page_shows_finding_under_its_line(client):
    r = client.post("/validate", data={"yaml": BAD_TP})
    assert r.status_code == 200
    rows = finding_rows(r.text)
    tp_rows = [line for line, row in rows if "distributed.tp_size" in row]
    assert tp_rows == [BAD_TP_LINE] * len(tp_rows) and tp_rows
    assert f'<tr id="L{BAD_TP_LINE}" class="flagged">' in r.text
    assert "error(s)" in r.text


def test_validate_page_clean_config(client):
    r = client.post("/validate", data={"yaml": GOOD})
    assert r.status_code == 200
    assert "No errors" in r.text


def test_validate_page_upload_wins_over_paste(client):
    r = client.post("/validate", data={"yaml": GOOD}, files={"file": ("mine.yaml", BAD_TP.encode(), "text/yaml")})
    assert r.status_code == 200
    assert "<code>mine.yaml</code>" in r.text
    assert any("distributed.tp_size" in row for _, row in finding_rows(r.text))


def test_validate_page_hardware_override(client):
    r = client.post("/validate", data={"yaml": GOOD, "gpus": "6", "nodes": "1"})
    assert r.status_code == 200
    assert "No errors" not in r.text


def test_validate_page_escapes_the_document(client):
    hostile = f"model:\n  pretrained_model_name_or_path: \"{SCRIPT}\"\n# {SCRIPT}\n"
    r = client.post("/validate", data={"yaml": hostile})
    assert r.status_code == 200
    assert SCRIPT not in r.text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in r.text


@pytest.mark.parametrize(
    "data, status, words",
    [
        ({"yaml": ""}, 422, "paste a YAML"),
        ({"yaml": GOOD, "gpus": "many"}, 422, "whole number"),
        ({"yaml": GOOD, "gpu_type": "h1000"}, 422, "unknown GPU type"),
        ({"yaml": "a: [1, 2\nb: 3\n"}, 400, "line 2"),
        ({"yaml": "a: " + "[" * 10_000 + "]" * 10_000}, 400, "nesting"),
    ],
)
def test_validate_page_bad_input_is_a_page_not_a_traceback(client, data, status, words):
    r = client.post("/validate", data=data)
    assert r.status_code == status
    assert r.headers["content-type"].startswith("text/html")
    assert words in r.text
    assert "Traceback" not in r.text


def test_validate_page_binary_upload(client):
    r = client.post("/validate", files={"file": ("x.yaml", b"\x00\x01\x02", "application/octet-stream")})
    assert r.status_code == 422
    assert "binary" in r.text


def test_validate_page_escapes_hostile_upload_names(client):
    r = client.post("/validate", files={"file": (f"{SCRIPT}.yaml", GOOD.encode(), "text/yaml")})
    assert r.status_code == 200
    assert SCRIPT not in r.text


def test_validate_page_over_1_mib_is_413(client):
    r = client.post("/validate", files={"file": ("big.yaml", b"a: 1\n" * 300_000, "text/yaml")})
    assert r.status_code == 413


def test_oversize_form_post_from_a_browser_gets_a_page(client):
    r = client.post("/validate", files={"file": ("big.yaml", b"a: 1\n" * 300_000, "text/yaml")},
                    headers={"accept": "text/html"})
    assert r.status_code == 413
    assert r.headers["content-type"].startswith("text/html")
    assert "1024 KiB" in r.text


# ------------------------------------------------------------------ recommend result page

QUERY = {"model": "llama3-8b", "gpu_type": "h100", "gpus": "8", "nodes": "1", "goal": "pretrain",
         "seq_length": "", "engine": "megatron", "precision": ""}


@pytest.fixture(scope="module")
def result(client):
    r = client.get("/recommend", params=QUERY)
    assert r.status_code == 200, r.text[:500]
    return r.text


@pytest.fixture(scope="module")
def answer(client):
    return client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "nodes": 1}).json()


def test_result_page_shows_every_part(result):
    for section in ("recipe", "performance", "layout", "memory", "other-layouts", "findings", "changes", "config",
                    "commands"):
        assert f'id="{section}"' in result, section
    for header in ("TP", "PP", "VP", "CP", "EP", "ETP", "DP", "SP", "Micro batch", "Accumulation"):
        assert f"<th>{header}</th>" in result
    assert "Why this recipe" in result and "step time" in result and "tokens/s per GPU" in result and "MFU" in result


def test_result_page_numbers_are_the_apis(result, answer):
    layout = answer["layout"]
    assert f"{layout['step_time_s']:.2f} s" in result
    assert f"{layout['tokens_per_s_per_gpu']:,.0f}" in result
    assert answer["recipe"]["name"] in result
    for change in answer["changes"]:
        assert change["key"] in result


def test_result_page_memory_chart_is_to_scale(result, answer):
    svg = re.search(r'<svg class="memory" viewBox="0 0 (\d+) \d+".*?</svg>', result, re.S)
    assert svg
    width = int(svg.group(1))
    segments = [float(w)
                for w in re.findall(r'<rect class="segment" x="[\d.]+" y="\d+" width="([\d.]+)"', svg.group(0))]
    capacity_x = float(re.search(r'<line x1="([\d.]+)"[^>]*stroke="#c53030"', svg.group(0)).group(1))
    memory = answer["layout"]["memory_gib"]
    # Segments add up to the total, drawn on the same scale as the capacity line.
    assert sum(segments) / capacity_x == pytest.approx(memory["total"] / answer["hardware"]["memory_gib"], rel=0.01)
    assert capacity_x < width


def test_result_page_yaml_matches_the_download(client, result):
    download = client.get("/recommend.yaml", params=QUERY)
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("application/yaml")
    assert download.headers["content-disposition"] == 'attachment; filename="llama3-8b-pretrain-8xh100.yaml"'
    shown = re.search(r'<code id="config-yaml">(.*?)</code>', result, re.S).group(1)
    assert html.unescape(shown) == download.text
    # The bundled trainer's launch commands name the file the button downloads.
    bundled = client.get("/recommend", params={**QUERY, "engine": "bundled", "model": "tiny-llama", "gpu_type": "cpu",
                                                "gpus": "2"})
    assert bundled.status_code == 200, bundled.text[:300]
    assert "tiny-llama-pretrain-2xcpu.yaml" in bundled.text.split('id="commands"')[1]


def test_result_page_query_round_trips_to_the_form(result):
    link = re.search(r'href="/\?([^"]+)">Change the request', result).group(1)
    assert "model=llama3-8b" in html.unescape(link) and "gpus=8" in html.unescape(link)


@pytest.mark.parametrize(
    "change, status, words",
    [
        ({"model": "llama3-8x"}, 404, "llama3-8b"),
        ({"gpu_type": "h1000"}, 404, "h100"),
        ({"gpus": "eight"}, 422, "valid integer"),
        ({"goal": "train"}, 422, "pretrain"),
        ({"model": "deepseek-v3", "gpus": "1"}, 400, "GPUs found to fit it"),
    ],
)
def test_result_page_errors_are_the_form_with_the_problem(client, change, status, words):
    r = client.get("/recommend", params={**QUERY, **change})
    assert r.status_code == status
    assert 'role="alert"' in r.text and words in r.text
    assert 'action="/recommend"' in r.text  # the form again, filled in
    assert client.get("/recommend.yaml", params={**QUERY, **change}).status_code == status


def test_result_page_escapes_what_the_user_typed(client):
    r = client.get("/recommend", params={**QUERY, "model": SCRIPT})
    assert r.status_code == 404
    assert SCRIPT not in r.text and "&lt;script&gt;" in r.text


def test_root_path_prefixes_every_link():
    with TestClient(create_app(), root_path="/advisor") as prefixed:
        page = prefixed.get("/recommend", params=QUERY).text
    assert 'href="/advisor/static/style.css"' in page
    assert 'href="/advisor/recommend.yaml?' in page and 'href="/advisor/validate"' in page


def test_recommend_download_reads_gpus_as_the_api_does(client):
    r = client.get("/recommend.yaml", params={"model": "llama3-8b", "gpu_type": "h100", "gpus": 64})
    assert r.status_code == 200, r.text
    assert "gpus_per_node: 8" in r.text and "num_nodes: 8" in r.text


def test_fix_texts_name_the_forms_fields(client):
    """The service's fixes say `--precision bf16 (API: precision bf16)`; the page says its own field."""
    r = client.get("/recommend?model=llama3-8b&gpu_type=a100-80gb&gpus=2&precision=fp8")
    assert r.status_code == 400
    assert "use Precision bf16" in r.text and "--precision" not in r.text and "API:" not in r.text


@pytest.mark.parametrize("path", ["/", "/validate"])
def test_the_api_link_works_without_internet(client, path):
    """The header's API link goes to /docs, whose Swagger UI this server serves itself."""
    page = client.get(path).text
    links = re.findall(r'<a href="([^"]*)"[^>]*>API</a>', page)
    assert links == ["/docs"]
    answer = client.get(links[0])
    assert answer.status_code == 200 and "swagger" in answer.text.lower()
    for text in (page, answer.text):  # nothing either page loads is off this server
        assert not re.search(r"""(src|href|url)\s*[=:]\s*["'](https?:)?//""", text)


def test_the_sequence_length_field_allows_what_the_server_takes(client):
    field = re.search(r'<input id="seq_length"[^>]*>', client.get("/").text).group(0)
    assert f'min="{least("seq_length")}"' in field and least("seq_length") == 2
    assert client.get("/recommend?model=llama3-8b&gpu_type=h100&gpus=8&seq_length=2").status_code == 200

"""The HTML pages through the ASGI test client: form, validate page, escaping, errors as pages."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

import recipe_index
from service.app import create_app

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


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as c:
        yield c


def finding_rows(html: str) -> list[tuple[int, str]]:
    """(line, row html) of each finding row of the validate listing."""
    return [(int(line), row) for line, row in re.findall(r'<tr class="finding[^"]*" data-line="(\d+)">(.*?)</tr>', html, re.S)]


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

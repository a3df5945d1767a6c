"""The web form's fields: the gradient reduce dtype, whole numbers, uploads, and the memory it shows."""

from __future__ import annotations

import re

import pytest

from service.cli.app import main
from service.configs.yamlio import load_yaml
from service.http.web_result import gib_text
from tests.service.http.test_json_bodies import REQUEST


def test_form_offers_the_gradient_reduce_dtype(client):
    page = client.get("/", params={"grad_reduce_dtype": "bf16"}).text
    assert '<select id="grad_reduce_dtype" name="grad_reduce_dtype">' in page
    assert '<option value="bf16" selected>' in page and '<option value="fp32" >' in page


def test_yaml_download_applies_the_gradient_reduce_dtype(client):
    query = {"model": "llama3-8b", "gpu_type": "h100", "gpus": "8", "goal": "pretrain"}
    bf16 = client.get("/recommend.yaml", params={**query, "grad_reduce_dtype": "bf16"})
    assert bf16.status_code == 200
    assert load_yaml(bf16.text).data["distributed"]["grad_reduce_dtype"] == "bf16"
    plain = load_yaml(client.get("/recommend.yaml", params=query).text).data
    assert plain["distributed"].get("grad_reduce_dtype", "fp32") == "fp32"
    page = client.get("/recommend", params={**query, "grad_reduce_dtype": "bf16"}).text
    assert "grad_reduce_dtype=bf16" in page  # "Change the request" and the download keep it


def test_form_refuses_a_bad_gradient_reduce_dtype(client):
    response = client.get("/recommend", params={**REQUEST, "grad_reduce_dtype": "fp16"})
    assert response.status_code == 422
    assert "<code>grad_reduce_dtype</code>" in response.text


def test_the_page_names_its_gradient_reduce_field_in_fixes():
    from service.http.web import _form_wording

    assert (_form_wording("use --grad-reduce-dtype fp32 (API: grad_reduce_dtype fp32)")
            == "use Gradient reduce dtype fp32")


@pytest.mark.parametrize("field", ["gpus", "nodes"])
def test_a_superscript_digit_in_the_validate_form_is_a_form_problem(client, field):
    response = client.post("/validate", data={"yaml": "model:\n  pretrained_model_name_or_path: llama3-8b\n",
                                              field: "²"})
    assert response.status_code == 422 and "text/html" in response.headers["content-type"]
    assert "whole number" in response.text


def test_an_empty_uploaded_file_is_named(client):
    """An empty upload was answered "paste a YAML config or choose a file"."""
    page = client.post("/validate", files={"file": ("empty.yaml", b"", "application/yaml")}, data={"yaml": ""})
    assert page.status_code == 422 and "empty.yaml is empty" in page.text


@pytest.mark.parametrize("value,shown", [(61.3497, "61.4"), (61.35, "61.4"), (4.5549, "4.6"), (4.55, "4.6"),
                                         (2.04, "2.0"), (-0.25, "-0.3"), (0.0, "0.0")])
def test_memory_is_shown_from_the_published_value(value, shown):
    assert gib_text(value) == shown == gib_text(round(value, 2))


def test_the_web_page_and_the_cli_show_the_same_memory(client, capsys):
    assert main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "memory per GPU:" in x)
    cli = re.search(r"memory per GPU: ([\d.]+) GiB \(weights ([\d.]+), grads ([\d.]+)", line).groups()
    page = client.get("/recommend", params={"model": "llama3-8b", "gpu_type": "h100", "gpus": "8"}).text
    assert f"{cli[0]} GiB</div>" in page and f"gradients {cli[2]} GiB" in page and f"weights {cli[1]} GiB" in page

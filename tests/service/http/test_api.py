"""The REST API through the ASGI test client: index routes, /v1/validate, limits and the error contract."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import tracemalloc

import pytest
from fastapi.testclient import TestClient

import recipe_index
from service.http.app import create_app
from tests.paths import REPO
from tests.service.cli.test_validate import GOOD  # one clean config for the CLI and the API tests

# TP=3 cannot divide 8 GPUs; the finding sits on line 8, where tp_size is.
BAD_TP = GOOD.replace("tp_size: 2", "tp_size: 3")
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def post_yaml(client, text, **params):
    return client.post("/v1/validate", content=text, params=params, headers={"content-type": "text/plain"})


def get_json(client, path, status=200, **params):
    """GET ``path`` (query ``params``), check the status code and return the JSON body."""
    r = client.get(path, params=params)
    assert r.status_code == status, r.text
    return r.json()


# ------------------------------------------------------------------ service


def test_healthz_reports_the_index(client):
    body = get_json(client, "/healthz")
    assert body["status"] == "ok"
    assert body["recipes"] == len(recipe_index.list_recipes()) > 0
    assert body["models"] == len(recipe_index.list_models()) > 0
    assert body["hardware"] == len(recipe_index.list_hardware()) > 0


def test_serving_never_imports_torch():
    # A fresh interpreter: other tests in this process may have imported torch already.
    import subprocess

    code = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from service.http.app import create_app\n"
        "c = TestClient(create_app())\n"
        "assert c.get('/healthz').status_code == 200\n"
        "assert c.post('/v1/validate', content=sys.argv[1], headers={'content-type': 'text/plain'})"
        ".status_code == 200\n"
        "r = c.post('/v1/recommend', json={'model': 'llama3-8b', 'gpus': 8, 'gpu_type': 'h100', 'goal': 'sft'})\n"
        "assert r.status_code == 200, r.text\n"
        "assert c.get('/').status_code == 200\n"
        "assert 'torch' not in sys.modules, 'serving imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, GOOD], capture_output=True, text=True, timeout=120,
                          cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_security_headers_on_pages_and_api(client):
    r = client.get("/healthz")
    assert r.headers["x-content-type-options"] == "nosniff"
    page = client.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_unknown_route_is_404_json(client):
    assert get_json(client, "/v1/nope", 404)["detail"] == "Not Found"


# ------------------------------------------------------------------ index


def test_hardware_lists_every_card(client):
    cards = get_json(client, "/v1/hardware")
    assert [h["name"] for h in cards] == [h.name for h in recipe_index.list_hardware()]
    h100 = next(h for h in cards if h["name"] == "h100")
    assert h100["memory_gib"] == recipe_index.get_hardware("h100").memory_gib


def test_models_list_and_detail(client):
    ids = [m["id"] for m in get_json(client, "/v1/models")]
    assert "llama3-8b" in ids and len(ids) == len(recipe_index.list_models())
    detail = get_json(client, "/v1/models/llama3-8b")
    assert detail["num_key_value_heads"] == 8 and detail["num_hidden_layers"] == 32


def test_model_detail_by_hf_id_with_a_slash(client):
    assert get_json(client, "/v1/models/meta-llama/Meta-Llama-3-8B")["id"] == "llama3-8b"


def test_unknown_model_is_404_with_closest_ids(client):
    body = get_json(client, "/v1/models/llama3-8x", 404)
    assert body["field"] == "model"
    assert body["suggestions"][0] == "llama3-8b"
    assert "llama3-8b" in body["detail"]


def test_model_lookup_never_reads_server_files(client, tmp_path):
    # A real config.json on the server's disk: the CLI would load it, the service must not.
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    assert "config.json" not in get_json(client, f"/v1/models/{tmp_path}", 404)["detail"]


def test_recipes_list_and_filters(client):
    everything = get_json(client, "/v1/recipes")
    assert len(everything) == len(recipe_index.list_recipes())
    rows = get_json(client, "/v1/recipes", mode="sft", hardware="h100")
    assert rows and all(row["mode"] == "sft" and row["hardware"] == "h100" for row in rows)
    expected = recipe_index.list_recipes(family="llama", kind="library", num_gpus=8)
    got = get_json(client, "/v1/recipes", family="llama", kind="library", num_gpus=8)
    assert [row["name"] for row in got] == [e.name for e in expected]


def test_recipes_filter_wrong_values_are_422_naming_the_field(client):
    assert get_json(client, "/v1/recipes", 422, mode="train")["detail"][0]["loc"] == ["query", "mode"]
    assert get_json(client, "/v1/recipes", 422, num_gpus="eight")["detail"][0]["loc"] == ["query", "num_gpus"]


def test_recipe_detail_json_and_yaml_by_accept(client):
    name = "llama3_8b_pretrain_config"  # a legacy Megatron alias resolves too
    entry = recipe_index.get_recipe(name)
    body = get_json(client, f"/v1/recipes/{name}")
    assert body["name"] == entry.name and body["model"] == "llama3-8b"
    assert body["yaml"] == recipe_index.load_recipe_text(name)
    raw = client.get(f"/v1/recipes/{name}", headers={"accept": "application/yaml"})
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("application/yaml")
    assert raw.text == body["yaml"]


def test_unknown_recipe_is_404_with_suggestions(client):
    body = get_json(client, "/v1/recipes/llama3_8b_pretrain_2gpu_h100_bf17", 404)
    assert body["field"] == "name"
    assert "llama3_8b_pretrain_2gpu_h100_bf16" in body["suggestions"]


# ------------------------------------------------------------------ validate


def test_validate_clean_config_as_text(client):
    r = post_yaml(client, GOOD)
    assert r.status_code == 200
    body = r.json()
    assert body["summary"] == {"files": 1, "errors": 0, "warnings": 0}
    assert body["files"][0]["path"] == "<request>"


def test_validate_every_bundled_recipe_shape_round_trips(client):
    name = recipe_index.list_recipes(kind="library")[0].name
    r = post_yaml(client, recipe_index.load_recipe_text(name))
    assert r.status_code == 200
    assert r.json()["summary"]["errors"] == 0


def test_validate_finding_has_line_and_column(client):
    r = post_yaml(client, BAD_TP)
    assert r.status_code == 200
    findings = r.json()["files"][0]["findings"]
    tp = [f for f in findings if f["key"] == "distributed.tp_size" and f["severity"] == "error"]
    assert tp, findings
    assert (tp[0]["line"], tp[0]["column"]) == (8, 3)
    assert tp[0]["fix"]
    assert r.json()["summary"]["errors"] >= 1


def test_validate_json_body_and_hardware_override(client):
    r = client.post("/v1/validate", json={"yaml": GOOD})
    assert r.json()["summary"]["errors"] == 0
    # The same config on 6 GPUs per node: TP=2 still divides, but 64 % (1 x 6) != 0 breaks the batch rule.
    r = client.post("/v1/validate", json={"yaml": GOOD, "gpus": 6, "nodes": 1})
    assert r.status_code == 200
    assert r.json()["summary"]["errors"] >= 1


def test_validate_query_parameters_apply_to_text_bodies(client):
    assert post_yaml(client, GOOD, gpus=6, nodes=1).json()["summary"]["errors"] >= 1


@pytest.mark.parametrize(
    "body, loc",
    [
        ({}, ["body", "yaml"]),
        ({"yaml": 5}, ["body", "yaml"]),
        ({"yaml": "a: 1", "gpus": "eight"}, ["body", "gpus"]),
        ({"yaml": "a: 1", "gpus": 0}, ["body", "gpus"]),
        ({"yaml": "a: 1", "gpu-type": "h100"}, ["body", "gpu-type"]),
    ],
)
def test_validate_json_shape_errors_are_422_naming_the_field(client, body, loc):
    r = client.post("/v1/validate", json=body)
    assert r.status_code == 422
    assert loc in [e["loc"] for e in r.json()["detail"]]


def test_validate_malformed_json_is_422(client):
    r = client.post("/v1/validate", content=b'{"yaml": ', headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][0] == "body"


def test_validate_unknown_gpu_type_is_404_with_suggestions(client):
    r = client.post("/v1/validate", json={"yaml": GOOD, "gpu_type": "h1000"})
    assert r.status_code == 404
    body = r.json()
    assert body["field"] == "gpu_type"
    assert body["suggestions"][0] == "h100"
    assert len(body["suggestions"]) == len(set(body["suggestions"]))


def test_validate_wrong_content_type_is_415(client):
    r = client.post("/v1/validate", content=b"\x89PNG", headers={"content-type": "image/png"})
    assert r.status_code == 415
    assert "text/plain" in r.json()["detail"]


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("- just\n- a list\n", "not a mapping"),
        ("model:\n  a: [1, 2\nb: 3\n", "syntax"),
        ("a: !!python/object/apply:os.system ['echo hi']\n", "tag"),
    ],
)
def test_validate_unusable_yaml_is_400_with_reason(client, text, words):
    r = post_yaml(client, text)
    assert r.status_code == 400
    body = r.json()
    assert body["field"] == "yaml"
    assert words in body["detail"]


def test_validate_syntax_error_reports_line(client):
    r = post_yaml(client, "model:\n  a: [1, 2\nb: 3\n")
    assert r.status_code == 400
    assert r.json()["line"] == 3


def test_validate_binary_and_non_utf8_are_400(client):
    assert post_yaml(client, b"\x00\x01\x02binary").status_code == 400
    r = post_yaml(client, "a: caf\u00e9".encode("latin-1"))
    assert r.status_code == 400
    assert "UTF-8" in r.json()["detail"]


def _bounded(client, text):
    tracemalloc.start()
    start = time.perf_counter()
    r = post_yaml(client, text)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return r, elapsed, peak


@pytest.mark.parametrize(
    "text",
    [
        ALIAS_BOMB,
        "a: " + "[" * 10_000 + "]" * 10_000,
        "a: " + "{b: " * 10_000 + "1" + "}" * 10_000,
    ],
    ids=["alias-bomb", "nested-10000-lists", "nested-10000-maps"],
)
def test_hostile_yaml_is_400_fast_and_bounded(client, text):
    r, elapsed, peak = _bounded(client, text)
    assert r.status_code == 400, r.text
    assert elapsed < 1.0
    assert peak < 64 * 1024 * 1024  # the bomb would expand to 9**9 values (hundreds of GiB)


def test_server_files_named_in_a_config_are_not_read(client, tmp_path):
    # A client's config is data: a model path in it must not make the server open that file.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                  "num_attention_heads": 4, "num_key_value_heads": 4,
                                  "intermediate_size": 128, "vocab_size": 256}))
    text = GOOD.replace("llama3-8b", str(config))
    done: dict = {}
    worker = threading.Thread(target=lambda: done.setdefault("r", post_yaml(client, text)), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert "r" in done, "validating a config that names a server path hung"
    assert done["r"].status_code == 200
    findings = done["r"].json()["files"][0]["findings"]
    assert any(f["key"] == "model.pretrained_model_name_or_path" for f in findings), findings


# ------------------------------------------------------------------ body limits


def test_body_over_1_mib_is_413_by_content_length(client):
    r = post_yaml(client, "a: " + "x" * (1 << 20))
    assert r.status_code == 413
    assert r.json()["field"] == "body"


def test_body_over_1_mib_is_413_when_streamed_without_length(client):
    def chunks():
        for _ in range(20):
            yield b"# " + b"x" * 65_534 + b"\n"

    r = client.post("/v1/validate", content=chunks(), headers={"content-type": "text/plain"})
    assert r.status_code == 413


def test_body_just_under_the_limit_is_read():
    app = create_app(max_body_bytes=64)
    with TestClient(app) as small:
        assert post_yaml(small, "a: 1\n").status_code == 200
        assert post_yaml(small, "a: " + "1" * 80).status_code == 413


def test_malformed_content_length_is_400(client):
    r = client.post("/v1/validate", content=b"a: 1", headers={"content-type": "text/plain", "content-length": "x"})
    assert r.status_code == 400


# ------------------------------------------------------------------ the contract


def test_openapi_describes_every_field_with_an_example(client):
    schema = client.get("/openapi.json").json()
    missing = []
    for name, component in schema["components"]["schemas"].items():
        if name in ("HTTPValidationError", "ValidationError"):
            continue  # FastAPI's own 422 body
        for field, spec in component.get("properties", {}).items():
            if not spec.get("description"):
                missing.append(f"{name}.{field}: description")
            # An optional nested model (anyOf [$ref, null]) is checked field by field as its own component.
            nested = "$ref" in spec or any("$ref" in branch for branch in spec.get("anyOf", []))
            if "examples" not in spec and not nested and spec.get("type") != "array" and "items" not in spec:
                missing.append(f"{name}.{field}: example")
    assert not missing, missing


def test_openapi_lists_the_routes(client):
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("/healthz", "/v1/validate", "/v1/recipes", "/v1/recipes/{name}", "/v1/models",
                  "/v1/models/{model_id}", "/v1/hardware"):
        assert route in paths, route
    body = paths["/v1/validate"]["post"]["requestBody"]["content"]
    assert {"application/json", "text/plain", "application/yaml"} <= set(body)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_their_scripts_from_this_server(client, page):
    r = client.get(page)
    assert r.status_code == 200
    assets = re.findall(r"""(?:src|href|url)\s*[=:]\s*["']([^"']+)["']""", r.text)
    scripts = [a for a in assets if a.endswith((".js", ".css"))]
    assert scripts, r.text
    for asset in assets:
        assert not re.match(r"(https?:)?//", asset), asset  # no CDN: the page renders offline
    for asset in scripts:
        served = client.get(asset)
        assert served.status_code == 200 and len(served.content) > 10_000, asset


def test_a_bug_is_a_500_without_a_traceback():
    app = create_app()

    @app.get("/boom")
    def boom():
        raise RuntimeError("secret internal detail")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500
    assert "internal error" in r.json()["detail"]
    assert "secret" not in r.text and "Traceback" not in r.text


def test_megatron_lm_arguments_are_validated_over_http(client):
    script = ("pretrain_gpt.py --num-layers 36 --hidden-size 4096 --num-attention-heads 32 \\\n"
              "  --group-query-attention --num-query-groups 8 --tensor-model-parallel-size 3\n")
    r = client.post("/v1/validate", json={"yaml": script, "dialect": "megatron-lm", "gpus": 8})
    assert r.status_code == 200
    (kv,) = [f for f in r.json()["files"][0]["findings"] if f["code"] == "RA-L002"]
    assert kv["key"] == "--tensor-model-parallel-size" and kv["line"] == 2
    refused = client.post("/v1/validate", json={"yaml": "run_recipe.py --config-file /etc/passwd\n",
                                                "dialect": "megatron-lm"})
    assert refused.status_code == 200 and "not read for a request" in refused.text

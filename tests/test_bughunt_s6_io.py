"""Bug hunt s6, input side: integers beyond 64 bits in YAML (files, overrides, HTTP, web form), JSON
bodies that cannot be read, strict request types, the documented plan defaults, and the web form's
gradient reduce dtype and unknown parameters."""

from __future__ import annotations

import json

import pytest

from service import api_models as m
from service.cli import main
from service.yamlio import OverrideError, YamlError, load_yaml, parse_overrides

BIG = "9" * 5000  # over Python's 4,300-digit limit for int(str)
CASES = {  # how YAML 1.1 writes an integer -> digits as written
    "decimal": (BIG, 5000),
    "hex": ("0x" + "f" * 5000, 5000),
    "sexagesimal": ("1" + "0" * 5000 + ":00", 5003),
    "4000 digits": ("9" * 4000, 4000),  # Python reads it; products of such sizes crashed the rules
    "65 bits": (str(1 << 64), 20),
}
REQUEST = {"model": "llama3-8b", "gpu_type": "h100", "gpus": 8}


# ------------------------------------------------------------------ the loader


@pytest.mark.parametrize("written, digits", CASES.values(), ids=list(CASES))
def test_an_integer_beyond_64_bits_is_a_positioned_error_naming_the_key(written, digits):
    with pytest.raises(YamlError) as caught:
        load_yaml(f"model:\n  name: x\ndistributed:\n  tp_size: {written}\n", "big.yaml")
    err = caught.value
    assert (err.path, err.line, err.column) == ("big.yaml", 4, 12)
    assert f"`distributed.tp_size` is an integer with {digits:,} digits" in err.reason
    assert "small integers" in err.reason and "write the intended number" in err.fix
    assert str(err).startswith("big.yaml:4:12: ")


def test_integers_within_64_bits_load_as_before():
    limit = (1 << 64) - 1  # torch.manual_seed takes a uint64
    doc = load_yaml(f"a: {limit}\nb: -{limit}\nc: 0x1f\nd: 1_000\nf: '{BIG}'\n")
    assert doc.data == {"a": limit, "b": -limit, "c": 31, "d": 1000, "f": BIG}
    # YAML 1.1's base-60 and leading-zero octal readings are refused, not guessed (bug hunt s12 H16)
    with pytest.raises(YamlError, match="base-60"):
        load_yaml("e: 190:20:30\n")


def test_an_integer_key_beyond_64_bits_names_its_mapping():
    with pytest.raises(YamlError, match=r"a key of `distributed` is an integer with 30 digits") as caught:
        load_yaml("distributed:\n  " + "9" * 30 + ": 1\n")
    assert (caught.value.line, caught.value.column) == (2, 3)


@pytest.mark.parametrize("value", [BIG, "[1, 2, " + "9" * 4000 + "]", "{a: 0x" + "f" * 17 + "}"])
def test_an_override_beyond_64_bits_is_refused_naming_the_flag(value):
    with pytest.raises(OverrideError, match=r"^override --distributed\.tp_size: the value is an integer with"):
        parse_overrides(["--distributed.tp_size", value])
    assert parse_overrides(["--train.seed", str((1 << 64) - 1)]) == [("train.seed", (1 << 64) - 1)]


# ------------------------------------------------------------------ the CLI


@pytest.fixture
def big_file(tmp_path):
    path = tmp_path / "bigint.yaml"
    path.write_text(f"distributed:\n  tp_size: {BIG}\n")
    (tmp_path / "small.yaml").write_text("distributed:\n  tp_size: 2\n")
    return path


def test_validate_reports_the_big_integer_as_unusable_yaml(big_file, capsys):
    code = main(["validate", str(big_file)])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)  # as any unusable YAML
    assert f"{big_file}:2:12: RA-F001 error: `distributed.tp_size` is an integer with 5,000 digits" in out
    assert "Traceback" not in out + err


def test_validate_json_carries_the_position(big_file, capsys):
    assert main(["validate", str(big_file), "--format", "json"]) == 2
    finding = json.loads(capsys.readouterr().out)["files"][0]["findings"][0]
    assert (finding["code"], finding["line"], finding["column"]) == ("RA-F001", 2, 12)


def test_diff_names_the_file_and_line(big_file, capsys):
    code = main(["diff", str(big_file.parent / "small.yaml"), str(big_file)])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"{big_file}:2:12: `distributed.tp_size` is an integer with 5,000 digits" in err
    assert "Traceback" not in out + err


# ------------------------------------------------------------------ HTTP: YAML routes


def test_v1_validate_answers_400_naming_yaml(client):
    for response in (
        client.post("/v1/validate", content=f"distributed:\n  tp_size: {BIG}\n",
                    headers={"content-type": "text/plain"}),
        client.post("/v1/validate", json={"yaml": f"distributed:\n  tp_size: {BIG}\n"}),
    ):
        assert response.status_code == 400, response.text
        body = response.json()
        assert (body["field"], body["line"], body["column"]) == ("yaml", 2, 12)
        assert "`distributed.tp_size` is an integer with 5,000 digits" in body["detail"]


def test_v1_diff_answers_400_naming_the_document(client):
    response = client.post("/v1/diff", json={"base": "a: 1\n", "new": f"a: {BIG}\n"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert (body["field"], body["line"]) == ("new", 1)
    assert body["detail"].startswith("new: unusable YAML at line 1, column 4: `a` is an integer")


def test_validate_page_shows_the_problem_with_400(client):
    response = client.post("/validate", data={"yaml": f"distributed:\n  tp_size: {BIG}\n"})
    assert response.status_code == 400
    assert "line 2: `distributed.tp_size` is an integer with 5,000 digits" in response.text


def test_v1_recommend_override_beyond_64_bits_is_400_naming_overrides(client):
    body = {**REQUEST, "overrides": {"distributed.tp_size": int("9" * 4000)}}  # json reads 4,000 digits
    response = client.post("/v1/recommend", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["field"] == "overrides"
    assert "--distributed.tp_size: the value is an integer with 4,000 digits" in response.json()["detail"]


# ------------------------------------------------------------------ HTTP: JSON bodies


def test_a_json_number_over_the_digit_limit_names_the_body(client):
    raw = '{"model": "llama3-8b", "gpu_type": "h100", "gpus": %s}' % BIG
    response = client.post("/v1/plan", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "body"
    assert "number too large" in body["detail"] and "4,300 digits" in body["detail"]


def test_a_json_body_that_is_not_utf8_names_the_body(client):
    response = client.post("/v1/plan", content=b'{"model": "\xff"}', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["field"] == "body" and "not UTF-8" in response.json()["detail"]


@pytest.mark.parametrize("route", ["/v1/plan", "/v1/recommend"])
@pytest.mark.parametrize("field, value", [("gpus", "8"), ("gpus", True), ("gpus", 8.5), ("gpus", 8.25e4),
                                          ("seq_length", "4096"), ("top", "3"), ("nodes", False)])
def test_request_numbers_are_strict_and_the_error_names_the_field(client, route, field, value):
    response = client.post(route, json={**REQUEST, field: value})
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["body", field]]


def test_v1_validate_json_body_is_strict_too(client):
    response = client.post("/v1/validate", json={"yaml": "a: 1\n", "gpus": "8"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "gpus"]


@pytest.mark.parametrize("route", ["/v1/plan", "/v1/recommend"])
def test_a_whole_number_written_as_a_float_is_that_integer(client, route):
    """Bug hunt s8b: the OpenAPI schema says `integer`, which JSON Schema (and schemathesis) take 8.0 to be."""
    as_float = client.post(route, json={**REQUEST, "gpus": 8.0, "top": 2.0})
    as_int = client.post(route, json={**REQUEST, "gpus": 8, "top": 2})
    assert as_float.status_code == as_int.status_code == 200
    assert as_float.json() == as_int.json()


def test_the_schema_keeps_the_bounds_of_every_integer_field():
    """Review s10 #1: a whole-number type on the fields had turned minimum/maximum into raw ge/le."""
    for model in (m.ValidateRequest, m.PlanBody, m.RecommendBody):
        for name, prop in model.model_json_schema()["properties"].items():
            for branch in prop.get("anyOf", [prop]):
                if branch.get("type") == "integer":
                    assert "minimum" in branch and "maximum" in branch and "ge" not in branch, (model, name)


def test_json_numbers_and_override_values_still_pass(client):
    assert client.post("/v1/plan", json={**REQUEST, "top": 1}).status_code == 200
    body = m.RecommendBody.model_validate({**REQUEST, "overrides": {"optimizer.lr": 1, "a.b": True, "c.d": "x"}})
    assert body.overrides == {"optimizer.lr": 1, "a.b": True, "c.d": "x"}


# ------------------------------------------------------------------ OpenAPI wording of the defaults


def test_plan_defaults_are_described_as_the_recipes(client):
    """The descriptions' example must be what the service answers, not a fixed 4096 / 32."""
    answer = client.post("/v1/plan", json={**REQUEST, "top": 1}).json()
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("PlanBody", "RecommendBody"):
        seq = schema[name]["properties"]["seq_length"]["description"]
        gbs = schema[name]["properties"]["global_batch_size"]["description"]
        assert f"llama3-8b pretrain: {answer['seq_length']})" in seq and "recipe" in seq.split(";")[1]
        assert f"llama3-8b pretrain: {answer['global_batch_size']})" in gbs
        assert "Only where the index has no recipe: 4096 for pretrain" in seq
        assert "default: 4096" not in seq and "(32 pretrain" not in gbs


# ------------------------------------------------------------------ web form


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


@pytest.mark.parametrize("path", ["/recommend", "/recommend.yaml"])
def test_unknown_query_parameters_are_named_not_ignored(client, path):
    params = {**REQUEST, "global_batch": "64", "zz": ""}
    response = client.get(path, params=params, headers={"accept": "text/html"})  # a browser
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    for name in ("global_batch", "zz"):
        assert f"<code>{name}</code>: unknown parameter" in response.text
    if path == "/recommend.yaml":  # curl: the same problems as text, not a page to save as the config
        response = client.get(path, params=params, headers={"accept": "*/*"})
        assert response.status_code == 422 and response.headers["content-type"].startswith("text/plain")
        assert all(f"error: {name}: unknown parameter" in response.text for name in ("global_batch", "zz"))


def test_the_page_names_its_gradient_reduce_field_in_fixes():
    from service.web import _form_wording

    assert _form_wording("use --grad-reduce-dtype fp32 (API: grad_reduce_dtype fp32)") == "use Gradient reduce dtype fp32"


def test_odd_integers_are_worded_for_what_they_are():
    # review s6 #11: `!!int abc` is no "integer with 3 digits"; a short number padded past what is read
    # is counted in characters.
    with pytest.raises(YamlError, match=r"`a` is tagged as an integer but 'abc' is not one"):
        load_yaml("a: !!int abc\n", "t.yaml")
    with pytest.raises(YamlError, match=r"`a` is an integer with 301 characters"):
        load_yaml("a: " + "0" * 300 + "1\n", "t.yaml")

"""Bug hunt s8 (notes/bughunt_s8.md), the command line: count and size flags bounded as the API and the
overrides bound them (#3, #4), a YAML the advised config cannot be read back as (#4), unusable local
config.json files (#7), `recommend -o -` (#8), `models --family` (#9d) and `validate --gpus` read per node
(#9f)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from recipe_index.errors import ModelConfigError
from recipe_index.models import MODELS_DIR, list_models, parse_config_json, resolve_model
from service import search_space
from service.api_requests import MAX_GPUS, MAX_NODES
from service.cli import main
from service.request_overrides import INTEGER_LIMITS
from service.rules import layout

TINY = ["--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]
LLAMA = ["--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"]
# 8 GPUs as 2 nodes of 4: a count of GPUs per node that leaves the node count to the file
TWO_NODES = (Path(__file__).resolve().parents[1]
             / "recipe_index/recipes/megatron/llama/llama3_70b_peft_8gpu_gb200_bf16.yaml")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_huge_search(monkeypatch):
    """The planner's divisor search trial-divides up to sqrt(world): for 2**64 GPUs that never ends.
    A count past the flag bounds must be refused before it, so reaching it with one is a failure."""
    for module in (search_space, layout):
        real = module.divisors

        def guarded(n, real=real):
            if n > MAX_GPUS * MAX_NODES:
                pytest.fail(f"the planner searched the divisors of {n}: the flag bound was not applied")
            return real(n)

        monkeypatch.setattr(module, "divisors", guarded)


# ---------------------------------------------------------------- #3: --gpus / --nodes bounds


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("flag, value, limit", [
    ("--gpus", MAX_GPUS + 1, MAX_GPUS), ("--gpus", 2**64, MAX_GPUS),
    ("--nodes", MAX_NODES + 1, MAX_NODES), ("--nodes", 10**18, MAX_NODES),
])
def test_counts_past_the_api_bounds_are_refused_naming_the_flag(capsys, no_huge_search, command, flag, value, limit):
    argv = ["--model", "llama3-8b", "--gpu-type", "h100", "--gpus", "8", "--nodes", "1"]
    argv[argv.index(flag) + 1] = str(value)
    code, out, err = run_cli(capsys, command, *argv)
    assert code == 2 and out == ""
    assert f"error: {flag}: expected an integer from 1 to {limit:,}, got {value}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flag, value, limit", [("--gpus", MAX_GPUS + 1, MAX_GPUS), ("--nodes", 2**64, MAX_NODES),
                                                ("--gpus", 0, MAX_GPUS)])
def test_validate_bounds_its_count_flags_alike(capsys, flag, value, limit):
    code, out, err = run_cli(capsys, "validate", str(TWO_NODES), flag, str(value))
    assert code == 2 and out == ""
    assert f"{flag}: expected an integer from 1 to {limit:,}, got {value}" in err


def test_the_bounds_themselves_are_accepted():
    from service.cli_plan import FLAG_LIMITS, check_flag_limits

    assert FLAG_LIMITS == {"gpus": MAX_GPUS, "nodes": MAX_NODES, **INTEGER_LIMITS}
    check_flag_limits(**FLAG_LIMITS)  # raises nothing at the limits


# ---------------------------------------------------------------- #4: --seq-length / --global-batch-size


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("flag, field, beyond", [
    ("--global-batch-size", "global_batch_size", INTEGER_LIMITS["global_batch_size"] + 1),
    ("--global-batch-size", "global_batch_size", 2**63),
    ("--global-batch-size", "global_batch_size", 2**64),
    ("--seq-length", "seq_length", INTEGER_LIMITS["seq_length"] + 1),
])
def test_size_flags_have_the_limits_of_their_overrides(capsys, command, flag, field, beyond):
    limit, least = INTEGER_LIMITS[field], 2 if field == "seq_length" else 1  # a token and its label
    code, out, err = run_cli(capsys, command, *LLAMA, flag, str(beyond))
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"error: {flag}: expected an integer from {least} to {limit:,}, got {beyond}" in err


@pytest.mark.parametrize("key, field", [("step_scheduler.global_batch_size", "global_batch_size"),
                                        ("dataset.seq_length", "seq_length")])
def test_the_override_spelling_is_refused_in_the_same_words(capsys, key, field):
    limit, least = INTEGER_LIMITS[field], 2 if field == "seq_length" else 1
    code, _, err = run_cli(capsys, "recommend", *LLAMA, f"--{key}", str(limit + 1))
    assert code == 2 and f"--{key}: expected an integer from {least} to {limit:,}, got {limit + 1}" in err


def test_a_config_that_does_not_read_back_is_refused_without_a_traceback(capsys, tmp_path, monkeypatch):
    """63 levels pass the override's own nesting limit; under `metadata` the written YAML is deeper than a
    config may be, so recommend's re-read raises YamlError: a message and exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    deep = "[" * 63 + "]" * 63
    code, out, err = run_cli(capsys, "recommend", *TINY, "--metadata.deep", deep, "-o", "c.yaml")
    assert code == 2 and out == ""
    assert "error: the advised config would not read back as a config" in err
    assert "nesting deeper than 64 levels" in err and "Nothing written" in err
    assert not (tmp_path / "c.yaml").exists()


# ---------------------------------------------------------------- #7: unusable local config.json


def _tiny_config() -> dict:
    raw = json.loads((MODELS_DIR / "tiny-llama.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("advisor_")}


@pytest.fixture
def deep_model(tmp_path) -> Path:
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    return folder


@pytest.fixture
def duplicate_model(tmp_path) -> Path:
    folder = tmp_path / "dup"
    folder.mkdir()
    text = json.dumps(_tiny_config())
    (folder / "config.json").write_text(text[:-1] + ', "hidden_size": 32}')
    return folder


def test_a_deeply_nested_config_json_is_a_model_config_error(deep_model):
    with pytest.raises(ModelConfigError) as err:
        resolve_model(str(deep_model))
    assert err.value.source == str(deep_model / "config.json")
    assert "nested too deeply" in err.value.problem


def test_a_key_given_twice_in_a_config_json_is_refused_naming_it(duplicate_model):
    with pytest.raises(ModelConfigError) as err:
        resolve_model(str(duplicate_model))
    assert "'hidden_size' is given twice" in err.value.problem
    with pytest.raises(ModelConfigError, match="'a' is given twice"):
        parse_config_json('{"text_config": {"a": 1, "a": 2}}', "nested.json")  # in any object, not only the top


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("fixture, says", [("deep_model", "not a config.json: nested too deeply"),
                                           ("duplicate_model", "key 'hidden_size' is given twice")])
def test_plan_and_recommend_refuse_them_with_exit_2(capsys, request, tmp_path, monkeypatch, command, fixture, says):
    monkeypatch.chdir(tmp_path)
    folder = request.getfixturevalue(fixture)
    code, out, err = run_cli(capsys, command, "--model", str(folder), "--gpus", "2", "--gpu-type", "cpu",
                             "--engine", "bundled")
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"error: {folder / 'config.json'}: {says}" in err


def test_validate_reports_them_as_ra_c009_like_any_unusable_config_json(capsys, tmp_path, deep_model, duplicate_model):
    missing = tmp_path / "missing"
    missing.mkdir()
    (missing / "config.json").write_text(json.dumps({k: v for k, v in _tiny_config().items() if k != "hidden_size"}))
    results = {}
    for folder in (deep_model, duplicate_model, missing):
        config = tmp_path / f"{folder.name}.yaml"
        config.write_text(f"model:\n  pretrained_model_name_or_path: {folder}\nhardware:\n  gpu_type: h100\n"
                          "  gpus_per_node: 2\n")
        code, out, err = run_cli(capsys, "validate", str(config), "--format", "json")
        [finding] = [f for f in json.loads(out)["files"][0]["findings"] if f["code"] == "RA-C009"]
        results[folder.name] = (code, finding["severity"], finding["message"])
    assert {(code, severity) for code, severity, _ in results.values()} == {results["missing"][:2]}
    assert results["missing"][1] == "error"
    assert "nested too deeply" in results["deep"][2] and "'hidden_size' is given twice" in results["dup"][2]


@pytest.mark.parametrize("path", sorted(MODELS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_bundled_model_configs_give_no_key_twice(path):
    parse_config_json(path.read_text(encoding="utf-8"), str(path))  # raises ModelConfigError on a duplicate


def test_the_model_folder_holds_every_json_under_recipe_index():
    """So the test above runs over all of them; the index loads them with the same strict parser."""
    assert {path.parent for path in MODELS_DIR.parent.rglob("*.json")} == {MODELS_DIR}
    assert len(list_models()) == len(list(MODELS_DIR.glob("*.json")))


# ---------------------------------------------------------------- #8: recommend -o -


def test_dash_output_writes_the_yaml_to_stdout_and_the_summary_to_stderr(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "recommend", *TINY, "-o", "-")
    assert code == 0
    assert list(tmp_path.iterdir()) == []  # no file named `-`
    config = yaml.safe_load(out)
    assert config["hardware"]["gpus_per_node"] == 2 and config["model"]["pretrained_model_name_or_path"]
    assert "## " not in out and "layout:" not in out  # the summary is not in the YAML stream
    assert "layout: TP 1" in err
    # the commands name the file the user is told to save to, never `-`
    assert "read it as config.yaml: save it there" in err
    assert "recipe-advisor train config.yaml --nproc-per-node 2" in err
    assert "train -" not in err and "trainer -" not in err


def test_dash_output_pipes_into_diff(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, "recommend", *TINY, "-o", "base.yaml")[0] == 0
    code, out, _ = run_cli(capsys, "recommend", *TINY, "--optimizer.lr", "1e-4", "-o", "-")
    assert code == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(out.encode())))
    code, diff_out, err = run_cli(capsys, "diff", "base.yaml", "-", "--format", "json")
    assert code == 0, err
    changes = json.loads(diff_out)["changes"]
    assert [(c["key"], c["new"]) for c in changes] == [("optimizer.lr", 1e-4)]


def test_dash_output_with_json_format_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "recommend", *TINY, "-o", "-", "--format", "json")
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert "error: -o -: --format json writes its JSON to stdout" in err


# ---------------------------------------------------------------- #9d: models --family


@pytest.mark.parametrize("family", ["llama", "Llama 3", " QWEN ", "no-such-family"])
def test_models_family_filters_as_the_api_does(capsys, client, family):
    code, out, _ = run_cli(capsys, "models", "--family", family, "--format", "json")
    assert code == 0
    ids = [row["id"] for row in json.loads(out)]
    response = client.get("/v1/models", params={"family": family})
    assert response.status_code == 200
    assert ids == [row["id"] for row in response.json()]
    assert len(ids) < len(list_models())
    assert (ids == []) == (family == "no-such-family")


@pytest.mark.parametrize("listing, query", [("models", []), ("hardware", []), ("recipes", ["--kind", "bundled"])])
def test_cli_json_listings_are_the_apis(capsys, client, listing, query):
    """One set of keys for a listing (stop notes s6-s8: the CLI said layers/hidden where the API says
    num_hidden_layers/hidden_size); the text table keeps its short headers."""
    code, out, _ = run_cli(capsys, listing, *query, "--format", "json")
    assert code == 0
    params = {"kind": "bundled"} if query else {}
    assert json.loads(out) == client.get(f"/v1/{listing}", params=params).json()
    code, text, _ = run_cli(capsys, listing, *query)
    assert code == 0 and len(text.splitlines()) == len(json.loads(out)) + 1


def test_models_text_table_shows_the_heads_tp_must_divide(capsys):
    _, text, _ = run_cli(capsys, "models", "--family", "Llama 3")
    header, *rows = text.splitlines()
    assert header.split()[:10] == ["id", "hf_id", "family", "architecture", "layers", "hidden", "heads", "kv_heads",
                                   "experts", "params"]
    llama3_8b = next(r.split() for r in rows if r.startswith("llama3-8b "))
    assert llama3_8b[-6:] == ["32", "4096", "32", "8", "0", "8.03B"]


def test_models_family_text_says_when_nothing_matches(capsys):
    assert run_cli(capsys, "models", "--family", "nope")[:2] == (0, "no models match\n")


# ---------------------------------------------------------------- #9f: validate --gpus is per node


def _findings(capsys, *argv: str) -> tuple[int, list[dict]]:
    code, out, _ = run_cli(capsys, "validate", str(TWO_NODES), "--format", "json", *argv)
    return code, json.loads(out)["files"][0]["findings"]


def test_validate_gpus_alone_keeps_the_files_node_count(capsys):
    """The file runs 2 nodes of 4 gb200: --gpus 4 restates the GPUs per node (README: `--gpus` is GPUs per
    node like hardware.gpus_per_node), so the 8 GPUs are judged, as without the flag."""
    as_written = _findings(capsys)
    code, per_node = _findings(capsys, "--gpus", "4")
    said = [f for f in per_node if f["code"] == "RA-C014"]  # the reading is said (review s8 #6), nothing else
    assert said and "judged on 8 GPUs: --gpus 4 (API: gpus) was read as GPUs per node" in said[0]["message"]
    assert (code, [f for f in per_node if f["code"] != "RA-C014"]) == as_written
    assert not any(f["code"] == "RA-C006" for f in as_written[1])
    # --nodes still overrides the file, and a total that fills whole nodes is still read as the total
    _, one_node = _findings(capsys, "--gpus", "4", "--nodes", "1")
    assert any(f["code"] == "RA-C006" and "runs on 4" in f["message"] for f in one_node)
    _, as_total = _findings(capsys, "--gpus", "16")
    assert any(f["code"] == "RA-C006" and "runs on 16" in f["message"] for f in as_total)


def test_the_api_reads_gpus_per_node_alike(client):
    text = TWO_NODES.read_text()
    plain = client.post("/v1/validate", json={"yaml": text}).json()
    per_node = client.post("/v1/validate", json={"yaml": text, "gpus": 4}).json()
    found = per_node["files"][0]["findings"]
    assert [f for f in found if f["code"] != "RA-C014"] == plain["files"][0]["findings"]
    assert [f["message"] for f in found if f["code"] == "RA-C014"] == [
        "judged on 8 GPUs: --gpus 4 (API: gpus) was read as GPUs per node, on the file's 2 nodes"]

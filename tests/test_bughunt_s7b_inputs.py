"""Bug hunt s7b (notes/bughunt_s7b.md) on inputs: YAML merge keys are no duplicates (#5), a bad config.json
fails validate and names its field (#7), the memory check without a sequence length names only fixes that
close the gap, at a line (#8), HTTP strictness made consistent (#9), one rounding of memory figures (#12)."""

from __future__ import annotations

import json
import re

import pytest

from recipe_index.errors import ModelConfigError
from recipe_index.models import card_from_config
from service.cli import main
from service.request_overrides import request_fields
from service.web_result import gib_text
from service.yamlio import OverrideError, load_yaml

MERGED = """\
dataset: &ds {_target_: trainer.data.MockDataset, num_samples: 4096, seed: 1234, seq_length: 64}
validation_dataset:
  <<: *ds
  num_samples: 64
  seed: 4321
"""


def listed(findings: list[dict]) -> list[tuple[str, str]]:
    """(code, severity) of the findings, without the bundled trainer's missing-section warnings (RA-E005)."""
    return [(f["code"], f["severity"]) for f in findings if f["code"] != "RA-E005"]


# ---------------------------------------------------------------- #5: merge keys, typed keys


def test_keys_that_override_a_merge_are_no_duplicates_wherever_the_merge_stands():
    doc = load_yaml(MERGED + "other:\n  seed: 1\n  <<: *ds\n")
    assert doc.duplicates == []
    assert doc.data["validation_dataset"] == {"_target_": "trainer.data.MockDataset", "num_samples": 64,
                                              "seed": 4321, "seq_length": 64}
    assert doc.data["other"]["seed"] == 1 and doc.data["other"]["num_samples"] == 4096


def test_a_key_written_twice_beside_a_merge_is_still_a_duplicate():
    doc = load_yaml("a: &a {p: 1}\nb: &b {p: 2, q: 3}\nc:\n  <<: [*a, *b]\n  q: 4\n  q: 5\n")
    assert doc.data["c"] == {"p": 1, "q": 5}  # of several merged mappings the first wins
    assert doc.duplicates == [("c.q", 6, 3)]


def test_a_number_key_and_a_text_key_are_two_keys():
    doc = load_yaml('m:\n  1: a\n  "1": b\n')
    assert doc.duplicates == [] and sorted(doc.data["m"].values()) == ["a", "b"]
    doc = load_yaml('m:\n  "1": a\n  1: b\n  1: c\n')
    assert doc.duplicates == [("m.1", 4, 3)] and sorted(doc.data["m"].values()) == ["a", "c"]


def test_diff_and_validate_take_merge_overrides(tmp_path, capsys):
    merged, base = tmp_path / "merge.yaml", tmp_path / "base.yaml"
    merged.write_text(MERGED)
    base.write_text(MERGED.replace("seed: 4321", "seed: 1"))
    assert main(["diff", str(base), str(merged)]) == 0
    out = capsys.readouterr().out
    assert "validation_dataset.seed" in out and "set twice" not in out
    main(["validate", str(merged), "--format", "json"])
    codes = [f["code"] for f in json.loads(capsys.readouterr().out)["files"][0]["findings"]]
    assert "RA-C003" not in codes


def test_diff_still_refuses_a_key_written_twice(tmp_path, capsys):
    dup = tmp_path / "dup.yaml"
    dup.write_text(MERGED + "  seed: 5\n")
    assert main(["diff", str(dup), str(dup)]) == 2
    assert f"{dup}:6:3" in capsys.readouterr().err


# ---------------------------------------------------------------- #7: a bad config.json

TINY = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 2048}


def _validate(tmp_path, capsys, model: str) -> tuple[int, list[dict]]:
    path = tmp_path / "v.yaml"
    path.write_text(f"model: {{pretrained_model_name_or_path: '{model}'}}\ndataset: {{seq_length: 128}}\n"
                    "distributed: {strategy: fsdp2}\nhardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    code = main(["validate", str(path), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["files"][0]["findings"]


@pytest.mark.parametrize("edit,field", [({"num_hidden_layers": -3}, "num_hidden_layers"),
                                        ({"hidden_size": 500}, "hidden_size"),
                                        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings")])
def test_validate_fails_on_a_local_config_json_that_cannot_describe_a_model(tmp_path, capsys, edit, field):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY, **edit}))
    code, findings = _validate(tmp_path, capsys, str(folder))
    assert code == 1 and listed(findings) == [("RA-C009", "error")]
    c009 = next(f for f in findings if f["code"] == "RA-C009")
    assert f"config.json: {field}: " in c009["message"] and c009["line"] == 1


def test_a_model_that_cannot_be_found_offline_stays_a_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, findings = _validate(tmp_path, capsys, "no-such-org/no-such-model")
    assert code == 0 and listed(findings) == [("RA-C009", "warning")]


def test_hidden_size_the_heads_do_not_divide_is_refused_as_the_trainer_does():
    with pytest.raises(ModelConfigError, match=r"hidden_size: 500 is not a multiple of num_attention_heads \(8\)"):
        card_from_config({**TINY, "hidden_size": 500}, "local", source="c.json")
    card = card_from_config({**TINY, "hidden_size": 500, "head_dim": 64}, "local", source="c.json")
    assert card.head_dim == 64  # an explicit head_dim is the trainer's way out too


@pytest.mark.parametrize("command", ["plan", "recommend"])
def test_plan_and_recommend_refuse_undivided_heads(tmp_path, capsys, command):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "hidden_size": 500}))
    code = main([command, "--model", str(tmp_path), "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {tmp_path / 'config.json'}: hidden_size: ") and "head_dim" in err


def test_whole_float_heads_are_accepted_and_a_fraction_names_the_field():
    assert card_from_config({**TINY, "num_attention_heads": 8.0}, "local", source="c.json").num_attention_heads == 8
    with pytest.raises(ModelConfigError, match="num_attention_heads: 8.5 is not a whole number"):
        card_from_config({**TINY, "num_attention_heads": 8.5}, "local", source="c.json")


@pytest.mark.parametrize("field,value", [("tie_word_embeddings", "yes"), ("attention_bias", 1), ("qk_norm", "false")])
def test_a_flag_must_be_a_json_boolean(field, value):
    with pytest.raises(ModelConfigError, match=f'{field}: .* is not a JSON boolean; fix: write "{field}": true'):
        card_from_config({**TINY, field: value}, "local", source="c.json")
    assert getattr(card_from_config({**TINY, field: True}, "local", source="c.json"), field) is True


# ---------------------------------------------------------------- #8: states alone over the GPU


def _m002(tmp_path, capsys, text: str) -> tuple[int, dict]:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code = main(["validate", str(path), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    return code, next(f for f in findings if f["code"] == "RA-M002")


def test_fsdp2_states_name_more_gpus_not_a_tp_that_cannot_close_the_gap(tmp_path, capsys):
    code, finding = _m002(tmp_path, capsys, "hardware: {gpu_type: h100, gpus_per_node: 8}\n"
                          "distributed: {strategy: fsdp2}\nmodel: {pretrained_model_name_or_path: llama3-70b}\n")
    assert code == 1 and "tp_size" not in finding["fix"] and "run on more GPUs" in finding["fix"]
    assert (finding["key"], finding["line"]) == ("model.pretrained_model_name_or_path", 3)


def test_megatron_states_name_a_step_that_closes_the_gap_alone(tmp_path, capsys):
    # llama3-8b without the distributed optimizer on 40 GiB: only sharding weights and gradients too fits.
    _, finding = _m002(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                       "distributed: {strategy: megatron, use_distributed_optimizer: false}\n"
                       "hardware: {gpu_type: a100-40gb, gpus_per_node: 8}\n")
    fix = finding["fix"]
    assert "use_megatron_fsdp" in fix and "use_distributed_optimizer" not in fix and "tp_size" not in fix
    assert finding["line"] == 1


def test_megatron_steps_that_only_help_say_they_are_not_enough_alone(tmp_path, capsys):
    _, finding = _m002(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                       "distributed: {strategy: megatron, tp_size: 2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    fix = finding["fix"]
    assert "raise distributed.pp_size to 2 (not enough alone:" in fix and "run on more GPUs" in fix
    shown = [float(x) for x in re.findall(r"not enough alone: ([\d.]+) GiB", fix)]
    needed = float(re.search(r"needs at least ([\d.]+) GiB", finding["message"]).group(1))
    assert shown and all(80 < value < needed for value in shown)


# ---------------------------------------------------------------- #9: HTTP strictness


@pytest.mark.parametrize("content_type", ["application/octet-stream", "application/x-www-form-urlencoded"])
def test_validate_415_names_the_content_type(client, content_type):
    response = client.post("/v1/validate", content=b"model: {pretrained_model_name_or_path: llama3-8b}\n",
                           headers={"content-type": content_type})
    assert response.status_code == 415 and response.json()["field"] == "content-type"
    assert "Content-Type: application/yaml" in response.json()["detail"]


@pytest.mark.parametrize("value", ["{a: 1}", "{}"])
def test_a_mapping_for_a_single_valued_override_is_refused(client, value):
    response = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                  "overrides": {"precision": value}})
    assert response.status_code == 400 and response.json()["field"] == "overrides"
    assert "--precision: precision takes a single value, not a mapping" in response.json()["detail"]


def test_a_key_under_a_single_value_is_refused_and_sections_still_take_mappings():
    with pytest.raises(OverrideError, match="--precision.a: precision takes a single value"):
        request_fields(["--precision.a", "1"], {})
    assert request_fields(["--dataset", "{seq_length: 4096}"], {})["seq_length"] == 4096


@pytest.mark.parametrize("route", ["/recommend", "/recommend.yaml"])
def test_the_web_form_refuses_a_repeated_parameter(client, route):
    response = client.get(route, params=[("model", "llama3-8b"), ("gpu_type", "h100"), ("gpus", "8"), ("gpus", "16")])
    assert response.status_code == 422 and "given more than once" in response.text
    assert client.get(route, params={"model": "llama3-8b", "gpu_type": "h100", "gpus": "8"}).status_code == 200


# ---------------------------------------------------------------- #12: one rounding


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

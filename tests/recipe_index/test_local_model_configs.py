"""A local config.json that cannot describe a model is refused naming its field, by the index, plan,
recommend and validate (RA-C009); whole floats load as integers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipe_index.errors import ModelConfigError
from recipe_index.models import MODELS_DIR, card_from_config, parse_config_json, resolve_model
from service.cli.app import main
from tests.cli import run_cli
from tests.service.validate.test_memory_fit import validate_findings

SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
               "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}


def listed(findings: list[dict]) -> list[tuple[str, str]]:
    """(code, severity) of the findings, without the bundled trainer's missing-section warnings (RA-E005)."""
    return [(f["code"], f["severity"]) for f in findings if f["code"] != "RA-E005"]


TINY = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 2048}


def _validate_model(tmp_path, capsys, model: str) -> tuple[int, list[dict]]:
    path = tmp_path / "v.yaml"
    path.write_text(f"model: {{pretrained_model_name_or_path: '{model}'}}\ndataset: {{seq_length: 128}}\n"
                    "distributed: {strategy: fsdp2}\nhardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    code = main(["validate", str(path), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["files"][0]["findings"]


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


@pytest.mark.parametrize("edit,field,why", [
    ({"num_hidden_layers": -3}, "num_hidden_layers", "outside 1..10,000"),
    ({"num_hidden_layers": 10**12}, "num_hidden_layers", "outside 1..10,000"),
    ({"hidden_size": 2_000_000}, "hidden_size", "outside 1..1,000,000"),
    ({"hidden_size": "512"}, "hidden_size", "the string '512' is not a whole number"),
    ({"num_attention_heads": True}, "num_attention_heads", "true (a boolean) is not a whole number"),
    ({"num_attention_heads": 8.5}, "num_attention_heads", "8.5 is not a whole number"),
    ({"vocab_size": float("nan")}, "vocab_size", "NaN is not a whole number"),
    ({"num_key_value_heads": 16}, "num_key_value_heads", "16 does not divide num_attention_heads 8"),
    ({"num_key_value_heads": 3}, "num_key_value_heads", "3 does not divide num_attention_heads 8"),
    ({"num_local_experts": 4, "num_experts_per_tok": 8}, "num_experts_per_tok", "more than the 4 experts"),
    ({"num_local_experts": "many"}, "num_experts", "the string 'many' is not a whole number"),
    # an MoE that routes to no expert: plan/recommend divided by the top-k
    ({"num_local_experts": 8, "num_experts_per_tok": 0}, "num_experts_per_tok", "an MoE routes each token to 1.."),
    ({"num_local_experts": 8}, "num_experts_per_tok", "0 (or not given)"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2.5}, "num_experts_per_tok", "2.5 is not a whole number"),
])
def test_bad_sizes_are_refused_naming_the_field(edit, field, why):
    with pytest.raises(ModelConfigError) as err:
        card_from_config({**TINY, **edit}, "local", source="/m/config.json")
    message = str(err.value)
    assert message.startswith(f"/m/config.json: {field}: ") and why in message and "fix:" in message


def test_whole_floats_and_the_plain_config_still_load():
    card = card_from_config({**TINY, "num_hidden_layers": 4.0}, "local", source="c.json")
    assert card.num_hidden_layers == 4 and isinstance(card.num_hidden_layers, int)
    assert card_from_config(TINY, "local", source="c.json").head_dim == 64


@pytest.mark.parametrize("edit,expect", [
    # sizes other sizes are derived from: head_dim = hidden // heads
    ({"hidden_size": 512.0, "num_attention_heads": 8.0},
     {"hidden_size": 512, "num_attention_heads": 8, "head_dim": 64}),
    ({"num_key_value_heads": 4.0, "vocab_size": 32000.0, "max_position_embeddings": 2048.0},
     {"num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}),
    # GPT-2: intermediate_size is 4 * n_embd when n_inner is absent
    ({"model_type": "gpt2", "hidden_size": None, "n_embd": 768.0, "intermediate_size": None,
      "num_attention_heads": 12},
     {"hidden_size": 768, "intermediate_size": 3072, "head_dim": 64}),
    ({"num_experts": 8.0, "num_experts_per_tok": 2.0, "moe_intermediate_size": 256.0,
      "shared_expert_intermediate_size": 512.0},
     {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
      "shared_expert_intermediate_size": 512}),
    ({"n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1.0, "first_k_dense_replace": 1.0,
      "q_lora_rank": 64.0, "kv_lora_rank": 32.0, "qk_rope_head_dim": 16.0, "qk_nope_head_dim": 32.0,
      "v_head_dim": 32.0},
     {"num_shared_experts": 1, "first_k_dense": 1, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
      "qk_nope_head_dim": 32, "v_head_dim": 32}),
    ({"hybrid_override_pattern": "M*M-", "mamba_num_heads": 16.0, "mamba_head_dim": 32.0, "ssm_state_size": 64.0},
     {"mamba_num_heads": 16, "mamba_head_dim": 32, "mamba_state_dim": 64}),
])
def test_every_size_written_as_a_whole_float_loads_as_that_int(edit, expect):
    raw = {k: v for k, v in {**TINY, **edit}.items() if v is not None}
    card = card_from_config(raw, "local", source="c.json")
    for field, value in expect.items():
        got = getattr(card, field)
        assert got == value and type(got) is int, (field, got)


def test_a_local_folder_with_whole_float_sizes_plans(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "hidden_size": 512.0, "num_attention_heads": 8.0}))
    assert main(["plan", "--model", str(tmp_path), "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]) == 0
    assert "valid layouts" in capsys.readouterr().out


def test_the_string_fix_quotes_the_number_it_meant():
    with pytest.raises(ModelConfigError, match='e.g. "hidden_size": 512'):
        card_from_config({**TINY, "hidden_size": "512"}, "local", source="c.json")


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("edit", [{"num_hidden_layers": -3}, {"num_hidden_layers": 10**12}, {"hidden_size": "512"},
                                  {"num_key_value_heads": 16}, {"num_experts_per_tok": 0, "num_local_experts": 8}])
def test_cli_exits_2_with_one_line(tmp_path, capsys, command, edit):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, **edit}))
    code = main([command, "--model", str(tmp_path), "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {tmp_path / 'config.json'}: {next(iter(edit))}: ")
    assert "Traceback" not in err


@pytest.mark.parametrize("edit,said", [({"num_hidden_layers": -3}, "num_hidden_layers: -3 is outside"),
                                       ({"num_local_experts": 8, "num_experts_per_tok": 0}, "num_experts_per_tok: 0")])
def test_validate_names_the_bad_field_instead_of_crashing(tmp_path, capsys, edit, said):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, **edit}))
    code, findings = validate_findings(tmp_path, capsys, f"model: {{pretrained_model_name_or_path: '{tmp_path}'}}\n"
                               "dataset: {seq_length: 128}\ndistributed: {strategy: fsdp2}\n"
                               "hardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    assert code == 1 and listed(findings) == [("RA-C009", "error")]
    assert said in next(f for f in findings if f["code"] == "RA-C009")["message"]


@pytest.mark.parametrize("edit,field", [({"num_hidden_layers": -3}, "num_hidden_layers"),
                                        ({"hidden_size": 500}, "hidden_size"),
                                        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings")])
def test_validate_fails_on_a_local_config_json_that_cannot_describe_a_model(tmp_path, capsys, edit, field):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY, **edit}))
    code, findings = _validate_model(tmp_path, capsys, str(folder))
    assert code == 1 and listed(findings) == [("RA-C009", "error")]
    c009 = next(f for f in findings if f["code"] == "RA-C009")
    assert f"config.json: {field}: " in c009["message"] and c009["line"] == 1


def test_a_model_that_cannot_be_found_offline_stays_a_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, findings = _validate_model(tmp_path, capsys, "no-such-org/no-such-model")
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


def test_a_superscript_size_in_a_config_json_is_refused_naming_the_field(tmp_path):
    from recipe_index.errors import ModelConfigError
    from recipe_index.models import resolve_model

    (tmp_path / "config.json").write_text(json.dumps({**SMALL_LLAMA, "num_hidden_layers": "²"}))
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        resolve_model(str(tmp_path))

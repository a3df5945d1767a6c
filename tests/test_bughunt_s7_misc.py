"""Bug hunt s7 (notes/bughunt_s7.md): diff layers (#11) and inputs (#14f), strict HTTP requests (#13, #14h),
`plan --top` (#14d/e), memory without a sequence length (#8) and bad local config.json values (#7); the fixes
of review s7 (notes/review_s7.md #1-3, #5, #8f-g, #9) extend these sections."""

from __future__ import annotations

import io
import json
import sys

import pytest
import yaml

from recipe_index.errors import ModelConfigError
from recipe_index.models import card_from_config
from service.changes import MISSING, classify, diff, is_parallel_layout_key
from service.cli import main
from trainer.dotted import NotASection, set_dotted


def listed(findings: list[dict]) -> list[tuple[str, str]]:
    """(code, severity) of the findings, without the bundled trainer's missing-section warnings (RA-E005)."""
    return [(f["code"], f["severity"]) for f in findings if f["code"] != "RA-E005"]


# ---------------------------------------------------------------- #11: diff layers


@pytest.mark.parametrize("key,old,new", [
    ("checkpoint.pretrained_checkpoint", "/ckpt/base", "/ckpt/other"),  # the base weights Bridge fine-tunes from
    ("checkpoint.load_optim", True, False),  # a fresh optimizer state
    ("checkpoint.load_rng", True, False),
])
def test_what_a_run_starts_from_is_convergence(key, old, new):
    layer, reason = classify(key, old, new)
    assert layer == "convergence" and reason


def test_checkpoint_io_stays_execution():
    for key, old, new in (("checkpoint.ckpt_format", "torch_dist", "fsdp_dtensor"), ("checkpoint.keep_last", 2, 5),
                          ("checkpoint.async_save", False, True)):
        assert classify(key, old, new)[0] == "execution", key


@pytest.mark.parametrize("key", ["distributed.check_for_nan_in_grad", "rerun_state_machine.check_for_nan_in_loss",
                                 "rerun_state_machine.check_for_spiky_loss"])
def test_turning_a_check_on_is_execution_and_only_turning_it_off_is_a_benchmark(key):
    assert classify(key, False, True)[0] == "execution"
    assert classify(key, "<absent>", True)[0] == "execution"
    assert classify(key, True, False)[0] == "benchmark-only"
    dropped = classify(key, True, MISSING)  # the key removed: left to an unknown default
    assert dropped[0] == "benchmark-only" and "turned off (or left to an unknown default)" in dropped[1]
    assert classify(key, "enabled", MISSING)[0] == "benchmark-only"


def test_a_config_that_drops_its_checks_is_not_the_same_experiment():
    base = {"ddp": {"check_for_nan_in_grad": True}, "rerun_state_machine": {"check_for_nan_in_loss": True}}
    changes = diff(base, {})
    assert [(c.key, c.layer) for c in changes] == [("ddp.check_for_nan_in_grad", "benchmark-only"),
                                                   ("rerun_state_machine.check_for_nan_in_loss", "benchmark-only")]


def test_the_rerun_mode_switched_off_is_a_benchmark_and_on_is_not():
    assert classify("rerun_state_machine.rerun_mode", "validate_results", "disabled")[0] == "benchmark-only"
    assert classify("rerun_state_machine.rerun_mode", "disabled", "validate_results")[0] == "execution"


@pytest.mark.parametrize("key", ["profiling.use_pytorch_profiler", "profiling.use_nsys_profiler",
                                 "profiling.profile_step_start", "profiling.record_shapes",
                                 "logger.timing_log_level"])
def test_profilers_and_timers_are_execution(key):
    assert classify(key, False, True)[0] == "execution"


def test_real_benchmark_shortcuts_stay_benchmark_only():
    assert classify("model.moe_router_force_load_balancing", False, True)[0] == "benchmark-only"
    assert classify("train.exit_interval", None, 50)[0] == "benchmark-only"
    assert classify("dataset.preset", "squad", "mock")[0] == "benchmark-only"


@pytest.mark.parametrize("key", [
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size", "model.sequence_parallel", "model.pipeline_model_parallel_layout",
    "model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage",
    "model.account_for_loss_in_pipeline_split", "model.account_for_embedding_in_pipeline_split",
])
def test_bridge_layout_spellings_under_model_are_execution(key):
    assert is_parallel_layout_key(key)
    assert classify(key, 1, 2)[0] == "execution"


def test_model_semantics_stay_convergence():
    for key in ("model.seq_length", "model.num_layers", "model.hidden_dropout", "model.pretrained_model_name_or_path"):
        assert not is_parallel_layout_key(key), key
        assert classify(key, 1, 2)[0] == "convergence", key


def test_bughunt_diff_table(tmp_path, capsys):
    base = {"checkpoint": {"pretrained_checkpoint": "/base", "load_optim": True},
            "distributed": {"check_for_nan_in_grad": False}, "profiling": {"use_pytorch_profiler": False},
            "model": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_layout": None,
                      "num_layers_in_first_pipeline_stage": None, "account_for_loss_in_pipeline_split": False}}
    new = {"checkpoint": {"pretrained_checkpoint": "/other", "load_optim": False},
           "distributed": {"check_for_nan_in_grad": True}, "profiling": {"use_pytorch_profiler": True},
           "model": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et|tL",
                     "num_layers_in_first_pipeline_stage": 3, "account_for_loss_in_pipeline_split": True}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(new))
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--format", "json"]) == 0
    got = {c["key"]: c["layer"] for c in json.loads(capsys.readouterr().out)["changes"]}
    assert got == {
        "checkpoint.pretrained_checkpoint": "convergence", "checkpoint.load_optim": "convergence",
        "distributed.check_for_nan_in_grad": "execution", "profiling.use_pytorch_profiler": "execution",
        "model.tensor_model_parallel_size": "execution", "model.pipeline_model_parallel_layout": "execution",
        "model.num_layers_in_first_pipeline_stage": "execution", "model.account_for_loss_in_pipeline_split": "execution",
    }


# ---------------------------------------------------------------- #14f: diff inputs


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))


def test_diff_reads_either_side_from_stdin(tmp_path, monkeypatch, capsys):
    new = tmp_path / "new.yaml"
    new.write_text("distributed: {tp_size: 2}\n")
    _stdin(monkeypatch, "distributed: {tp_size: 1}\n")
    assert main(["diff", "-", str(new), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == [
        {"key": "distributed.tp_size", "old": 1, "new": 2, "layer": "execution"}]
    _stdin(monkeypatch, "distributed: {tp_size: 4}\n")
    assert main(["diff", str(new), "-", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"][0]["new"] == 4


def test_diff_refuses_stdin_for_both_sides_and_names_stdin_in_errors(monkeypatch, capsys, tmp_path):
    assert main(["diff", "-", "-"]) == 2
    assert "both -" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text("precision: bf16\n")
    _stdin(monkeypatch, "a: [1, 2\n")
    assert main(["diff", "-", str(good)]) == 2
    assert "<stdin>:" in capsys.readouterr().err


def test_nan_equals_nan(tmp_path, capsys):
    path = tmp_path / "n.yaml"
    path.write_text("a: .nan\nb: [.nan, 1]\noptimizer: {lr: .nan}\n")
    assert main(["diff", str(path), str(path)]) == 0
    assert capsys.readouterr().out.startswith("0 change(s)")
    assert [c.key for c in diff({"a": float("nan")}, {"a": 1.0})] == ["a"]


def test_a_duplicate_key_is_refused_at_its_line(tmp_path, capsys):
    dup, other = tmp_path / "dup.yaml", tmp_path / "other.yaml"
    dup.write_text("a: 1\nb: 0\na: 2\n")
    other.write_text("a: 2\nb: 0\n")
    assert main(["diff", str(dup), str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{dup}:3:1" in err and "RA-C003" in err and "`a` is set twice" in err and "delete one" in err
    assert main(["diff", str(other), str(dup)]) == 2  # either side


def test_api_diff_refuses_duplicates_and_takes_nan(client):
    dup = client.post("/v1/diff", json={"base": "a: 1\na: 2\n", "new": "a: 2\n"})
    assert dup.status_code == 400 and dup.json()["field"] == "base" and dup.json()["line"] == 2
    assert "set twice" in dup.json()["detail"]
    same = client.post("/v1/diff", json={"base": "a: .nan\n", "new": "a: .nan\n"})
    assert same.status_code == 200 and same.json()["changes"] == []


# ---------------------------------------------------------------- #13: strict query parameters and JSON keys

YAML_BODY = {"content": "hardware: {gpu_type: h100, gpus_per_node: 8}\n", "headers": {"content-type": "text/plain"}}


@pytest.mark.parametrize("query,name", [("gpu=16", "gpu"), ("gpu_typ=a100-40gb", "gpu_typ")])
def test_validate_refuses_a_misspelt_query_parameter(client, query, name):
    response = client.post(f"/v1/validate?{query}", **YAML_BODY)
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["query", name] and "gpus" in detail["msg"] and "gpu_type" in detail["msg"]


def test_validate_refuses_a_repeated_query_parameter(client):
    response = client.post("/v1/validate?gpus=16&gpus=8", **YAML_BODY)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "gpus"]
    assert client.post("/v1/validate?gpus=8", **YAML_BODY).status_code == 200


def test_models_filter_by_family_as_recipes_do_and_refuse_unknown_filters(client):
    llama = client.get("/v1/models?family=llama")
    assert llama.status_code == 200
    ids = {m["id"] for m in llama.json()}
    assert "llama3-8b" in ids and not any(i.startswith("qwen") for i in ids)
    assert {m["id"] for m in client.get("/v1/models?family=Llama%203").json()} <= ids  # the card's own family
    assert len(client.get("/v1/models").json()) > len(ids)
    assert client.get("/v1/models?family=nonesuch").json() == []
    misspelt = client.get("/v1/models?famly=llama")
    assert misspelt.status_code == 422 and misspelt.json()["detail"][0]["loc"] == ["query", "famly"]
    assert client.get("/v1/recipes?familly=llama").status_code == 422  # the same mechanism


def test_healthz_takes_a_cache_buster_while_the_v1_routes_stay_strict(client):
    for query in ("x=1", "_=1700000000&x=1&x=2"):
        health = client.get(f"/healthz?{query}")
        assert health.status_code == 200 and health.json()["status"] == "ok", query
    assert client.get("/v1/hardware?x=1").status_code == 422


@pytest.mark.parametrize("path,body,field", [
    ("/v1/plan", '{"model": "llama3-8b", "gpus": 8, "gpus": 16, "gpu_type": "h100"}', "gpus"),
    ("/v1/recommend", '{"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", '
                      '"overrides": {"optimizer.lr": 1, "optimizer.lr": 2}}', "overrides.optimizer.lr"),
    ("/v1/diff", '{"base": "a: 1", "new": "a: 2", "new": "a: 3"}', "new"),
    ("/v1/validate", '{"yaml": "a: 1", "gpus": 8, "gpus": 16}', "gpus"),
])
def test_a_json_key_written_twice_is_400_naming_it(client, path, body, field):
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["field"] == field and f"`{field}` twice" in response.json()["detail"]


def test_distinct_keys_and_repeats_in_different_objects_are_fine(client):
    body = '{"base": "a: 1", "new": "a: 2"}'
    assert client.post("/v1/diff", content=body, headers={"content-type": "application/json"}).status_code == 200


# ---------------------------------------------------------------- #14h: wrong content type


@pytest.mark.parametrize("headers", [{"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"},
                                     {}])
def test_a_json_endpoint_says_to_send_application_json(client, headers):
    body = '{"model": "llama3-8b", "gpus": 8, "gpu_type": "h100"}'
    response = client.post("/v1/plan", content=body, headers=headers)
    assert response.status_code == 415
    assert "application/json" in response.json()["detail"] and response.json()["field"] == "content-type"
    assert "valid dictionary" not in response.text


def test_json_with_a_charset_is_still_json(client):
    response = client.post("/v1/diff", content='{"base": "a: 1", "new": "a: 1"}',
                           headers={"content-type": "application/json; charset=utf-8"})
    assert response.status_code == 200


# ---------------------------------------------------------------- #14d/e: plan --top


@pytest.mark.parametrize("top", ["-1", "-5", "x"])
def test_plan_refuses_a_negative_or_non_numeric_top(top, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--top", top])
    assert exit_.value.code == 2 and "--top" in capsys.readouterr().err


def test_plan_footer_speaks_of_the_rows_marked_not_fitting(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--top", "0"]) == 0
    out = capsys.readouterr().out
    fitting, total = (int(n) for n in out.splitlines()[1].split(" valid layouts")[0].split(" of "))
    footer = next(line for line in out.splitlines() if "marked" in line)
    assert 0 < fitting < total  # some rows fit, so the footer cannot be about the request
    assert footer.startswith(f"{total - fitting} of the {total} rows shown are marked \"does not fit\"; row ")
    assert "needs" in footer
    assert not any(line.startswith("does not fit:") for line in out.splitlines())


@pytest.mark.parametrize("top", [0, -1])
def test_the_api_top_has_no_all_and_refuses_zero_as_the_docs_say(client, top):
    # The CLI reads --top 0 as "all" (test_plan_footer_... above); a bounded API response has no "all".
    body = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "top": top}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "top"]


# ---------------------------------------------------------------- #8: memory without dataset.seq_length


def _validate(tmp_path, capsys, text: str) -> tuple[int, list[dict]]:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code = main(["validate", str(path), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["files"][0]["findings"]


def test_states_alone_over_the_gpu_are_an_error_without_a_sequence_length(tmp_path, capsys):
    code, findings = _validate(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 1 and len(m002) == 1 and m002[0]["severity"] == "error"
    assert "at least" in m002[0]["message"] and "before any per-token activations" in m002[0]["message"]
    assert "activation" not in m002[0]["fix"]  # activation savers cannot shrink the state


def test_runtime_and_fixed_activations_count_toward_the_lower_bound(tmp_path, capsys):
    # llama3-8b FSDP2 on 2 CPU "GPUs" (64 GiB): weights + grads + optimizer are 63.4 GiB, which fits, but
    # the zero-token estimate adds the runtime and FSDP2's unsharded blocks: 69.8 GiB, which cannot run.
    code, findings = _validate(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 1 and [f["severity"] for f in m002] == ["error"]
    message = m002[0]["message"]
    assert "needs at least 69.8 GiB per GPU before any per-token activations" in message
    assert "other 4.4" in message and "more than the 64 GiB" in message


def test_a_lower_bound_near_capacity_is_a_warning_without_a_sequence_length(tmp_path, capsys):
    code, findings = _validate(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                               "distributed: {strategy: fsdp2}\n"
                               "hardware: {gpu_type: a100-40gb, gpus_per_node: 4}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 0 and [f["severity"] for f in m002] == ["warning"]
    assert "at least" in m002[0]["message"] and "of the 40 GiB" in m002[0]["message"]


def test_megatron_states_over_the_gpu_are_a_warning_as_with_a_sequence_length(tmp_path, capsys):
    code, findings = _validate(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                               "distributed: {strategy: megatron, tp_size: 2}\n"
                               "hardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 0 and [f["severity"] for f in m002] == ["warning"] and "memory savers" in m002[0]["message"]


def test_a_state_that_fits_says_activations_were_not_checked(tmp_path, capsys):
    code, findings = _validate(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-8b}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 0 and len(m002) == 1 and m002[0]["severity"] == "info"
    assert m002[0]["key"] == "dataset.seq_length" and "not checked" in m002[0]["message"]
    assert "set dataset.seq_length" in m002[0]["fix"]


def test_with_a_sequence_length_the_full_estimate_is_judged(tmp_path, capsys):
    code, findings = _validate(tmp_path, capsys, "model: {pretrained_model_name_or_path: llama3-70b}\n"
                               "dataset: {seq_length: 2048}\n"
                               "distributed: {strategy: fsdp2}\nhardware: {gpu_type: h100, gpus_per_node: 8}\n")
    m002 = [f for f in findings if f["code"] == "RA-M002"]
    assert code == 1 and "activations" in m002[0]["message"] and "not checked" not in m002[0]["message"]


# ---------------------------------------------------------------- #7: bad local config.json values

TINY = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 2048}


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
    code, findings = _validate(tmp_path, capsys, f"model: {{pretrained_model_name_or_path: '{tmp_path}'}}\n"
                               "dataset: {seq_length: 128}\ndistributed: {strategy: fsdp2}\n"
                               "hardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    assert code == 1 and listed(findings) == [("RA-C009", "error")]  # s7b #7a
    assert said in next(f for f in findings if f["code"] == "RA-C009")["message"]


# ---------------------------------------------------------------- review s7 #9: messages


@pytest.mark.parametrize("value,said", [(4, "is an int,"), (0.5, "is a float,"), ("fp32", "is a str,"),
                                        ([1], "is a list,")])
def test_a_path_through_a_scalar_names_its_type_with_the_right_article(value, said):
    with pytest.raises(NotASection) as info:
        set_dotted({"dataset": {"seq_length": value}}, "dataset.seq_length.x", 1)
    assert f"dataset.seq_length.x: dataset.seq_length {said} not a section" == str(info.value)

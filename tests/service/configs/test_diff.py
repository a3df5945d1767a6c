"""`diff`: every changed key with its layer (convergence / execution / benchmark-only)."""

from __future__ import annotations

import json

import pytest

from service.cli.app import main
from service.configs.changes import classify, diff, flatten, verdict
from tests.paths import REPO

BASE = {
    "model": {"pretrained_model_name_or_path": "meta-llama/Meta-Llama-3-8B"},
    "step_scheduler": {"global_batch_size": 512, "local_batch_size": 1, "max_steps": 1000},
    "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": 1, "activation_checkpointing": "none"},
    "dataset": {"preset": "squad", "seq_length": 4096, "packed_sequence": True},
    "optimizer": {"_target_": "torch.optim.AdamW", "lr": 3e-4},
    "precision": "bf16",
    "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 1},
}


def changed(**edits) -> dict:
    new = json.loads(json.dumps(BASE))
    for dotted, value in edits.items():
        node = new
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return new


def layers_between(base: dict, new: dict) -> dict:
    return {c.key: c.layer for c in diff(base, new)}


def layers(new: dict) -> dict:
    return layers_between(BASE, new)


def test_layout_and_hardware_are_execution():
    got = layers(changed(distributed__tp_size=4, distributed__pp_size=2, distributed__activation_checkpointing="full",
                         hardware__num_nodes=4))
    assert set(got.values()) == {"execution"} and len(got) == 4


def test_micro_batch_is_execution_only_while_the_global_batch_is_unchanged():
    assert layers(changed(step_scheduler__local_batch_size=4)) == {"step_scheduler.local_batch_size": "execution"}
    both = layers(changed(step_scheduler__local_batch_size=4, step_scheduler__global_batch_size=1024))
    assert both == {"step_scheduler.local_batch_size": "convergence", "step_scheduler.global_batch_size": "convergence"}


@pytest.mark.parametrize("key,value", [
    ("dataset__packed_sequence", False),
    ("precision", "fp8"),
    ("distributed__moe_token_drop_policy", "probs"),
    ("distributed__moe_expert_capacity_factor", 1.0),
    ("distributed__moe_router_topk_scaling_factor", 2.5),
    ("distributed__moe_aux_loss_coeff", 0.01),
    ("dataset__seq_length", 8192),
    ("optimizer__lr", 1e-4),
])
def test_never_execution_only(key, value):
    got = layers(changed(**{key: value}))
    assert got == {key.replace("__", "."): "convergence"}


@pytest.mark.parametrize("key,value", [
    ("dataset__preset", "mock"),
    ("distributed__moe_router_force_load_balancing", True),
    ("rerun_state_machine__check_for_nan_in_loss", False),
])
def test_benchmark_shortcuts(key, value):
    assert layers(changed(**{key: value})) == {key.replace("__", "."): "benchmark-only"}


def test_moe_transport_is_execution():
    assert classify("distributed.moe_token_dispatcher_type", "alltoall", "flex")[0] == "execution"
    assert classify("model.moe_flex_dispatcher_backend", "deepep", "hybridep")[0] == "execution"
    assert classify("compile.enabled", False, True)[0] == "execution"


def test_trainer_fast_paths_are_execution():
    edits = {"model__kernels": "liger", "model__attn_implementation": "sdpa", "loss_fn__chunked": "auto",
             "loss_fn__chunk_size": 512, "optimizer__fused": True, "optimizer__foreach": False,
             "compile__enabled": True}
    got = layers(changed(**edits))
    assert got == {key.replace("__", "."): "execution" for key in edits}
    assert "same experiment" in verdict(diff(BASE, changed(**edits)))
    # The loss itself and the optimizer's hyper-parameters stay convergence.
    assert classify("loss_fn._target_", "trainer.loss.causal_lm_loss", "my.loss")[0] == "convergence"
    assert classify("optimizer.lr", 3e-4, 1e-4)[0] == "convergence"


def test_added_and_removed_keys_are_listed():
    new = changed()
    del new["dataset"]["packed_sequence"]
    new["peft"] = {"method": "lora", "rank": 8}
    got = {c.key: (c.old, c.new, c.layer) for c in diff(BASE, new)}
    assert got["dataset.packed_sequence"] == (True, "<absent>", "convergence")
    assert got["peft.rank"] == ("<absent>", 8, "convergence")


def test_flatten_and_verdict():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}
    assert "new convergence experiment" in verdict(diff(BASE, changed(optimizer__lr=1e-5)))
    assert "same experiment" in verdict(diff(BASE, changed(distributed__tp_size=2)))
    assert verdict([]) is None


def test_cli_json_and_exit_codes(tmp_path, capsys):
    import yaml

    base, new = tmp_path / "base.yaml", tmp_path / "new.yaml"
    base.write_text(yaml.safe_dump(BASE))
    new.write_text(yaml.safe_dump(changed(distributed__tp_size=2, optimizer__lr=1e-4)))
    assert main(["diff", str(base), str(new), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changes"] == [
        {"key": "distributed.tp_size", "old": 1, "new": 2, "layer": "execution"},
        {"key": "optimizer.lr", "old": 3e-4, "new": 1e-4, "layer": "convergence"},
    ]
    assert main(["diff", str(base), str(new)]) == 0
    assert "new convergence experiment" in capsys.readouterr().out
    assert main(["diff", str(base), str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    assert main(["diff", str(bad), str(new)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_diff_refuses_a_named_pipe_without_blocking(tmp_path):
    import os
    import subprocess
    import sys

    fifo, good = tmp_path / "pipe.yaml", tmp_path / "good.yaml"
    os.mkfifo(fifo)
    good.write_text("precision: bf16\n")
    code = "import sys; from service.cli.app import main; sys.exit(main(['diff', sys.argv[1], sys.argv[2]]))"
    done = subprocess.run([sys.executable, "-c", code, str(fifo), str(good)], capture_output=True, text=True,
                          timeout=60, cwd=str(REPO))
    assert done.returncode == 2 and "not a regular file" in done.stderr


# ---------------------------------------------------------------- schema defaults


def test_a_key_left_at_its_schema_default_is_no_change():
    # 32 and bf16 are RecipeConfig's defaults, so only the micro batch moved, and
    # with the global batch unchanged that is execution.
    base = {"step_scheduler": {"local_batch_size": 2}, "distributed": {"tp_size": 2}}
    new = {"step_scheduler": {"global_batch_size": 32, "local_batch_size": 1}, "distributed": {"tp_size": 2},
           "precision": "bf16"}
    assert layers_between(base, new) == {"step_scheduler.local_batch_size": "execution"}
    assert layers_between({}, {"distributed": {"grad_reduce_dtype": "fp32"}}) == {}
    # A non-default value against an absent key is still a change, and moves the global batch.
    moved = layers_between(base, {**new, "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1}})
    assert moved == {"step_scheduler.global_batch_size": "convergence",
                     "step_scheduler.local_batch_size": "convergence"}


def test_spellings_of_one_dtype_are_no_change():
    # torch.bfloat16, bfloat16 and bf16 are one model.dtype to the trainer (trainer.contract.model_settings.DTYPES).
    assert diff({"model": {"dtype": "bfloat16"}}, {"model": {"dtype": "torch.bfloat16"}}) == []
    assert diff({"model": {"dtype": "bf16"}}, {"model": {"dtype": "bfloat16"}}) == []
    assert layers_between({"model": {"dtype": "bf16"}}, {"model": {"dtype": "torch.float32"}}) == {
        "model.dtype": "convergence"}


def test_empty_or_null_sections_equal_absent_ones():
    assert diff({"peft": None, "step_scheduler": {}}, {}) == []
    assert diff({}, {"step_scheduler": None, "validation_dataset": None}) == []
    # An optional section that is present switches something on (LoRA with its defaults) ...
    assert layers_between({}, {"peft": {}}) == {"peft": "convergence"}
    # ... and inside it, keys take the section's defaults (rank 8), so only alpha changed here.
    assert layers_between({"peft": {}}, {"peft": {"rank": 8, "alpha": 32.0}}) == {"peft.alpha": "convergence"}


def test_target_kwargs_have_no_defaults():
    # A `_target_` section's extra keys are the callable's kwargs: the schema cannot know their defaults.
    got = diff({"dataset": {"seq_length": 4096}}, {"dataset": {"seq_length": 4096, "packed_sequence": False}})
    assert [(c.key, c.old, c.new) for c in got] == [("dataset.packed_sequence", "<absent>", False)]


# ---------------------------------------------------------------- metadata


@pytest.mark.parametrize("key,old,new", [
    ("metadata.precision_recipe", "fp8cs", "fp8mx"),
    ("metadata.megatron_recipe", "gpt_oss_20b_sft_fp8cs_config", "gpt_oss_20b_sft_fp8mx_config"),
])
def test_the_precision_and_megatron_recipe_are_convergence(key, old, new):
    assert classify(key, old, new)[0] == "convergence"


def test_other_metadata_stays_execution():
    assert classify("metadata.name", "a", "b")[0] == "execution"
    assert classify("metadata.description", "a", "b")[0] == "execution"


# ---------------------------------------------------------------- classification nits


@pytest.mark.parametrize("key", ["model.masked_softmax_fusion", "model.moe_grouped_gemm",
                                 "model.bias_dropout_fusion", "model.moe_router_fusion"])
def test_fusions_and_grouped_gemm_are_execution(key):
    assert classify(key, True, False)[0] == "execution"


def test_mock_to_real_data_is_a_data_change():
    assert classify("dataset.preset", "mock", "squad")[0] == "convergence"
    assert classify("dataset.preset", "squad", "mock")[0] == "benchmark-only"


def test_the_diff_cli_sorts_kernels_batch_and_data_into_their_layers(tmp_path, capsys):
    """Fused kernels and the micro batch are execution, real data after mock data is convergence."""
    import yaml

    base = {"model": {"moe_grouped_gemm": True, "masked_softmax_fusion": True},
            "step_scheduler": {"local_batch_size": 2}, "dataset": {"preset": "mock"}}
    new = {"model": {"moe_grouped_gemm": False, "masked_softmax_fusion": False},
           "step_scheduler": {"global_batch_size": 32, "local_batch_size": 4}, "dataset": {"preset": "squad"},
           "distributed": {"grad_reduce_dtype": "fp32"}, "precision": "bf16"}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(new))
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--format", "json"]) == 0
    got = {c["key"]: c["layer"] for c in json.loads(capsys.readouterr().out)["changes"]}
    assert got == {"model.moe_grouped_gemm": "execution", "model.masked_softmax_fusion": "execution",
                   "step_scheduler.local_batch_size": "execution", "dataset.preset": "convergence"}

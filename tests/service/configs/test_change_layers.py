"""Which layer a changed key is in: convergence (a new experiment), execution (how it runs) or benchmark-only."""

from __future__ import annotations

import json

import pytest
import yaml

from service.cli.app import main
from service.configs.changes import MISSING, classify, diff, is_parallel_layout_key


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


def test_the_diff_cli_puts_each_key_in_its_layer(tmp_path, capsys):
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
        "model.num_layers_in_first_pipeline_stage": "execution",
        "model.account_for_loss_in_pipeline_split": "execution",
    }


def test_overlap_merge_and_logging_are_execution_but_the_reduce_dtype_is_not():
    assert classify("distributed.overlap_grad_reduce", False, True)[0] == "execution"
    assert classify("peft.merge_on_save", False, True)[0] == "execution"
    assert classify("logger.log_interval", 1, 10)[0] == "execution"
    assert classify("train.manual_gc", False, True)[0] == "execution"
    assert classify("distributed.grad_reduce_dtype", "fp32", "bf16")[0] == "convergence"
    assert classify("ddp.grad_reduce_in_fp32", True, False)[0] == "convergence"
    assert [c.layer for c in diff({"peft": {"rank": 8}}, {"peft": {"rank": 8, "merge_on_save": True}})] == ["execution"]


def test_bridges_micro_batch_spelling_is_execution_while_the_global_batch_stays():
    from service.configs.changes import diff

    one = {"train": {"micro_batch_size": 1, "global_batch_size": 512}}
    four = {"train": {"micro_batch_size": 4, "global_batch_size": 512}}
    bigger = {"train": {"micro_batch_size": 4, "global_batch_size": 1024}}
    assert [(c.key, c.layer) for c in diff(one, four)] == [("train.micro_batch_size", "execution")]
    assert ("train.micro_batch_size", "convergence") in [(c.key, c.layer) for c in diff(one, bigger)]


@pytest.mark.parametrize("key", ["distributed.check_for_nan_in_grad", "ddp.check_for_nan_in_grad",
                                 "ddp.check_for_large_grads", "rerun_state_machine.check_for_spiky_loss"])
def test_checks_that_default_to_off(key):
    section, leaf = key.split(".")
    on, off = {section: {leaf: True}}, {section: {leaf: False}}
    assert [(c.layer) for c in diff(on, {})] == ["benchmark-only"]  # removed: Megatron's default is off
    assert diff({}, off) == [] and diff(off, {}) == []  # the default written out, or dropped: no change
    assert classify(key, MISSING, False)[0] == "execution"  # never a benchmark shortcut
    assert classify(key, MISSING, True)[0] == "execution"


def test_bridge_weight_hash_check_follows_the_check_rules():
    key = "train.check_weight_hash_across_dp_replicas_interval"
    assert classify(key, MISSING, 100)[0] == "execution"
    assert classify(key, 100, MISSING)[0] == "benchmark-only"
    assert classify(key, 100, None)[0] == "benchmark-only"
    assert diff({}, {"train": {"check_weight_hash_across_dp_replicas_interval": None}}) == []


def test_a_check_with_an_unknown_default_dropped_stays_benchmark_only():
    assert classify("rerun_state_machine.check_for_nan_in_loss", True, MISSING)[0] == "benchmark-only"


@pytest.mark.parametrize("key,old,new", [("checkpoint.load", MISSING, "/ckpt/run1"),
                                         ("checkpoint.ckpt_step", MISSING, 2000),
                                         ("checkpoint.load_main_params_from_ckpt", False, True)])
def test_bridge_resume_source_is_the_starting_point(key, old, new):
    layer, reason = classify(key, old, new)
    assert layer == "convergence" and "starting point" in reason
    assert classify("restore_from.path", MISSING, "/x")[0] == layer


def test_checkpoint_io_is_still_execution():
    assert classify("checkpoint.save_interval", 100, 200)[0] == "execution"
    assert classify("checkpoint.async_save", False, True)[0] == "execution"

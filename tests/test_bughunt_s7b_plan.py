"""Bug hunt s7b #1, #3, #10: offline packing keeps micro batch 1 on Megatron (planner, recommend and
validate's RA-B002), Bridge keys the index does not record are convergence changes on Megatron configs,
and diff's edges for correctness checks and Bridge's resume source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recipe_index import list_recipes
from service.bridge_keys import BRIDGE_RECIPE_VALUE, UNRECORDED
from service.changes import MISSING, classify, diff, verdict
from service.cli import main
from service.planner import make_request, plan
from service.search_space import micro_batch_sizes
from service.recommend import packs_offline, recommend
from service.validate import validate_text

README = Path(__file__).resolve().parents[1] / "README.md"

# ---------------------------------------------------------------- #1: packing and micro batch


def test_a_packed_megatron_request_plans_only_micro_batch_1():
    packed = plan(make_request("llama3-8b", 8, "h100", goal="sft", packed_sequence=True))
    loose = plan(make_request("llama3-8b", 8, "h100", goal="sft"))
    assert packed.best is not None and {row.micro_batch_size for row in packed.layouts} == {1}
    assert max(row.micro_batch_size for row in loose.layouts) > 1  # the restriction is what removes them


def test_the_bundled_engine_and_pretraining_keep_every_micro_batch():
    bundled = make_request("llama3-8b", 8, "h100", goal="sft", engine="bundled", packed_sequence=True)
    assert micro_batch_sizes(bundled, 1) != [1]  # the bundled trainer reads packed_sequence as a preset hint only
    assert micro_batch_sizes(make_request("llama3-8b", 8, "h100"), 1)[1:]


def test_recommend_sft_on_a_packing_recipe_picks_micro_batch_1_and_a_runnable_bridge_command():
    rec = recommend("qwen3-8b", 8, "h100", goal="sft")
    assert rec.config["dataset"]["packed_sequence"] is True
    assert rec.best.micro_batch_size == 1 and rec.config["step_scheduler"]["local_batch_size"] == 1
    assert rec.config["step_scheduler"]["global_batch_size"] == rec.plan.request.global_batch_size
    assert "RA-B002" not in {f.code for f in rec.findings}
    bridge = rec.commands.get("megatron_bridge") or ""
    assert "train.micro_batch_size=2" not in bridge and "train.micro_batch_size=4" not in bridge


def test_packing_is_read_from_the_recipe_with_the_overrides_applied():
    entry = next(e for e in list_recipes(kind="library") if e.name.startswith("llama3_8b_sft"))
    assert packs_offline(entry, [])
    assert not packs_offline(entry, ["--dataset.packed_sequence", "false"])
    assert not packs_offline(entry, ["--dataset", "{preset: squad}"])  # a whole section without packing
    pretrain = next(e for e in list_recipes(kind="library") if e.name.startswith("llama3_8b_pretrain"))
    assert not packs_offline(pretrain, []) and packs_offline(pretrain, ["--dataset.packed_sequence", "true"])


def test_recommend_follows_a_packing_override():
    rec = recommend("llama3-8b", 8, "h100", goal="pretrain", global_batch_size=64,
                    overrides=["--dataset.packed_sequence", "true"])
    assert rec.plan.request.packed_sequence and rec.best.micro_batch_size == 1


PACKED = """\
model:
  pretrained_model_name_or_path: llama3-8b
step_scheduler:
  global_batch_size: 128
  local_batch_size: {mbs}
distributed:
  strategy: {strategy}
dataset:
  preset: squad
  seq_length: 2048
  packed_sequence: {packed}
hardware:
  gpu_type: h100
  gpus_per_node: 8
"""


def test_validate_refuses_packing_with_a_micro_batch_above_1_on_megatron():
    report = validate_text(PACKED.format(mbs=4, strategy="megatron", packed="true"), "sft.yaml")
    found = [f for f in report.findings if f.code == "RA-B002"]
    assert len(found) == 1 and found[0].severity == "error"
    assert found[0].key == "step_scheduler.local_batch_size" and found[0].line == 5
    assert "local_batch_size: 1" in found[0].fix and "global_batch_size 128" in found[0].fix


@pytest.mark.parametrize("mbs,strategy,packed", [(1, "megatron", "true"), (4, "megatron", "false"),
                                                 (4, "fsdp2", "true")])
def test_packing_rule_stays_quiet_where_bridge_runs_it(mbs, strategy, packed):
    report = validate_text(PACKED.format(mbs=mbs, strategy=strategy, packed=packed), "sft.yaml")
    assert "RA-B002" not in {f.code for f in report.findings}


def test_the_rule_is_in_the_readme_table():
    assert "| RA-B002 | error |" in README.read_text(encoding="utf-8")


# ---------------------------------------------------------------- #3: keys the index does not record

MEGATRON = {"distributed": {"strategy": "megatron"}, "optimizer": {"lr": 3e-4}}


@pytest.mark.parametrize("key,value", [("lr_scheduler.warmup_steps", 0), ("lr_scheduler.min_lr", 0.0),
                                       ("rng.seed", 1234), ("optimizer.weight_decay", 0.1),
                                       ("optimizer.betas", [0.9, 0.95]), ("lr_scheduler.warmup_steps", 2000)])
def test_an_unrecorded_key_written_on_megatron_is_a_convergence_change_from_bridges_value(key, value):
    section, leaf = key.split(".")
    new = yaml.safe_load(yaml.safe_dump(MEGATRON))
    new.setdefault(section, {})[leaf] = value
    changes = diff(MEGATRON, new)
    assert [(c.key, c.old, c.new, c.layer) for c in changes] == [(key, BRIDGE_RECIPE_VALUE, value, "convergence")]
    assert "distributed.strategy: megatron" in changes[0].reason
    assert verdict(changes).startswith("new convergence experiment")
    back = diff(new, MEGATRON)  # the other way round: the dropped key runs Bridge's value
    assert [(c.old, c.new, c.layer) for c in back] == [(value, BRIDGE_RECIPE_VALUE, "convergence")]


def test_unrecorded_keys_outside_megatron_compare_with_the_schema_default():
    base = {"distributed": {"strategy": "fsdp2"}}
    assert diff(base, {**base, "rng": {"seed": 1234}}) == []  # our trainer's own default
    assert diff(MEGATRON, {**MEGATRON, "rng": {"seed": 1234}}) != []
    # Written on both sides: compared as values, as for every key.
    both = {**MEGATRON, "rng": {"seed": 7}}
    assert diff(both, both) == []


def test_a_strategy_of_megatron_on_either_side_is_enough():
    fsdp = {"distributed": {"strategy": "fsdp2"}}
    got = {c.key: c.layer for c in diff(fsdp, {**MEGATRON, "lr_scheduler": {"warmup_steps": 0}})}
    assert got["lr_scheduler.warmup_steps"] == "convergence"


def test_the_key_list_lives_in_a_module_that_imports_nothing_of_the_service():
    code = ("import sys, service.bridge_keys, service.bridge_command as b; "
            "assert b.UNRECORDED is service.bridge_keys.UNRECORDED")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
    source = (Path(__file__).resolve().parents[1] / "service" / "bridge_keys.py").read_text(encoding="utf-8")
    assert "import service" not in source and "from service" not in source
    assert {"lr_scheduler.warmup_steps", "lr_scheduler.min_lr", "rng.seed"} <= UNRECORDED


def test_recommend_lists_a_bridge_warmup_override_and_counts_it():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--lr_scheduler.warmup_steps", "0"])
    change = next(c for c in rec.changes if c.key == "lr_scheduler.warmup_steps")
    assert (change.old, change.new, change.layer) == (BRIDGE_RECIPE_VALUE, 0, "convergence")
    assert verdict(rec.changes).startswith("new convergence experiment")
    assert "scheduler.lr_warmup_iters=0" in rec.commands["megatron_bridge"]


def test_diff_cli_shows_the_bridge_value(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(MEGATRON))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**MEGATRON, "lr_scheduler": {"min_lr": 0.0}}))
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["changes"] == [{"key": "lr_scheduler.min_lr", "old": BRIDGE_RECIPE_VALUE, "new": 0.0,
                               "layer": "convergence"}]


# ---------------------------------------------------------------- #10: diff layer edges


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


def test_plan_keeps_micro_batch_1_for_a_packed_recipe_too():
    """`plan` and POST /v1/plan start from the recipe recommend would use: a packed SFT recipe plans micro batch 1."""
    import argparse

    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.cli_plan import request_from_args
    from service.planner import plan as run_plan

    args = argparse.Namespace(model="qwen3-8b", gpus=8, gpu_type="h100", nodes=None, goal="sft", engine="megatron",
                              seq_length=None, global_batch_size=None, precision=None, grad_reduce_dtype=None)
    request = request_from_args(args)
    assert request.packed_sequence
    assert {row.layout.micro_batch_size for row in run_plan(request).layouts} == {1}
    body = TestClient(create_app()).post("/v1/plan", json={"model": "qwen3-8b", "gpus": 8, "gpu_type": "h100",
                                                           "goal": "sft", "top": 20}).json()
    assert {layout["micro_batch_size"] for layout in body["layouts"]} == {1}

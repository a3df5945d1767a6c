"""Offline packing runs micro batch 1 on Megatron: the planner, plan, recommend and validate's RA-B002 agree."""

from __future__ import annotations

import pytest

from recipe_index import list_recipes
from service.configs.yamlio import parse_overrides
from service.plan.planner import make_request, plan
from service.plan.search_space import micro_batch_sizes
from service.recommend.contract import packs_offline
from service.recommend.recommendation import recommend
from service.validate.document import validate_text
from tests.paths import REPO

RULES_DOC = REPO / "docs" / "rules.md"


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
    assert not packs_offline(entry, parse_overrides(["--dataset.packed_sequence", "false"]))
    # a whole section without packing
    assert not packs_offline(entry, parse_overrides(["--dataset", "{preset: squad}"]))
    pretrain = next(e for e in list_recipes(kind="library") if e.name.startswith("llama3_8b_pretrain"))
    assert not packs_offline(pretrain, [])
    assert packs_offline(pretrain, parse_overrides(["--dataset.packed_sequence", "true"]))


def test_recommend_follows_a_packing_override():
    rec = recommend("llama3-8b", 8, "h100", goal="pretrain", global_batch_size=64,
                    overrides=["--dataset.packed_sequence", "true"])
    assert rec.plan.request.packed_sequence and rec.best.micro_batch_size == 1


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


def test_the_rule_is_in_the_rules_table():
    assert "| RA-B002 | error |" in RULES_DOC.read_text(encoding="utf-8")


def test_plan_keeps_micro_batch_1_for_a_packed_recipe_too():
    """`plan` and POST /v1/plan start from the recipe recommend would use: a packed SFT recipe plans micro batch 1."""
    import argparse

    from fastapi.testclient import TestClient

    from service.cli.plan import request_from_args
    from service.http.app import create_app
    from service.plan.planner import plan as run_plan
    from service.recommend.contract import plan_request

    args = argparse.Namespace(model="qwen3-8b", gpus=8, gpu_type="h100", nodes=None, goal="sft", engine="megatron",
                              seq_length=None, global_batch_size=None, precision=None, grad_reduce_dtype=None)
    request = plan_request(request_from_args(args))
    assert request.packed_sequence
    assert {row.layout.micro_batch_size for row in run_plan(request).layouts} == {1}
    body = TestClient(create_app()).post("/v1/plan", json={"model": "qwen3-8b", "gpus": 8, "gpu_type": "h100",
                                                           "goal": "sft", "top": 20}).json()
    assert {layout["micro_batch_size"] for layout in body["layouts"]} == {1}

"""Megatron Bridge ConfigContainer YAML and Megatron-LM arguments are judged by the same rules as this product's
format, at the file's own lines and keys."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from recipe_index import convert_record, find_bundled_model
from service.validate.document import validate_text
from tests.paths import REPO

SHARED = Path(os.environ.get("RECIPE_ADVISOR_SHARED", REPO.parent / "shared"))
TABLE = SHARED / "reference" / "mbridge_recipes.json"

BRIDGE_DUMP = """model:
  _target_: megatron.bridge.models.qwen.Qwen3ModelProvider
  tensor_model_parallel_size: 3
  num_layers: 36
  hidden_size: 4096
  num_attention_heads: 32
  num_query_groups: 8
  ffn_hidden_size: 12288
  vocab_size: 151936
  seq_length: 4096
train:
  micro_batch_size: 1
  global_batch_size: 128
dataset:
  seq_length: 4096
ddp:
  use_distributed_optimizer: true
mixed_precision: bf16_mixed
"""
LM_SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 3 pretrain_gpt.py \\
    --num-layers 36 --hidden-size 4096 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --ffn-hidden-size 12288 \\
    --tensor-model-parallel-size 3 \\
    --seq-length 4096 --micro-batch-size 1 --global-batch-size 128 --bf16
"""


def test_a_bridge_dump_with_tp_not_dividing_the_kv_heads_is_caught_at_its_line():
    findings = validate_text(BRIDGE_DUMP, "dump.yaml").findings
    (kv,) = [f for f in findings if f.code == "RA-L002"]
    assert kv.severity == "error" and kv.key == "model.tensor_model_parallel_size" and kv.line == 3
    assert "model.tensor_model_parallel_size to a divisor of 8" in kv.fix
    fixed = BRIDGE_DUMP.replace("tensor_model_parallel_size: 3", "tensor_model_parallel_size: 4")
    assert [f for f in validate_text(fixed, "dump.yaml").findings if f.severity == "error"] == []


def test_a_megatron_lm_script_is_caught_at_the_argument():
    findings = validate_text(LM_SCRIPT, "run.sh").findings
    kv = next(f for f in findings if f.code == "RA-L002")
    assert kv.key == "--tensor-model-parallel-size" and kv.line == 5
    assert "--tensor-model-parallel-size to a divisor of 8" in kv.fix


def test_a_megatron_lm_logs_arguments_block_reads_the_same():
    block = ["------------------------ arguments ------------------------"]
    args = {"num_layers": 36, "hidden_size": 4096, "num_attention_heads": 32, "group_query_attention": True,
            "num_query_groups": 8, "tensor_model_parallel_size": 3, "world_size": 24, "seq_length": 4096,
            "micro_batch_size": 1, "global_batch_size": 128, "bf16": True}
    block += [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in sorted(args.items())]
    block.append("-------------------- end of arguments ---------------------")
    findings = validate_text("\n".join(block) + "\n", "train.log").findings
    assert {f.code for f in findings if f.severity == "error"} == {f.code for f in validate_text(
        LM_SCRIPT, "run.sh").findings if f.severity == "error"}
    kv = next(f for f in findings if f.code == "RA-L002")
    assert kv.line == 1 + sorted(args).index("tensor_model_parallel_size") + 1


def _architecture(card) -> dict:
    values = {"num_layers": card.num_hidden_layers, "hidden_size": card.hidden_size,
              "num_attention_heads": card.num_attention_heads, "num_query_groups": card.num_key_value_heads,
              "kv_channels": card.head_dim, "ffn_hidden_size": card.intermediate_size, "vocab_size": card.vocab_size,
              "max_position_embeddings": card.max_position_embeddings}
    if card.is_moe:
        values.update(num_moe_experts=card.num_experts, moe_router_topk=card.num_experts_per_tok,
                      moe_ffn_hidden_size=card.moe_intermediate_size)
    return values


BRIDGE_NAMES = {"tp_size": "tensor_model_parallel_size", "pp_size": "pipeline_model_parallel_size",
                "vp_size": "virtual_pipeline_model_parallel_size", "cp_size": "context_parallel_size",
                "ep_size": "expert_model_parallel_size", "etp_size": "expert_tensor_parallel_size",
                "sequence_parallel": "sequence_parallel"}


BRIDGE_LORA = "megatron.bridge.peft.lora.LoRA"


def _bridge_peft(record: dict) -> dict:
    """The record's LoRA as Bridge's ConfigContainer dumps it (its own module names; unset fields left to LoRA's
    defaults)."""
    peft = {"_target_": BRIDGE_LORA, "dim": record["peft_dim"], "alpha": record["peft_alpha"],
            "target_modules": record["peft_target_modules"]}
    return {k: v for k, v in peft.items() if v is not None}


def _dialects(config: dict, card, record: dict) -> tuple[str, str]:
    d, s = config["distributed"], config["step_scheduler"]
    model = {BRIDGE_NAMES[k]: v for k, v in d.items() if k in BRIDGE_NAMES and v is not None} | _architecture(card)
    if d.get("activation_checkpointing") in ("full", "selective"):
        model["recompute_granularity"] = d["activation_checkpointing"]
    seq = config["dataset"]["seq_length"]
    precision = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_current_scaling_mixed", "fp16": "fp16_mixed",
                 "nvfp4": "bf16_with_nvfp4_mixed"}.get(config.get("precision", "bf16"), "bf16_mixed")
    container = {"model": model | {"seq_length": seq},
                 "train": {"micro_batch_size": s["local_batch_size"], "global_batch_size": s["global_batch_size"]},
                 "dataset": {"seq_length": seq},
                 "ddp": {"use_distributed_optimizer": d.get("use_distributed_optimizer", True),
                         "grad_reduce_in_fp32": d.get("grad_reduce_dtype", "fp32") == "fp32"},
                 "mixed_precision": precision}
    if config.get("peft"):
        container["peft"] = _bridge_peft(record)
    bridge = yaml.safe_dump(container, sort_keys=False)
    lm = dict(model, use_distributed_optimizer=d.get("use_distributed_optimizer", True), seq_length=seq,
              grad_reduce_in_bf16=d.get("grad_reduce_dtype") == "bf16", micro_batch_size=s["local_batch_size"],
              global_batch_size=s["global_batch_size"])
    if lm.get("num_moe_experts"):
        lm["num_experts"] = lm.pop("num_moe_experts")
    low = {"fp8": " --fp8-format hybrid", "nvfp4": " --fp4-format e2m1"}.get(config.get("precision", "bf16"), "")
    lines = ["pretrain_gpt.py \\", "    --group-query-attention \\", f"    --bf16{low} \\"]
    lines += [f"    --{k.replace('_', '-')}" + ("" if v is True else f" {v}") + " \\" for k, v in lm.items()
              if v is not False]
    return bridge, "\n".join(lines) + "\n"


@pytest.mark.slow
def test_reference_recipes_give_the_same_findings_in_each_dialect():
    """Every 12th Bridge reference recipe and every 4th PEFT one (dense and MoE, no MLA), written as our config
    without its recipe metadata, as a ConfigContainer YAML and (but PEFT, which Megatron-LM does not run) as a
    Megatron-LM command line, at the same world."""
    records = [r for i, r in enumerate(json.loads(TABLE.read_text()))
               if i % 12 == 0 or (r["mode"] == "peft" and i % 4 == 0)]
    checked = peft = 0
    for record in records:
        config = convert_record(record)
        card = find_bundled_model(config["model"]["pretrained_model_name_or_path"])
        if card is None or card.kv_lora_rank or card.architecture.startswith("hybrid") or card.num_shared_experts:
            continue  # an architecture the arguments here do not carry (latent attention, Mamba, shared experts)
        config.pop("metadata", None)
        config["model"].pop("seq_length", None)  # one length, as Megatron-LM has (Bridge's runner syncs them)
        if config["distributed"].get("etp_size") is None and config["distributed"].get("ep_size", 1) > 1:
            config["distributed"]["etp_size"] = 1
        hw = config["hardware"]
        flags = {"gpus": hw["gpus_per_node"], "nodes": hw["num_nodes"], "gpu_type": hw["gpu_type"]}
        bridge, lm = _dialects(config, card, record)
        config["model"].update({"pretrained_model_name_or_path": card.id})
        ours = {(f.code, f.severity) for f in validate_text(yaml.safe_dump(config), "c.yaml", **flags).findings}
        peft += "peft" in config
        for text, path in ((bridge, "b.yaml"),) + (() if "peft" in config else ((lm, "run.sh"),)):
            theirs = {(f.code, f.severity) for f in validate_text(text, path, **flags).findings}
            assert theirs == ours, (record["name"], path, theirs ^ ours)
        checked += 1
    assert checked >= 20 and peft >= 10


def test_run_recipe_overrides_apply_over_the_config_file_at_the_commands_line(tmp_path):
    (tmp_path / "dump.yaml").write_text(BRIDGE_DUMP.replace("tensor_model_parallel_size: 3",
                                                            "tensor_model_parallel_size: 4"))
    script = tmp_path / "launch.sh"
    script.write_text("torchrun --nproc_per_node 8 scripts/training/run_recipe.py \\\n"
                      "    --config-file dump.yaml \\\n"
                      "    model.tensor_model_parallel_size=3 train.global_batch_size=128\n")
    from service.validate.document import validate_file

    findings = validate_file(str(script), gpus=8).findings
    kv = next(f for f in findings if f.code == "RA-L002")
    assert kv.key == "model.tensor_model_parallel_size" and kv.line == 3
    script.write_text(script.read_text().replace("=3 ", "=4 "))
    assert [f for f in validate_file(str(script), gpus=8).findings if f.severity == "error"] == []
    script.write_text("python run_recipe.py --config-file missing.yaml\n")
    (missing,) = validate_file(str(script)).findings
    assert missing.code == "RA-F001" and missing.line == 1


def test_a_request_never_reads_the_file_a_run_recipe_command_names(tmp_path):
    (tmp_path / "dump.yaml").write_text(BRIDGE_DUMP)
    command = "python run_recipe.py --config-file dump.yaml model.tensor_model_parallel_size=3\n"
    (refused,) = validate_text(command, str(tmp_path / "launch.sh"), dialect="megatron-lm").findings
    assert refused.code == "RA-F001" and "not read for a request" in refused.message

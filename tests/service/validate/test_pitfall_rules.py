"""The seed's pitfall table as rules, at the severity upstream gives each (assert: error; throughput hint:
warning/info), in this product's format and in a Bridge ConfigContainer alike."""

from __future__ import annotations

import pytest

from service.validate.document import validate_text

OURS = """model:
  pretrained_model_name_or_path: {model}
{model_keys}distributed:
  strategy: megatron
  tp_size: {tp}
  cp_size: {cp}
  sequence_parallel: true
  activation_checkpointing: {recompute}
{dist_keys}dataset:
  seq_length: 4096
{data_keys}hardware:
  gpu_type: h100
  gpus_per_node: 8
step_scheduler:
  global_batch_size: 64
"""


def codes(model="llama3-8b", tp=2, cp=1, recompute="selective", model_keys="", dist_keys="", data_keys=""):
    text = OURS.format(model=model, tp=tp, cp=cp, recompute=recompute, model_keys=model_keys, dist_keys=dist_keys,
                       data_keys=data_keys)
    return {(f.code, f.severity, f.key) for f in validate_text(text, "c.yaml").findings if f.code.startswith("RA-G")}


GRAPH = "  cuda_graph_impl: transformer_engine\n  use_te_rng_tracker: true\n"


def test_graphs_with_full_recompute_are_an_error_unless_full_iteration():
    assert ("RA-G001", "error", "model.cuda_graph_impl") in codes(recompute="full", model_keys=GRAPH)
    assert codes(recompute="selective", model_keys=GRAPH) == set()
    full = "  cuda_graph_impl: full_iteration\n  use_te_rng_tracker: true\n"
    assert codes(recompute="full", model_keys=full) == set()
    legacy = "  cuda_graph_impl: local\n  cuda_graph_scope: full_iteration\n  use_te_rng_tracker: true\n"
    assert codes(recompute="full", model_keys=legacy) == set()


def test_graphs_without_the_te_rng_tracker_are_an_error():
    assert codes(model_keys="  cuda_graph_impl: transformer_engine\n") == {
        ("RA-G002", "error", "model.use_te_rng_tracker")}


@pytest.mark.parametrize("data_keys, key", [
    ("  packed_sequence: true\n", "dataset.pad_to_max_length"),
    ("  packed_sequence: true\n  pad_to_max_length: true\n", "dataset.offline_packing_specs.pad_cu_seqlens"),
])
def test_graphs_with_packed_sequences_need_static_shapes(data_keys, key):
    assert codes(model_keys=GRAPH, data_keys=data_keys) == {("RA-G003", "error", key)}
    fixed = "  packed_sequence: true\n  pad_to_max_length: true\n  offline_packing_specs:\n    pad_cu_seqlens: true\n"
    assert codes(model_keys=GRAPH, data_keys=fixed) == set()


def test_megatron_fsdp_with_wide_tp_on_h100_is_a_warning():
    assert codes(tp=4, dist_keys="  use_megatron_fsdp: true\n") == {("RA-G004", "warning", "distributed.tp_size")}
    assert codes(tp=2, dist_keys="  use_megatron_fsdp: true\n") == set()


def test_moe_overlap_grad_reduce_on_h100_is_info():
    found = codes(model="qwen3-30b-a3b", tp=1, model_keys="  overlap_grad_reduce: true\n",
                  dist_keys="  ep_size: 8\n  etp_size: 1\n")
    assert ("RA-G005", "info", "model.overlap_grad_reduce") in found
    assert not codes(model="llama3-8b", model_keys="  overlap_grad_reduce: true\n")


def test_all_to_all_cp_beyond_the_kv_heads_is_an_error():
    # llama3-8b: 8 KV heads, TP 2 leaves 4 per rank; a2a over CP 8 cannot split 4 heads
    assert codes(cp=8, model_keys="  cp_comm_type: a2a\n") >= {("RA-G006", "error", "model.cp_comm_type")}
    assert not [c for c in codes(cp=4, model_keys="  cp_comm_type: a2a\n") if c[0] == "RA-G006"]
    assert not [c for c in codes(cp=8, model_keys="  cp_comm_type: a2a+p2p\n") if c[0] == "RA-G006"]


def test_a_bridge_config_names_its_own_keys_and_lines():
    text = """model:
  tensor_model_parallel_size: 2
  num_layers: 32
  hidden_size: 4096
  num_attention_heads: 32
  num_query_groups: 8
  recompute_granularity: full
  cuda_graph_impl: transformer_engine
  use_te_rng_tracker: true
train:
  micro_batch_size: 1
  global_batch_size: 64
ddp:
  use_distributed_optimizer: true
mixed_precision: bf16_mixed
"""
    (g001,) = [f for f in validate_text(text, "b.yaml", gpus=8).findings if f.code == "RA-G001"]
    assert g001.key == "model.cuda_graph_impl" and g001.line == 8


def test_vlm_fine_tuning_on_a_text_preset_is_a_warning():
    vlm = OURS.replace("strategy: megatron", "strategy: megatron").format(
        model="qwen3-vl-8b", tp=2, cp=1, recompute="selective", model_keys="", dist_keys="",
        data_keys="  preset: squad\n")
    text = "metadata:\n  mode: sft\n" + vlm
    found = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-G007"]
    assert [(f.severity, f.key) for f in found] == [("warning", "dataset.preset")]
    assert not [f for f in validate_text(text.replace("preset: squad", "preset: cord_v2"), "c.yaml").findings
                if f.code == "RA-G007"]
    text_model = text.replace("qwen3-vl-8b", "llama3-8b")
    assert not [f for f in validate_text(text_model, "c.yaml").findings if f.code == "RA-G007"]

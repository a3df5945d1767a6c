"""What Megatron users write, read into this product's config so the same rules judge it at the same places.

Two dialects, one table of names (Megatron-Core's ``TransformerConfig`` / ``ModelParallelConfig`` field names,
which Megatron-LM's argparse destinations share for the most part):

- ``megatron-bridge``: a Megatron Bridge ``ConfigContainer`` YAML (``run_recipe.py --config-file``, or the dump it
  writes at start-up): ``model:`` (the provider: parallel sizes and architecture), ``train:``, ``dataset:``,
  ``ddp:``, ``optimizer:``, ``mixed_precision:``. Keys of a finding are the Bridge keys (``model.tensor_model_
  parallel_size``); lines are the YAML's.
- ``megatron-lm``: Megatron-LM's arguments, a ``pretrain_gpt.py`` command line or launch script, or the arguments
  block of a run's log (service/configs/megatron_args.py). Keys are the arguments (``--tensor-model-parallel-size``),
  lines the script's or the log's.

The model is the architecture the arguments state (``num_layers``, ``hidden_size``, ...), not a Hub name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import lcm
from typing import Any, Optional

from recipe_index.cards import ModelCard
from service.configs.yamlio import Document

BRIDGE, MEGATRON_LM = "megatron-bridge", "megatron-lm"
MODEL_NAME = "model-from-arguments"

# Megatron name -> this product's key. Names are MCore's; Megatron-LM's own spellings follow in LM_ALIASES.
PARALLEL_KEYS = {
    "tensor_model_parallel_size": "distributed.tp_size",
    "pipeline_model_parallel_size": "distributed.pp_size",
    "virtual_pipeline_model_parallel_size": "distributed.vp_size",
    "context_parallel_size": "distributed.cp_size",
    "expert_model_parallel_size": "distributed.ep_size",
    "expert_tensor_parallel_size": "distributed.etp_size",
    "sequence_parallel": "distributed.sequence_parallel",
    "use_distributed_optimizer": "distributed.use_distributed_optimizer",
    "use_megatron_fsdp": "distributed.use_megatron_fsdp",
    "pipeline_model_parallel_layout": "model.pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage": "model.num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage": "model.num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split": "model.account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split": "model.account_for_loss_in_pipeline_split",
    "mtp_num_layers": "model.mtp_num_layers",
    "micro_batch_size": "step_scheduler.local_batch_size",
    "global_batch_size": "step_scheduler.global_batch_size",
    "train_iters": "step_scheduler.max_steps",
    "seq_length": "dataset.seq_length",
    "model_seq_length": "model.seq_length",
    "lr": "optimizer.lr",
}
# Megatron-LM arguments whose destination differs from the MCore field (megatron/training/arguments.py).
LM_ALIASES = {
    "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
    "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
    "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
    "num_experts": "num_moe_experts",
    "te_rng_tracker": "use_te_rng_tracker",
    "fp8_format": "fp8",  # --fp8-format's destination is fp8, --fp4-format's fp4
    "fp4_format": "fp4",
}
# Where a Bridge ConfigContainer keeps each name (section.name); anything else is read from `model:`.
# Megatron settings the pitfall rules read (service/validate/rules/pitfalls.py), kept under `model:`.
MODEL_SETTINGS = ("cuda_graph_impl", "cuda_graph_scope", "use_te_rng_tracker", "cp_comm_type",
                  "hierarchical_context_parallel_sizes", "overlap_grad_reduce")
DATASET_SETTINGS = ("pad_to_max_length", "offline_packing_specs", "enable_in_batch_packing")
BRIDGE_SECTIONS = {"micro_batch_size": "train", "global_batch_size": "train", "train_iters": "train",
                   "overlap_grad_reduce": "ddp",
                   "lr": "optimizer", "use_distributed_optimizer": "ddp", "use_megatron_fsdp": "ddp",
                   "grad_reduce_in_fp32": "ddp"}
BRIDGE_DATASET_LENGTH = "dataset.seq_length"  # Bridge asserts model.seq_length == dataset.seq_length


@dataclass
class Reading:
    """A Megatron config read into this product's: the data, where each key was set, and its name there."""

    data: dict
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # our key -> the dialect's key
    card: Optional[ModelCard] = None
    dialect: str = BRIDGE
    # Sections judged by their Bridge names (a `peft:`), and where each of their keys is written: a Bridge key may
    # share its name with one of ours that another Bridge key was read into (`peft.rank` beside `peft.dim`).
    dialect_sections: dict = field(default_factory=dict)
    written_positions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def spell(self, name: str) -> str:
        """An MCore name as this dialect writes it: ``--an-argument``, or its Bridge section and key."""
        if self.dialect == MEGATRON_LM:
            lm = {v: k for k, v in LM_ALIASES.items()}.get(name, name)
            return "--" + lm.replace("_", "-")
        return f"{BRIDGE_SECTIONS.get(name, 'model')}.{name}" if name != "seq_length" else BRIDGE_DATASET_LENGTH


def read_bridge(doc: Document) -> dict[str, tuple[Any, int, str]]:
    """A Bridge YAML's values by MCore name: (value, line, Bridge key)."""
    out: dict[str, tuple[Any, int, str]] = {}
    model = doc.data.get("model") if isinstance(doc.data.get("model"), dict) else {}
    for key, value in model.items():
        name = "model_seq_length" if key == "seq_length" else str(key)  # Bridge asserts it equals dataset's
        out[name] = (value, doc.position(f"model.{key}")[0] or 0, f"model.{key}")
    for name, section in BRIDGE_SECTIONS.items():
        node = doc.data.get(section)
        if isinstance(node, dict) and name in node:
            out[name] = (node[name], doc.position(f"{section}.{name}")[0] or 0, f"{section}.{name}")
    dataset = doc.data.get("dataset")
    for name in DATASET_SETTINGS:
        if isinstance(dataset, dict) and name in dataset:
            out[f"dataset.{name}"] = (dataset[name], doc.position(f"dataset.{name}")[0] or 0, f"dataset.{name}")
    if isinstance(dataset, dict) and dataset.get("seq_length") is not None:
        out["seq_length"] = (dataset["seq_length"], doc.position(BRIDGE_DATASET_LENGTH)[0] or 0, BRIDGE_DATASET_LENGTH)
    peft = doc.data.get("peft")
    if isinstance(peft, (str, dict)):
        out["peft"] = (peft, doc.position("peft")[0] or 0, "peft")
        for key in peft if isinstance(peft, dict) else ():
            out[f"peft.{key}"] = (peft[key], doc.position(f"peft.{key}")[0] or 0, f"peft.{key}")
    precision = doc.data.get("mixed_precision")
    if isinstance(precision, (str, dict)):
        out["mixed_precision"] = (precision, doc.position("mixed_precision")[0] or 0, "mixed_precision")
    return out


def read_lm(args: dict[str, tuple[Any, int]]) -> dict[str, tuple[Any, int, str]]:
    """Megatron-LM arguments by MCore name: (value, line, --argument)."""
    out: dict[str, tuple[Any, int, str]] = {}
    for name, (value, line) in args.items():
        out[LM_ALIASES.get(name, name)] = (value, line, "--" + name.replace("_", "-"))
    if "untie_embeddings_and_output_weights" in out:  # Megatron-LM ties them unless told not to
        value, line, arg = out["untie_embeddings_and_output_weights"]
        out["share_embeddings_and_output_weights"] = (not value, line, arg)
    if args.get("group_query_attention", (False, 0))[0] is not True and "num_query_groups" in out:
        del out["num_query_groups"]  # without --group-query-attention the groups are the heads
    return out


def translate(values: dict[str, tuple[Any, int, str]], dialect: str, gpus: Optional[int], nodes: Optional[int],
              gpu_type: Optional[str]) -> Reading:
    """This product's config from Megatron names."""
    reading = Reading(data={"model": {"pretrained_model_name_or_path": MODEL_NAME},
                            "distributed": {"strategy": "megatron"}, "dataset": {}, "step_scheduler": {}},
                      dialect=dialect)

    def put(key: str, value: Any, line: int, name: str) -> None:
        section, _, leaf = key.partition(".")
        reading.data.setdefault(section, {})[leaf] = value
        reading.positions[key] = (line, 1)
        reading.names[key] = name

    for name, key in PARALLEL_KEYS.items():
        if name in values and values[name][0] is not None:
            value, line, written = values[name]
            put(key, value, line, written)
    for name in MODEL_SETTINGS:
        if name in values and values[name][0] is not None:
            put(f"model.{name}", *values[name])
    for name in DATASET_SETTINGS:
        if f"dataset.{name}" in values:
            put(f"dataset.{name}", *values[f"dataset.{name}"])
    if "recompute_granularity" in values and values["recompute_granularity"][0] in ("full", "selective"):
        value, line, written = values["recompute_granularity"]
        put("distributed.activation_checkpointing", value, line, written)
    for name, fp32 in (("grad_reduce_in_fp32", True), ("grad_reduce_in_bf16", False)):  # Bridge ddp:, Megatron-LM
        if isinstance(values.get(name, (None,))[0], bool):
            value, line, written = values[name]
            put("distributed.grad_reduce_dtype", "fp32" if value is fp32 else "bf16", line, written)
    if "peft" in values:
        _peft(reading, values)
    precision = _precision(values)
    if precision is not None:
        value, line, written = precision
        reading.data["precision"] = value
        reading.positions["precision"], reading.names["precision"] = (line, 1), written
    if dialect == MEGATRON_LM and "distributed.etp_size" not in reading.positions:
        # Megatron-LM runs Megatron-Core alone: ModelParallelConfig sets an unset ETP to TP (no Bridge default)
        reading.data["distributed"]["etp_size"] = reading.data["distributed"].get("tp_size", 1)
    reading.card = model_card(values)
    _hardware(reading, values, dialect, gpus, nodes, gpu_type)
    return reading


def _peft(reading: Reading, values: dict) -> None:
    """Bridge's ``peft:`` as this product's ``peft`` (service/validate/megatron/peft.py): the goal is PEFT."""
    from service.validate.megatron.peft import our_peft

    section, line, _ = values["peft"]
    reading.data["peft"], written = our_peft(section)
    reading.dialect_sections["peft"] = section
    reading.positions["peft"] = (line, 1)
    for ours, theirs in written.items():
        reading.positions[ours], reading.names[ours] = (values[theirs][1], 1), theirs
    for key, (_, key_line, _) in values.items():  # every key as written, for the rules on Bridge's names
        if key.startswith("peft."):
            reading.written_positions[key] = (key_line, 1)


def _precision(values: dict) -> Optional[tuple[str, int, str]]:
    for name, precision in (("fp4", "nvfp4"), ("fp8", "fp8"), ("bf16", "bf16"), ("fp16", "fp16")):
        if name in values and values[name][0] not in (None, False):
            return precision, values[name][1], values[name][2]
    if "mixed_precision" in values:
        value, line, written = values["mixed_precision"]
        text = str(value.get("_target_", value) if isinstance(value, dict) else value).lower()
        for token, precision in (("nvfp4", "nvfp4"), ("fp8", "fp8"), ("bf16", "bf16"), ("fp16", "fp16")):
            if token in text:
                return precision, line, written
    return None


def _int(values: dict, name: str, default: Any = None) -> Any:
    value = values.get(name, (default,))[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def model_card(values: dict) -> Optional[ModelCard]:
    """The architecture the arguments state, or None when they lack the layers, width or heads."""
    layers, hidden, heads = _int(values, "num_layers"), _int(values, "hidden_size"), _int(values, "num_attention_heads")
    if not (layers and hidden and heads):
        return None
    experts = _int(values, "num_moe_experts", 0) or 0
    ffn = _int(values, "ffn_hidden_size") or 4 * hidden
    return ModelCard(
        id=MODEL_NAME, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=_int(values, "num_query_groups") or heads, head_dim=_int(values, "kv_channels") or
        hidden // heads, intermediate_size=ffn, vocab_size=_int(values, "vocab_size") or
        _int(values, "padded_vocab_size") or 32000, architecture="moe" if experts else "dense",
        num_experts=experts, num_experts_per_tok=_int(values, "moe_router_topk", 2 if experts else 0) or 0,
        moe_intermediate_size=_int(values, "moe_ffn_hidden_size") or (ffn if experts else None),
        max_position_embeddings=_int(values, "max_position_embeddings"),
        tie_word_embeddings=values.get("share_embeddings_and_output_weights", (False,))[0] is True)


def _hardware(reading: Reading, values: dict, dialect: str, gpus: Optional[int], nodes: Optional[int],
              gpu_type: Optional[str]) -> None:
    """The world: the flags, else what the arguments say (torchrun's --nproc_per_node/--nnodes, a log's
    world_size), else the smallest world that holds the layout (so no rule judges a world nobody stated)."""
    hardware = {"gpu_type": gpu_type or "h100"}
    per_node, count = _int(values, "nproc_per_node"), _int(values, "nnodes")
    world = _int(values, "world_size")
    if gpus is None and per_node:
        hardware.update(gpus_per_node=per_node, num_nodes=count or 1)
        reading.positions["hardware.gpus_per_node"] = (values["nproc_per_node"][1], 1)
        reading.names["hardware.gpus_per_node"] = values["nproc_per_node"][2]
    elif gpus is None and world:
        hardware.update(gpus_per_node=min(world, 8) if world % 8 == 0 or world < 8 else world,
                        num_nodes=world // 8 if world % 8 == 0 and world > 8 else 1)
        reading.positions["hardware.gpus_per_node"] = (values["world_size"][1], 1)
        reading.names["hardware.gpus_per_node"] = values["world_size"][2]
    elif gpus is None:
        d = reading.data["distributed"]
        tp, pp, cp = (int(d.get(k) or 1) for k in ("tp_size", "pp_size", "cp_size"))
        ep = int(d.get("ep_size") or 1)
        etp = int(d.get("etp_size") or (1 if ep > 1 else tp))
        smallest = pp * lcm(tp * cp, ep * etp)
        whole_nodes = smallest > 8 and smallest % 8 == 0
        hardware.update(gpus_per_node=8 if whole_nodes else smallest, num_nodes=smallest // 8 if whole_nodes else 1)
    reading.data["hardware"] = hardware


def detect_megatron(data: Any) -> Optional[str]:
    """``megatron-bridge`` for a ConfigContainer YAML (a ``model:`` beside ``train:``/``ddp:``/``mixed_precision:``,
    without this product's ``distributed:``/``step_scheduler:``), else None."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return None
    if "distributed" in data or "step_scheduler" in data:
        return None
    return BRIDGE if any(k in data for k in ("train", "ddp", "mixed_precision", "dist")) else None


def looks_like_megatron_lm(text: str, path: str) -> bool:
    """A Megatron-LM log (its arguments block) or a launch script / command line (not a YAML file)."""
    from service.configs.megatron_args import has_arguments_block

    if has_arguments_block(text):
        return True
    return not path.startswith("<") and not path.lower().endswith((".yaml", ".yml")) and re.search(
        r"--(?:tensor|pipeline)-model-parallel-size|\b(?:pretrain_\w+|run_recipe)\.py\b", text) is not None

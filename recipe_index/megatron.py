"""Convert a Megatron Bridge recipe record (a recipe function's values) to our config.

``convert_record`` is pure: a record and a model resolver in, a config mapping out (the YAML
format of ``trainer.contract.config``). It keeps the recipe's values as they are, including
the inconsistent ones the reference flags, so the validator can find them; Bridge's silent
fixes (SP off at TP=1, ETP=1 when EP>1) are left to the rules, not applied here.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Optional

from recipe_index.cards import ModelCard
from recipe_index.errors import UnknownHardwareError
from recipe_index.hardware import get_hardware
from recipe_index.models import REPO_ID, find_bundled_model

BRIDGE_COMMIT = "067f987"
ModelResolver = Callable[[str], Optional[ModelCard]]

KINDS = {"library": "library", "perf_benchmark": "benchmark", "diffusion_library": "library"}
MODES = {"pretrain": "pretrain", "sft": "sft", "peft": "peft", "finetune": "sft"}
PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "fp8cs": "fp8", "fp8ds": "fp8", "fp8mx": "fp8", "fp8sc": "fp8",
              "nvfp4": "nvfp4"}
RECOMPUTE = {"full": "full", "selective": "selective", None: "none"}
OPTIMIZERS = {"adam": "torch.optim.AdamW", "muon": "torch.optim.Muon", "dist_muon": "torch.optim.Muon"}

# Megatron module names -> Hugging Face module names (Llama/Qwen, DeepSeek MLA, Nemotron-H Mamba).
LORA_TARGETS = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
    "linear_q_proj": ("q_proj",),
    "linear_q_down_proj": ("q_a_proj",),
    "linear_q_up_proj": ("q_b_proj",),
    "linear_kv_down_proj": ("kv_a_proj_with_mqa",),
    "linear_kv_up_proj": ("kv_b_proj",),
    "in_proj": ("in_proj",),
    "out_proj": ("out_proj",),
}
# Bridge's LoRA dataclass defaults (peft/lora.py), for records that leave them unresolved.
LORA_DEFAULT_RANK, LORA_DEFAULT_ALPHA = 32, 32

_GPUS_IN_NAME = re.compile(r"_(\d+)gpu_([a-z0-9]+)_")


def short_name(record: dict[str, Any]) -> str:
    """The recipe's index name: the Megatron function name without ``_config``."""
    name = record["name"]
    return name[: -len("_config")] if name.endswith("_config") else name


def _resolve(models: ModelResolver, record: dict[str, Any]) -> Optional[ModelCard]:
    for key in (record.get("model_key"), record.get("hf_model_id"), record.get("model")):
        if not key:
            continue
        try:
            card = models(key)
        except (ValueError, LookupError):  # an UnknownModelError from a resolving resolver
            card = None
        if card is not None:
            return card
    return None


def _hardware_and_gpus(record: dict[str, Any]) -> tuple[Optional[str], Optional[int]]:
    hardware, num_gpus = record.get("hardware"), record.get("num_gpus")
    if hardware is None and num_gpus is None:
        # A variant placed before the GPU token hides it from the reference's name parser.
        m = _GPUS_IN_NAME.search(record["name"])
        if m:
            return m.group(2), int(m.group(1))
    return hardware, num_gpus


def _hardware_section(gpu_type: Optional[str], num_gpus: Optional[int]) -> Optional[dict[str, Any]]:
    if gpu_type is None or num_gpus is None:
        return None
    try:
        per_node = get_hardware(gpu_type).gpus_per_node
    except UnknownHardwareError:
        per_node = 8
    per_node = min(per_node, num_gpus)
    return {"gpu_type": gpu_type, "gpus_per_node": per_node, "num_nodes": math.ceil(num_gpus / per_node)}


_HW_DIR = re.compile(r"/(h100|b200|b300|gb200|gb300|vr200|r100)/")


def _minimum_hardware(record: dict[str, Any]) -> Optional[dict[str, Any]]:
    """A recipe that names no GPU count is sized at its smallest world, PP*lcm(TP*CP, EP*ETP)
    (the table's ``min_gpus``), on the hardware folder it lives in (Bridge's default is h100)."""
    if not record.get("min_gpus"):
        return None
    m = _HW_DIR.search(record.get("source_path") or "")
    return _hardware_section(m.group(1) if m else "h100", record["min_gpus"])


def _dataset(record: dict[str, Any], mode: str) -> dict[str, Any]:
    config, variant = record.get("dataset_config"), record.get("variant") or ""
    if config in ("GPTSFTDatasetConfig",) or (config is None and mode != "pretrain"):
        preset = re.sub(r"_(packed|tp1)\b", "", variant) if "openmath" in variant else "squad"
        # _sft_common packs offline, which Bridge only allows with micro batch 1.
        packed = record.get("micro_batch_size") in (1, None)
    elif config == "DirectHFSFTDatasetConfig":
        preset, packed = "cord_v2", None  # in-batch packing (_sft_common_vlm), not offline packing
    elif config == "MockVLMSFTDatasetConfig":
        preset, packed = "mock_vlm", None
    elif config == "EnergonDatasetConfig":
        preset, packed = "energon", None
    elif config == "Step37Flickr8kSFTDataProvider":
        preset, packed = "flickr8k", None
    else:
        preset, packed = "mock", None
    dataset: dict[str, Any] = {"preset": preset}
    if record.get("dataset_seq_length") is not None:
        dataset["seq_length"] = record["dataset_seq_length"]
    if packed:
        dataset["packed_sequence"] = True
    return dataset


def _distributed(record: dict[str, Any]) -> dict[str, Any]:
    fields = (
        ("tp_size", "tensor_model_parallel_size"),
        ("pp_size", "pipeline_model_parallel_size"),
        ("vp_size", "virtual_pipeline_model_parallel_size"),
        ("cp_size", "context_parallel_size"),
        ("ep_size", "expert_model_parallel_size"),
        ("etp_size", "expert_tensor_parallel_size"),
        ("sequence_parallel", "sequence_parallel"),
    )
    dist: dict[str, Any] = {"strategy": "megatron"}
    for ours, theirs in fields:
        if record.get(theirs) is not None:
            dist[ours] = record[theirs]
    dist["activation_checkpointing"] = RECOMPUTE.get(record.get("recompute_granularity"), "none")
    if record.get("use_distributed_optimizer") is not None:
        dist["use_distributed_optimizer"] = record["use_distributed_optimizer"]
    if record.get("use_megatron_fsdp"):
        dist["use_megatron_fsdp"] = True
    if record.get("pipeline_model_parallel_layout_set"):
        dist["pipeline_layout"] = "explicit"
    if record.get("kind") == "perf_benchmark":
        # _benchmark_common() sets grad_reduce_in_fp32=False (Megatron Bridge, benchmark recipes).
        dist["grad_reduce_dtype"] = "bf16"
    return dist


def _peft(record: dict[str, Any]) -> dict[str, Any]:
    targets: list[str] = []
    for module in record.get("peft_target_modules") or ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"):
        for hf_name in LORA_TARGETS.get(module, (module,)):
            if hf_name not in targets:
                targets.append(hf_name)
    return {
        "method": "lora",
        "rank": record.get("peft_dim") or LORA_DEFAULT_RANK,
        "alpha": record.get("peft_alpha") or LORA_DEFAULT_ALPHA,
        "target_modules": targets,
    }


def _pretrained_name(record: dict[str, Any], card: Optional[ModelCard]) -> str:
    if card is not None and card.hf_id:
        return card.hf_id
    for key in (record.get("hf_model_id"), record.get("model_key")):
        if key and REPO_ID.match(key):
            return key
    return card.id if card is not None else record["model"]


def convert_record(record: dict[str, Any], models: ModelResolver = find_bundled_model) -> dict[str, Any]:
    """One reference recipe record -> a config mapping.

    ``models`` maps a name (HF id, Megatron model key) to a ModelCard or None (or raises
    ValueError); the default finds bundled cards only, so conversion never touches the network.
    """
    card = _resolve(models, record)
    mode = MODES.get(record.get("mode") or "pretrain", "pretrain")
    gpu_type, num_gpus = _hardware_and_gpus(record)
    token = record.get("precision_token") or record.get("precision_token_in_name") or "bf16"

    metadata: dict[str, Any] = {
        "name": short_name(record),
        "kind": KINDS.get(record.get("kind"), "library"),
        "family": record.get("family"),
        "model": card.id if card is not None else record.get("model"),
        "mode": mode,
        "hardware": gpu_type,
        "num_gpus": num_gpus,
        "source": f"Megatron-Bridge@{BRIDGE_COMMIT}:{record['source_path']}",
        "megatron_recipe": record["name"],
        "megatron_aliases": sorted(record.get("legacy_aliases") or []),
        "precision_recipe": token,
    }
    model: dict[str, Any] = {"pretrained_model_name_or_path": _pretrained_name(record, card)}
    model_seq, data_seq = record.get("model_seq_length"), record.get("dataset_seq_length")
    if model_seq is not None and model_seq != data_seq:
        model["seq_length"] = model_seq

    steps = {"global_batch_size": "global_batch_size", "local_batch_size": "micro_batch_size",
             "max_steps": "train_iters"}
    config: dict[str, Any] = {
        "metadata": {k: v for k, v in metadata.items() if v is not None},
        "model": model,
        "step_scheduler": {ours: record[theirs] for ours, theirs in steps.items() if record.get(theirs) is not None},
        "distributed": _distributed(record),
        "dataset": _dataset(record, mode),
        "precision": PRECISIONS.get(token, "bf16"),
    }
    if mode == "peft":
        config["peft"] = _peft(record)
    optimizer: dict[str, Any] = {"_target_": OPTIMIZERS.get(record.get("optimizer") or "adam", "torch.optim.AdamW")}
    if record.get("lr") is not None:
        optimizer["lr"] = record["lr"]
    config["optimizer"] = optimizer
    hardware = _hardware_section(gpu_type, num_gpus) or _minimum_hardware(record)
    if hardware is not None:
        config["hardware"] = hardware
    return config

"""The Megatron Bridge recipe recommender's pitfall table (shared/seeds/mbridge-recipe-recommender.md, "Common
Pitfalls to Warn About") as rules, each at the severity the upstream source gives it: an assert or raise is an
error, a throughput hint a warning or info.

They read Megatron's own settings, written under ``model:`` / ``dataset:`` in this product's format (what
``document.facts_from_config`` puts in ``extra["megatron"]`` and ``extra["dataset"]``), or read from a Bridge
``ConfigContainer`` YAML or Megatron-LM's arguments (service/validate/megatron/). PP > 1 without VP is RA-L013 and
long context without CP RA-L016.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from service.facts import Facts
from service.validate.rules.registry import Violation, layout_rule
from service.validate.rules.sizes import bundled

GRAPH_OFF = (None, "none", False)


def _megatron(f: Facts) -> dict:
    return f.extra.get("megatron") or {}


def _graph(f: Facts) -> Optional[str]:
    """The CUDA graph implementation, or None when graphs are off (or the engine is the bundled trainer's)."""
    impl = _megatron(f).get("cuda_graph_impl")
    return None if bundled(f) or impl in GRAPH_OFF else str(impl)


def _full_iteration(f: Facts) -> bool:
    """Megatron-Core's full-iteration graph: ``cuda_graph_impl: full_iteration``, or the older spelling
    ``local`` with ``cuda_graph_scope: full_iteration`` (TransformerConfig.__post_init__ migrates it)."""
    scope = _megatron(f).get("cuda_graph_scope")
    scopes = scope if isinstance(scope, list) else [scope]
    return _graph(f) == "full_iteration" or (_graph(f) == "local" and "full_iteration" in scopes)


@layout_rule("RA-G001", "error", "model.cuda_graph_impl", "CUDA graphs with full recompute need full-iteration graphs",
             "mcore transformer_config.py TransformerConfig.__post_init__: 'full recompute is only supported with "
             "full iteration CUDA graph' (assert)")
def graphs_with_full_recompute(f: Facts) -> Optional[Violation]:
    if _graph(f) is None or f.layout.recompute != "full" or _full_iteration(f):
        return None
    return Violation(f"cuda_graph_impl {_graph(f)} with full activation recompute: Megatron-Core asserts that full "
                     "recompute runs only with a full-iteration CUDA graph",
                     "set model.cuda_graph_impl: full_iteration, or recompute selectively "
                     "(activation_checkpointing: selective), or turn CUDA graphs off (cuda_graph_impl: none)")


@layout_rule("RA-G002", "error", "model.use_te_rng_tracker", "CUDA graphs need Transformer Engine's RNG tracker",
             "Megatron-LM megatron/training/models/gpt.py finalize(): 'Transformer engine's RNG tracker is required "
             "for cudagraphs' (assert); seed pitfall table: use_te_rng_tracker not set")
def graphs_need_te_rng_tracker(f: Facts) -> Optional[Violation]:
    if _graph(f) is None or _megatron(f).get("use_te_rng_tracker") is True:
        return None
    return Violation(f"cuda_graph_impl {_graph(f)} without use_te_rng_tracker: the model provider asserts that CUDA "
                     "graphs run with Transformer Engine's RNG tracker",
                     "set model.use_te_rng_tracker: true (and rng.te_rng_tracker: true in a Bridge config)")


@layout_rule("RA-G003", "error", "dataset.pad_to_max_length", "CUDA graphs with packed sequences need static shapes",
             "Bridge training/config.py ConfigContainer.validate: 'Offline packing with CUDA graphs requires dataset "
             "pad_to_max_length=True', packed attention graphs need offline_packing_specs.pad_cu_seqlens (raise)")
def graphs_with_packed_sequences(f: Facts) -> Optional[Violation]:
    data = f.extra.get("dataset") or {}
    packed = data.get("packed_sequence") is True or bool(data.get("offline_packing_specs"))
    if _graph(f) is None or not packed or not (_full_iteration(f) or _graph(f) == "transformer_engine"):
        return None
    specs = data.get("offline_packing_specs") if isinstance(data.get("offline_packing_specs"), dict) else {}
    if data.get("pad_to_max_length") is not True:
        return Violation(f"cuda_graph_impl {_graph(f)} with offline packed sequences: Megatron Bridge raises unless "
                         "every batch has the static width a graph captures (dataset pad_to_max_length)",
                         "set dataset.pad_to_max_length: true and dataset.offline_packing_specs.pad_cu_seqlens: true, "
                         "or turn packing or CUDA graphs off")
    if specs.get("pad_cu_seqlens") is not True:
        return Violation("CUDA graphs that capture packed attention need static sequence boundaries: Megatron Bridge "
                         "raises without offline_packing_specs.pad_cu_seqlens",
                         "set dataset.offline_packing_specs.pad_cu_seqlens: true",
                         key="dataset.offline_packing_specs.pad_cu_seqlens")
    return None


@layout_rule("RA-G004", "warning", "distributed.tp_size", "Megatron-FSDP with TP > 2 on H100",
             "seed pitfall table: FSDP + TP > 1 on H100 is a possible communication bottleneck (throughput hint)")
def fsdp_with_wide_tp_on_hopper(f: Facts) -> Optional[Violation]:
    if f.strategy != "megatron" or f.extra.get("sharding") != "full" or f.layout.tp <= 2:
        return None
    if f.hardware is None or f.hardware.arch != "hopper":
        return None
    return Violation(f"Megatron-FSDP with tp_size={f.layout.tp} on {f.hardware.name}: FSDP's all-gathers compete "
                     "with TP's all-reduces for Hopper's NVLink (FSDP pays off on GB/B-series)",
                     "prefer distributed.tp_size 1 or 2 with Megatron-FSDP on H100, or the distributed optimizer")


@layout_rule("RA-G005", "info", "model.overlap_grad_reduce", "MoE overlap_grad_reduce on H100",
             "seed pitfall table: MoE overlap_grad_reduce on H100 may hurt throughput (False in many H100 presets)")
def moe_overlap_grad_reduce_on_hopper(f: Facts) -> Optional[Violation]:
    if (f.model is None or not f.model.is_moe or f.hardware is None or f.hardware.arch != "hopper"
            or _megatron(f).get("overlap_grad_reduce") is not True):
        return None
    return Violation(f"overlap_grad_reduce with the MoE model {f.model.id} on {f.hardware.name}: it may cost "
                     "throughput (many of Megatron Bridge's H100 MoE presets turn it off)",
                     "set model.overlap_grad_reduce: false (Bridge: ddp.overlap_grad_reduce) and compare step times")


@layout_rule("RA-G006", "error", "model.cp_comm_type", "all-to-all CP splits the KV heads",
             "Transformer Engine's a2a context parallel (cp_comm_type a2a) scatters attention heads over CP; "
             "Bridge ConfigContainer.validate asserts hierarchical sizes for a2a+p2p; seed pitfall table")
def a2a_cp_within_kv_heads(f: Facts) -> Optional[Violation]:
    comm = _megatron(f).get("cp_comm_type")
    if f.model is None or f.layout.cp == 1 or comm != "a2a":
        return None
    heads = max(f.model.num_key_value_heads // f.layout.tp, 1)
    if heads % f.layout.cp == 0:
        return None
    return Violation(f"cp_comm_type a2a with cp_size={f.layout.cp}: all-to-all CP scatters the {heads} KV head(s) "
                     f"each TP rank holds over the CP ranks, and {f.layout.cp} does not divide them",
                     "set model.cp_comm_type: a2a+p2p with model.hierarchical_context_parallel_sizes (a2a within the "
                     "heads, p2p across; their product = cp_size), or p2p")


@lru_cache(maxsize=256)
def _trained_on_images(model_id: str) -> bool:
    """Whether the index's Bridge recipes train this model on image and text data (a vision-language model)."""
    from recipe_index import list_recipes

    return any(entry.model == model_id and entry.reads_images for entry in list_recipes())


@layout_rule("RA-G007", "warning", "dataset.preset", "vision-language fine-tuning reads image data",
             "seed pitfall table: VLM SFT missing image data runs but produces garbage; Bridge's VLM recipes "
             "(_sft_common_vlm) read cord_v2 / mock VLM / Energon data")
def vlm_finetune_reads_images(f: Facts) -> Optional[Violation]:
    preset = (f.extra.get("dataset") or {}).get("preset")
    if f.model is None or bundled(f) or f.mode not in ("sft", "peft") or not isinstance(preset, str):
        return None
    from recipe_index.recipes import VISION_DATASET_PRESETS

    vlm = f.model.vision_language or _trained_on_images(f.model.id)
    if not vlm or preset in VISION_DATASET_PRESETS:
        return None
    return Violation(f"{f.model.id} is a vision-language model and dataset.preset {preset} holds text only: "
                     "fine-tuning runs, but the vision tower learns nothing useful",
                     f"use an image and text dataset ({', '.join(sorted(VISION_DATASET_PRESETS))}), or a text "
                     "model for text-only fine-tuning")

"""Which layer a config change belongs to: convergence, execution or benchmark-only.

The layers are those of seeds/mbridge-recipe-recommender.md ("Configuration Layers and
Change Control"):

* **convergence**: starting checkpoint and trainable parameters, data (source, order, seeds),
  tokenizer, masking and packing, sequence length, global batch and token budget, objective,
  MoE routing and token dropping, optimizer and schedule, clipping, precision, PEFT settings.
  Changing one is a new experiment.
* **execution**: hardware, TP/PP/VP/CP/EP/ETP/DP/SP, recompute and offload, distributed
  optimizer / FSDP, overlap, fusions, attention backends, CUDA graphs, compilation,
  checkpoint I/O, MoE transport (all-to-all, DeepEP, HybridEP). Micro batch and gradient
  accumulation are execution only while the global batch is unchanged.
* **benchmark-only**: mock data, forced load balancing, disabled correctness checks,
  timing-only schedules. Their losses are not convergence evidence.

Packing, precision (the gradient reduce dtype included), forced MoE balancing, token dropping/capacity and router or auxiliary-loss
changes are never execution-only, whatever section they sit in.

Values are compared as the trainer reads them: a key a config leaves out takes its RecipeConfig
default (trainer/config.py), so writing a default out is no change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel

from trainer.config import RecipeConfig
from trainer.model_settings import DTYPES

LAYERS = ("convergence", "execution", "benchmark-only")
MISSING = "<absent>"

# Never execution-only (seed): these win over the section a key sits in.
_CONVERGENCE_WORDS = re.compile(r"pack|precision|fp8|fp16|bf16|token_drop|capacity|router|aux_loss|z_loss|"
                                r"expert_bias|seq_length|seed|shuffle|tokenizer|mask|"
                                r"grad_reduce_dtype|grad_reduce_in_fp32", re.IGNORECASE)
# Shortcuts that make a run a benchmark only.
_BENCHMARK_WORDS = re.compile(r"force_load_balanc|check_for_nan|nan_check|check_for_spiky|rerun_state_machine|"
                              r"timing|profil|exit_interval|skip_train|benchmark", re.IGNORECASE)
# Kernel choices: same math, other kernels. They win over the convergence words, whose `mask` or
# `router` would otherwise claim masked_softmax_fusion or moe_router_fusion.
_KERNEL_WORDS = re.compile(r"fusion|fused|grouped_gemm", re.IGNORECASE)
# Index metadata is not read by the trainer, except these: the FP8 recipe (current scaling, MXFP8, ...)
# is precision, and megatron_recipe is the function run_recipe.py --recipe builds the run from.
_CONVERGENCE_METADATA = {
    "metadata.precision_recipe": "the FP8 recipe is precision: never execution-only (seed)",
    "metadata.megatron_recipe": "the Megatron Bridge recipe run_recipe.py runs: another recipe is another experiment",
}
# Knobs of the hardware mapping.
_EXECUTION_WORDS = re.compile(r"dispatcher|deepep|hybridep|flex|overlap|cuda_graph|attention_backend|"
                              r"attn_implementation|offload|recompute|num_workers|pin_memory|prefetch|bucket|"
                              r"async_save|ckpt_format|backend|manual_gc", re.IGNORECASE)
# Section (or dotted prefix) -> layer, longest prefix first.
_SECTION_LAYER = (
    # The bundled trainer's fast paths (trainer/fast_paths.py): same math, other kernels; they change
    # rounding only, as an attention backend or a fused optimizer step does.
    ("model.kernels", "execution"),
    ("loss_fn.chunked", "execution"),
    ("loss_fn.chunk_size", "execution"),
    ("optimizer.foreach", "execution"),
    ("step_scheduler.local_batch_size", "execution"),
    ("step_scheduler.log_interval", "execution"),
    ("step_scheduler.val_check_interval", "execution"),
    ("step_scheduler.checkpoint_interval", "execution"),
    ("step_scheduler", "convergence"),
    ("dataloader.shuffle", "convergence"),
    ("dataloader.drop_last", "convergence"),
    ("dataloader", "execution"),
    ("distributed", "execution"),
    ("hardware", "execution"),
    ("compile", "execution"),
    ("checkpoint", "execution"),
    ("metadata", "execution"),
    # What is logged, and whether LoRA is saved merged: the trained weights are the same.
    ("logger", "execution"),
    ("peft.merge_on_save", "execution"),
    ("validation_dataset", "convergence"),
    ("dataset", "convergence"),
    ("model", "convergence"),
    ("optimizer", "convergence"),
    ("lr_scheduler", "convergence"),
    ("loss_fn", "convergence"),
    ("clip_grad_norm", "convergence"),
    ("peft", "convergence"),
    ("restore_from", "convergence"),
    ("rng", "convergence"),
    ("precision", "convergence"),
    ("recipe", "convergence"),
)
_REASONS = {
    "convergence": "changes the training semantics: a new convergence experiment",
    "execution": "changes only how the same training maps onto the hardware",
    "benchmark-only": "a benchmark shortcut: losses and checkpoints are not convergence evidence",
}


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any
    layer: str
    reason: str = ""

    def to_dict(self) -> dict:
        return {"key": self.key, "old": self.old, "new": self.new, "layer": self.layer}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested mapping (lists are values: a list is one setting)."""
    if not isinstance(data, dict):
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted))
        else:
            out[dotted] = value
    return out


def _is_mock(value: Any) -> bool:
    return isinstance(value, str) and "mock" in value.lower()


def classify(key: str, old: Any, new: Any, *, global_batch_changed: bool = False) -> tuple[str, str]:
    """(layer, reason) of one changed key."""
    leaf = key.rsplit(".", 1)[-1]
    section = key.split(".", 1)[0]
    if key in _CONVERGENCE_METADATA:
        return "convergence", _CONVERGENCE_METADATA[key]
    if section == "metadata":
        return "execution", "index metadata: not read by the trainer"
    # Only a config that trains on mock data is a benchmark; mock -> real data is a data change.
    if section in ("dataset", "validation_dataset") and _is_mock(new) and leaf in ("_target_", "preset"):
        return "benchmark-only", "mock data: the run measures throughput, its loss is not convergence evidence"
    if _BENCHMARK_WORDS.search(key):
        return "benchmark-only", _REASONS["benchmark-only"]
    if key in ("step_scheduler.local_batch_size", "step_scheduler.grad_accumulation_steps"):
        if global_batch_changed:
            return "convergence", "micro batch changed together with the global batch: the updates differ"
        return "execution", ("micro batch / accumulation with the global batch unchanged: same updates, "
                             "validate fresh loss sentinels for the new layout")
    if _KERNEL_WORDS.search(leaf):
        return "execution", "a kernel choice (fusion, grouped GEMM): " + _REASONS["execution"]
    if _CONVERGENCE_WORDS.search(leaf) or key == "precision":
        return "convergence", "never execution-only (seed): " + _REASONS["convergence"]
    if section != "distributed" and _EXECUTION_WORDS.search(leaf):
        return "execution", _REASONS["execution"]
    for prefix, layer in _SECTION_LAYER:
        if key == prefix or key.startswith(prefix + "."):
            return layer, _REASONS[layer]
    return "convergence", "unknown key: treated as convergence until shown otherwise"


def _schema_default(key: str, flat: dict[str, Any]) -> Any:
    """What the trainer reads for a key this (flattened) config leaves out: its RecipeConfig default.

    MISSING where there is none: unknown keys, required ones, a `_target_` section's kwargs (the
    callable's defaults are not in the schema), and keys of an optional section (peft, metadata, ...)
    the config does not have, because such a section is off, not filled in. A whole section left out
    is ``{}``, no settings, when it always exists, so ``step_scheduler: {}`` equals no step_scheduler.
    """
    section, _, rest = key.partition(".")
    field = RecipeConfig.model_fields.get(section)
    if field is None or field.is_required():
        return MISSING
    default = field.get_default(call_default_factory=True)
    if not rest:
        return {} if isinstance(default, BaseModel) else default
    if default is None and not _has_section(flat, section):
        return MISSING
    section_type = next((t for t in getattr(field.annotation, "__args__", (field.annotation,))
                         if isinstance(t, type) and issubclass(t, BaseModel)), None)
    if section_type is None:
        return MISSING
    for name, sub in section_type.model_fields.items():
        if rest in (name, sub.alias) and not sub.is_required():
            return sub.get_default(call_default_factory=True)
    return MISSING


def _has_section(flat: dict[str, Any], section: str) -> bool:
    return flat.get(section) is not None or any(k.startswith(section + ".") for k in flat)


def _canonical_dtype(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    name = value.removeprefix("torch.")
    return DTYPES.get(name, name)


# Keys with several spellings of one value, as the trainer reads them: `torch.bfloat16`, `bfloat16`
# and `bf16` are one model.dtype (trainer.model_settings.DTYPES).
_CANONICAL = {"model.dtype": _canonical_dtype}


def _effective(flat: dict[str, Any], key: str) -> Any:
    """The value the trainer reads for ``key``: the config's own, else the schema default."""
    if key not in flat and any(k.startswith(key + ".") for k in flat):
        return {}  # a section with settings of its own: those are compared key by key
    value = flat.get(key, MISSING)
    default = _schema_default(key, flat)
    # `step_scheduler: null` configures nothing, like `{}`; `peft: null` is already its default.
    if value is MISSING or (value is None and default == {}):
        return default
    return _CANONICAL.get(key, lambda v: v)(value)


def effective(config: dict, key: str) -> Any:
    """The value the trainer reads for a dotted key of a config: its own, else the schema default
    (MISSING where there is none)."""
    return _effective(flatten(config), key)


def diff(base: dict, new: dict) -> list[Change]:
    """Every key whose value, schema defaults applied, differs between two configs, with its layer,
    in key order. ``old``/``new`` are as written (MISSING where a config leaves the key out)."""
    left, right = flatten(base), flatten(new)
    gbs_key = "step_scheduler.global_batch_size"
    gbs_changed = _effective(left, gbs_key) != _effective(right, gbs_key)
    changes = []
    for key in sorted(set(left) | set(right)):
        if _effective(left, key) == _effective(right, key):
            continue
        old, new_value = left.get(key, MISSING), right.get(key, MISSING)
        layer, reason = classify(key, old, new_value, global_batch_changed=gbs_changed)
        changes.append(Change(key, old, new_value, layer, reason))
    return changes


def summary(changes: list[Change]) -> dict[str, int]:
    counts = {layer: 0 for layer in LAYERS}
    for change in changes:
        counts[change.layer] += 1
    return counts


def verdict(changes: list[Change]) -> Optional[str]:
    """One line for people: is the new config the same experiment?"""
    counts = summary(changes)
    if counts["convergence"]:
        return f"new convergence experiment: {counts['convergence']} convergence change(s)"
    if counts["benchmark-only"]:
        return "benchmark only: its losses are not convergence evidence"
    if counts["execution"]:
        return "same experiment, new execution mapping: validate fresh loss sentinels"
    return None

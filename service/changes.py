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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

LAYERS = ("convergence", "execution", "benchmark-only")
MISSING = "<absent>"

# Never execution-only (seed): these win over the section a key sits in.
_CONVERGENCE_WORDS = re.compile(r"pack|precision|fp8|fp16|bf16|token_drop|capacity|router|aux_loss|z_loss|"
                                r"expert_bias|seq_length|seed|shuffle|tokenizer|mask|grad_reduce", re.IGNORECASE)
# Shortcuts that make a run a benchmark only.
_BENCHMARK_WORDS = re.compile(r"force_load_balanc|check_for_nan|nan_check|check_for_spiky|rerun_state_machine|"
                              r"timing|profil|exit_interval|skip_train|benchmark", re.IGNORECASE)
# Knobs of the hardware mapping.
_EXECUTION_WORDS = re.compile(r"dispatcher|deepep|hybridep|flex|overlap|fusion|fused|cuda_graph|attention_backend|"
                              r"attn_implementation|offload|recompute|num_workers|pin_memory|prefetch|bucket|"
                              r"async_save|ckpt_format|backend", re.IGNORECASE)
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
    if section == "metadata":
        return "execution", "index metadata: not read by the trainer"
    mock = _is_mock(new) or _is_mock(old)
    if section in ("dataset", "validation_dataset") and mock and leaf in ("_target_", "preset"):
        return "benchmark-only", "mock data: the run measures throughput, its loss is not convergence evidence"
    if _BENCHMARK_WORDS.search(key):
        return "benchmark-only", _REASONS["benchmark-only"]
    if key in ("step_scheduler.local_batch_size", "step_scheduler.grad_accumulation_steps"):
        if global_batch_changed:
            return "convergence", "micro batch changed together with the global batch: the updates differ"
        return "execution", ("micro batch / accumulation with the global batch unchanged: same updates, "
                             "validate fresh loss sentinels for the new layout")
    if _CONVERGENCE_WORDS.search(leaf) or key == "precision":
        return "convergence", "never execution-only (seed): " + _REASONS["convergence"]
    if section != "distributed" and _EXECUTION_WORDS.search(leaf):
        return "execution", _REASONS["execution"]
    for prefix, layer in _SECTION_LAYER:
        if key == prefix or key.startswith(prefix + "."):
            return layer, _REASONS[layer]
    return "convergence", "unknown key: treated as convergence until shown otherwise"


def diff(base: dict, new: dict) -> list[Change]:
    """Every key that differs between two configs, with its layer, in key order."""
    left, right = flatten(base), flatten(new)
    gbs_key = "step_scheduler.global_batch_size"
    gbs_changed = left.get(gbs_key, MISSING) != right.get(gbs_key, MISSING)
    changes = []
    for key in sorted(set(left) | set(right)):
        old, new_value = left.get(key, MISSING), right.get(key, MISSING)
        if old == new_value:
            continue
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

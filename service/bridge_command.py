"""The Megatron Bridge command of an advised config: ``run_recipe.py --recipe NAME key=value ...``.

A Bridge command must run the experiment the config describes. run_recipe.py rebuilds the recipe
from its function and applies ``key=value`` overrides of the ConfigContainer, so every convergence
change and every layout key that differs from the recipe has to be one of those overrides (names
from reference/mbridge_rules.md and Bridge's docs/megatron-lm-to-megatron-bridge.md). Anything else
(a precision recipe, another HF model, a LoRA section, uneven pipeline stages, a pipeline the
recipe's layout table lacks) is not expressible: then no command is emitted and ``bridge_gaps``
says which keys are why.

Values are compared as the trainer reads them (service.changes.diff): a key the config drops
takes its schema default, and only keys whose effective value changed become overrides.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Optional

from recipe_index.recipes import RecipeEntry
from service.changes import MISSING, Change, diff, effective
from service.facts import Finding
from trainer.dotted import get_dotted as _get

# Our config keys -> Megatron Bridge ConfigContainer overrides for run_recipe.py.
BRIDGE_KEYS = {
    "distributed.tp_size": "model.tensor_model_parallel_size",
    "distributed.pp_size": "model.pipeline_model_parallel_size",
    "distributed.vp_size": "model.virtual_pipeline_model_parallel_size",
    "distributed.cp_size": "model.context_parallel_size",
    "distributed.ep_size": "model.expert_model_parallel_size",
    "distributed.etp_size": "model.expert_tensor_parallel_size",
    "distributed.sequence_parallel": "model.sequence_parallel",
    "distributed.activation_checkpointing": "model.recompute_granularity",
    # Bridge syncs the two flags from the optimizer's, so both are set.
    "distributed.use_distributed_optimizer": "ddp.use_distributed_optimizer,optimizer.use_distributed_optimizer",
    "distributed.use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "step_scheduler.local_batch_size": "train.micro_batch_size",
    "step_scheduler.global_batch_size": "train.global_batch_size",
    "step_scheduler.max_steps": "train.train_iters",
    "dataset.seq_length": "dataset.seq_length,model.seq_length",
    "optimizer.lr": "optimizer.lr",
    # Bridge's scheduler rewrites each group's weight decay every step from start/end_weight_decay.
    "optimizer.weight_decay": "optimizer.weight_decay,scheduler.start_weight_decay,scheduler.end_weight_decay",
    "optimizer.betas": "optimizer.adam_beta1,optimizer.adam_beta2",
    "lr_scheduler.schedule": "scheduler.lr_decay_style",
    "lr_scheduler.warmup_steps": "scheduler.lr_warmup_iters",
    "lr_scheduler.decay_steps": "scheduler.lr_decay_iters",
    "lr_scheduler.min_lr": "optimizer.min_lr",
    "clip_grad_norm.max_norm": "optimizer.clip_grad",
    "rng.seed": "rng.seed",
}
# Keys carried by another part of the command: the sequence length override sets the model's too
# (run_recipe syncs them), Bridge has one dataset config for training and evaluation, and the
# preset is the --dataset argument.
CARRIED_BY = {"model.seq_length": "dataset.seq_length", "validation_dataset.seq_length": "dataset.seq_length",
              "dataset.preset": "--dataset"}
# Keys whose None Bridge reads as ours does (no VP, ETP = TP, decay to the end of training), and the
# Bridge value of a None that means something else (clip_grad 0: no clipping; Megatron-FSDP off).
NULLABLE = {"distributed.vp_size", "distributed.etp_size", "lr_scheduler.decay_steps"}
NONE_MEANS = {"clip_grad_norm.max_norm": 0.0, "distributed.use_megatron_fsdp": False}
# Recipes whose layout builder knows only a fixed table of (PP, VP) pairs (reference/mbridge_rules.md 3g,
# recipes/<family>/h100/*.py; DeepSeek-V3's leaves the layout unset for another pair, which its 61
# layers cannot split evenly); keyed by the index's model id.
PIPELINE_LAYOUT_TABLES = {
    "deepseek-v3": {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)},
    "kimi-k2": {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)},
    "kimi-k25-vl": {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)},
    "olmoe-7b": {(1, 1), (2, 1), (4, 1), (2, 2)},
    "moonlight-16b": {(1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 2)},
    "glm-45v": {(4, 1), (8, 1), (16, 1)},
}
# Bridge's finetune() asserts a base checkpoint for SFT and PEFT (mbridge_rules.md 3e); the shell stops
# with this message when the variable is unset. Left unquoted on purpose: the shell expands it.
PRETRAINED_CHECKPOINT = ('checkpoint.pretrained_checkpoint="${PRETRAINED_CHECKPOINT:?set PRETRAINED_CHECKPOINT to the '
                         'Megatron checkpoint folder of the base model, as Bridge fine-tuning needs one}"')
# Megatron-FSDP's own default (no_shard) keeps whole weights; the planner's Megatron-FSDP shards all.
FSDP_SHARDING = "ddp.data_parallel_sharding_strategy=optim_grads_params"
# RA-L011's fix names the Megatron settings an uneven pipeline split needs.
_SPLIT_SETTING = re.compile(r"\b(num_layers_in_(?:first|last)_pipeline_stage|account_for_\w+_in_pipeline_split)=")


def _changed_values(changes: list[Change], config: dict) -> tuple[dict[str, Any], list[str]]:
    """(mapped key -> the value the command must set, mapped keys it cannot set) from the config's changes:
    every mapped key whose effective value differs from the recipe's; a dropped key stands for its
    schema default."""
    values, gaps = {}, []
    for change in changes:
        key = change.key
        if key not in BRIDGE_KEYS:
            continue
        value = change.new if change.new is not MISSING else effective(config, key)
        if value is MISSING:  # dropped, and no default the trainer would read: Bridge keeps the recipe's
            gaps.append(key)
        elif value is None and key not in NULLABLE:
            if key in NONE_MEANS:
                values[key] = NONE_MEANS[key]
            else:
                gaps.append(key)
        else:
            values[key] = value
    return values, gaps


def bridge_gaps(base: dict, config: dict, findings: list[Finding]) -> list[str]:
    """Keys the config needs that run_recipe.py cannot take as ``key=value`` overrides of the recipe:
    changed convergence and layout (``distributed.*``) keys without a Bridge override, mapped keys the
    config clears without a Bridge equivalent, the pipeline-split settings an RA-L011 finding asks for,
    and a pipeline the recipe's layout builder cannot place."""
    # metadata.* is recommend's own description of the config: --recipe comes from the base recipe,
    # and the precision itself is the `precision` key, so a rewritten label is no gap.
    changes = diff(base, config)
    gaps = [c.key for c in changes
            if (c.layer == "convergence" or c.key.startswith("distributed."))
            and c.key not in BRIDGE_KEYS and c.key not in CARRIED_BY and not c.key.startswith("metadata.")]
    gaps += _changed_values(changes, config)[1]
    for finding in findings:
        if finding.code == "RA-L011":
            gaps += _SPLIT_SETTING.findall(finding.fix or "") or [finding.key or "distributed.pp_size"]
    stages = _stages(config)
    table = PIPELINE_LAYOUT_TABLES.get(str(_get(config, "metadata.model")))
    placed_by_recipe = table is not None or _get(base, "distributed.pipeline_layout") is not None
    if stages != _stages(base) and placed_by_recipe and stages not in (table or ()):
        gaps.append(f"model.pipeline_model_parallel_layout (a layout string for PP {stages[0]} x VP {stages[1]}, "
                    "which the recipe's layout builder does not have and this advisor does not write)")
    return list(dict.fromkeys(gaps))


def _stages(config: dict) -> tuple[int, int]:
    return _get(config, "distributed.pp_size") or 1, _get(config, "distributed.vp_size") or 1


def _text(value: Any) -> str:
    if value is None:
        return "null"
    return ("True" if value else "False") if isinstance(value, bool) else str(value)


def bridge_overrides(base: dict, config: dict) -> list[str]:
    """`key=value` overrides of run_recipe.py for every mapped key whose value differs from the recipe's."""
    values, _ = _changed_values(diff(base, config), config)
    out = []
    for ours, value in values.items():
        theirs = BRIDGE_KEYS[ours].split(",")
        if ours == "distributed.activation_checkpointing":
            if effective(base, ours) == "full":  # Megatron-Core refuses a method or layer count without it
                out += ["model.recompute_method=null", "model.recompute_num_layers=null"]
            if value == "full":
                out += ["model.recompute_method=uniform", "model.recompute_num_layers=1"]
            value = None if value == "none" else value
        if ours == "distributed.use_megatron_fsdp" and value:
            out += ["checkpoint.ckpt_format=fsdp_dtensor", FSDP_SHARDING]  # Megatron-FSDP needs both (3d)
        if ours == "optimizer.betas":
            if isinstance(value, (list, tuple)) and len(value) == len(theirs):
                out += [f"{key}={_text(item)}" for key, item in zip(theirs, value)]
            continue
        if ours == "lr_scheduler.decay_steps" and value is not None:
            # Ours counts the steps after warmup; Megatron's lr_decay_iters is the step decay ends at.
            warmup = effective(config, "lr_scheduler.warmup_steps")
            warmup = warmup if isinstance(warmup, int) else 0
            out += [f"scheduler.lr_warmup_iters={warmup}", f"{theirs[0]}={value + warmup}"]
            continue
        out += [f"{key}={_text(value)}" for key in theirs]
    return [shlex.quote(o) for o in dict.fromkeys(out)]


def fine_tuning_checkpoint(goal: str) -> list[str]:
    """The base-checkpoint override Bridge's SFT and PEFT assert, expanded by the shell."""
    return [PRETRAINED_CHECKPOINT] if goal in ("sft", "peft") else []


def bridge_recipe_name(base: dict, recipe: Optional[RecipeEntry]) -> Optional[str]:
    """The Megatron Bridge recipe function the base recipe came from, if any."""
    return (recipe.megatron_recipe if recipe is not None else None) or _get(base, "metadata.megatron_recipe")


def gaps_note(recipe_name: str, gaps: list[str]) -> str:
    return (f"no Megatron Bridge command: run_recipe.py --recipe {recipe_name} cannot take "
            f"{', '.join(gaps)} as key=value overrides, so it would run a different experiment than this "
            "config; start from a Bridge recipe that already has them, or edit the recipe function")

"""The Megatron Bridge command of an advised config: ``run_recipe.py --recipe NAME key=value ...``.

A Bridge command must run the experiment the config describes. run_recipe.py rebuilds the recipe
from its function and applies ``key=value`` overrides of the ConfigContainer, so every convergence
change and every layout key that differs from the recipe has to be one of those overrides (names
from Megatron Bridge, and Bridge's training/config.py, recipes/common.py). Anything else
(a precision recipe, another HF model, a LoRA section added to a recipe without one, uneven pipeline
stages, a pipeline the recipe's layout table lacks, a validation sequence length other than the training
one) is not expressible: then no command is emitted and ``bridge_gaps`` says which keys are why, each with
its reason (``Gap``).

Execution settings of the bundled trainer's schema (where checkpoints go and how often, logging, data
loading, kernels, compilation) are not carried: Bridge documents no
run_recipe.py key for them, so Bridge runs its recipe's; ``uncarried`` lists the ones a config changes,
and the command says so (``uncarried_note``) rather than dropping them silently.

What Bridge runs for a key is known where the index recipe states it, or where the index always
records it (the layout, batch, steps, LR: recipe_index/megatron.py), so that leaving it out means our
schema default. The index does not record Bridge's schedule, weight decay, betas, clipping or seed
(``service.configs.bridge_keys.UNRECORDED``): a config that leaves one of those out runs Bridge's own value, and
one that writes it gets it in the command as written, even when it equals our schema default (and
service.configs.changes lists it as a convergence change from ``<Bridge recipe value>``).
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any, Optional

from recipe_index import find_bundled_model
from recipe_index.recipes import RecipeEntry
from service.configs.bridge_keys import UNRECORDED
from service.configs.change_values import same_value
from service.configs.changes import MISSING, Change, diff, effective, flatten, is_parallel_layout_key
from service.facts import Finding
from service.layouts.bridge_tables import PIPELINE_LAYOUT_TABLES, needs_unwritten_layout
from service.validate.rules.precision import fp8_recipe_of
from trainer.contract.dotted import get_dotted as _get

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
    # MixedPrecisionConfig.setup() copies its grad_reduce_in_fp32 over the DDP config's at start, so
    # both are set (as perf_recipes/_common.py's _benchmark_common does).
    "distributed.grad_reduce_dtype": "ddp.grad_reduce_in_fp32,mixed_precision.grad_reduce_in_fp32",
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
    # Megatron's OptimizerParamScheduler takes min_lr from the optimizer config (training/optim.py).
    "lr_scheduler.min_lr": "optimizer.min_lr",
    "clip_grad_norm.max_norm": "optimizer.clip_grad",
    "rng.seed": "rng.seed",
    # Bridge's LoRA/DoRA dataclasses (peft/lora.py): our rank is their dim.
    "peft.rank": "peft.dim",
    "peft.alpha": "peft.alpha",
}
# Keys carried by another part of the command: the sequence length override sets the model's too
# (run_recipe syncs them), Bridge has one dataset config for training and evaluation (so only a
# validation length equal to the training one is carried: VALIDATION_SEQ), and the preset is the
# --dataset argument.
VALIDATION_SEQ = "validation_dataset.seq_length"
CARRIED_BY = {"model.seq_length": "dataset.seq_length", VALIDATION_SEQ: "dataset.seq_length",
              "dataset.preset": "--dataset"}
# Sections the launch itself carries (the process counts, the GPUs it runs on) or that only describe
# the config (metadata: --recipe names the recipe).
_LAUNCH_SECTIONS = ("hardware.", "metadata.")
# Keys whose None Bridge reads as ours does (no VP, ETP = TP, decay to the end of training), and the
# Bridge value of a None that means something else (clip_grad 0: no clipping; Megatron-FSDP off).
NULLABLE = {"distributed.vp_size", "distributed.etp_size", "lr_scheduler.decay_steps"}
NONE_MEANS = {"clip_grad_norm.max_norm": 0.0, "distributed.use_megatron_fsdp": False}
# Our values -> Bridge's, where the types differ.
BRIDGE_VALUES = {"distributed.grad_reduce_dtype": {"fp32": True, "bf16": False}}
# Bridge's finetune() asserts a base checkpoint for SFT and PEFT (Megatron Bridge, 3e); the shell stops
# with this message when the variable is unset. Left unquoted on purpose: the shell expands it.
PRETRAINED_CHECKPOINT = ('checkpoint.pretrained_checkpoint="${PRETRAINED_CHECKPOINT:?set PRETRAINED_CHECKPOINT to the '
                         'Megatron checkpoint folder of the base model, as Bridge fine-tuning needs one}"')
# Megatron-FSDP's own default (no_shard) keeps whole weights; the planner's Megatron-FSDP shards all.
FSDP_SHARDING = "ddp.data_parallel_sharding_strategy=optim_grads_params"
# Offline packing (the index's dataset.packed_sequence: _sft_common/_peft_common) packs to a size and pads
# to a multiple the recipe sets from its own sequence length and CP; a command that moves either sets
# both, as the recipes do and as run_recipe.py's sync_offline_packing_alignment() recomputes them
# (pinned Bridge 067f987: offline_packing_specs; older checkouts spelt it packed_sequence_specs).
PACKING_SPECS = "dataset.offline_packing_specs"
# RA-L011's fix names the Megatron settings an uneven pipeline split needs.
_SPLIT_SETTING = re.compile(r"\b(num_layers_in_(?:first|last)_pipeline_stage|account_for_\w+_in_pipeline_split)=")

WARMUP, DECAY = "lr_scheduler.warmup_steps", "lr_scheduler.decay_steps"


class Gap(str):
    """A config key the Bridge command cannot carry; ``reason`` says why when it is not simply that
    run_recipe.py has no ``key=value`` override for it."""

    reason: Optional[str]

    def __new__(cls, key: str, reason: Optional[str] = None) -> "Gap":
        gap = super().__new__(cls, key)
        gap.reason = reason
        return gap


def _dropped(key: str, recipe_value: Any) -> Gap:
    """A key the config leaves out (a whole-section override, say) with no default Bridge can take."""
    return Gap(key, f"the config leaves it out where the recipe has {_text(recipe_value)}, so there is no value to "
                    f"give Bridge (which would keep {_text(recipe_value)}); write it back (--{key} "
                    f"{_text(recipe_value)}, or keep it in the section you override) or set the value you want")


_DECAY_WITHOUT_WARMUP = (
    "it counts the steps after the warmup, Bridge's scheduler.lr_decay_iters the steps from 0, and the "
    "config does not state lr_scheduler.warmup_steps (Bridge runs its recipe's warmup, which the index does "
    "not record); add --lr_scheduler.warmup_steps N with the warmup you want")
_PRESET_MIXED_PRECISION = (
    "Bridge's library recipes name a mixed-precision preset (mixed_precision: bf16_mixed), whose "
    "grad_reduce_in_fp32 MixedPrecisionConfig.setup() copies over ddp.grad_reduce_in_fp32 at start, and "
    "run_recipe.py cannot override a field of a preset name; set it in the recipe function "
    "(cfg.mixed_precision = get_mixed_precision_config(...) with grad_reduce_in_fp32=False), or start from "
    "a Bridge performance recipe")


def _mixed_precision_is_a_config(base: dict) -> bool:
    """Bridge's performance recipes set ``cfg.mixed_precision = _perf_precision(...)``, a config whose
    fields take overrides; library recipes leave the preset's name (recipes/common.py)."""
    return _get(base, "metadata.kind") == "benchmark"


def _command_values(base: dict, config: dict) -> tuple[dict[str, Any], list[Gap]]:
    """(mapped key -> the value the command must set, mapped keys it cannot set).

    Where Bridge's value is known (the base states the key, or the index always records it), a key
    whose value as the trainer reads it differs is set; a dropped one stands for its schema default.
    Where it is not (``UNRECORDED``), a value the config writes is set as written."""
    left, right = flatten(base), flatten(config)
    values: dict[str, Any] = {}
    gaps: list[Gap] = []
    for key in BRIDGE_KEYS:
        written = right.get(key, MISSING)
        if key in UNRECORDED and key not in left:
            if written is MISSING:
                continue  # the config does not state it: Bridge's recipe value runs, as it should
            value = written
        else:
            if same_value(effective(base, key), effective(config, key)):
                continue
            value = written if written is not MISSING else effective(config, key)
            if value is MISSING or (written is MISSING and value is None and key not in NULLABLE | NONE_MEANS.keys()):
                # Dropped, and no default Bridge can take: Bridge would keep the recipe's value.
                gaps.append(_dropped(key, left.get(key, MISSING)))
                continue
        if key.startswith("peft.") and not isinstance(base.get("peft"), dict):
            gaps.append(Gap(key))  # the recipe has no LoRA to set it on
        elif key == "distributed.grad_reduce_dtype" and not _mixed_precision_is_a_config(base):
            gaps.append(Gap(key, _PRESET_MIXED_PRECISION))
        elif value is None and key not in NULLABLE:
            if key in NONE_MEANS:
                values[key] = NONE_MEANS[key]
            else:
                gaps.append(Gap(key, "the config sets it to null, which has no Bridge value; set one"))
        elif key == DECAY and value is not None and _warmup(base, config) is None:
            gaps.append(Gap(key, _DECAY_WITHOUT_WARMUP))
        elif key == "peft.alpha" and isinstance(value, float) and not value.is_integer():
            gaps.append(Gap(key, f"Bridge's LoRA alpha is an int (peft/lora.py: alpha: int = 32), so {value:g} "
                                 f"would fail at start-up; use a whole number, e.g. --peft.alpha {round(value)}"))
        else:
            values[key] = value
    return values, gaps


def _warmup(base: dict, config: dict) -> Optional[int]:
    """The warmup the config trains with, where it is known: the config's own, else (a warmup the base
    states and the config drops) the schema's; None when Bridge's unrecorded recipe warmup runs."""
    if _get(config, WARMUP) is None and _get(base, WARMUP) is None:
        return None
    warmup = effective(config, WARMUP)
    return warmup if isinstance(warmup, int) else None


def bridge_command(base: dict, config: dict, findings: list[Finding]) -> tuple[list[str], list[Gap]]:
    """(``bridge_overrides``, ``bridge_gaps``) from one reading of the mapped keys (``_command_values``);
    no overrides where there are gaps, since then there is no command."""
    values, value_gaps = _command_values(base, config)
    gaps = _gaps(base, config, findings, value_gaps)
    return ([] if gaps else _overrides(base, config, values)), gaps


def bridge_gaps(base: dict, config: dict, findings: list[Finding]) -> list[Gap]:
    """Keys the config needs that run_recipe.py cannot take as ``key=value`` overrides of the recipe:
    changed convergence and layout (``distributed.*``, Bridge's own ``model.*`` parallel sizes) keys
    without a Bridge override, mapped keys the config clears or states in a form Bridge cannot take, a
    dataset preset the config drops, a validation sequence length other than the training one, the
    pipeline-split settings an RA-L011 finding asks for, and a pipeline the recipe's layout builder
    cannot place."""
    return _gaps(base, config, findings, _command_values(base, config)[1])


def _gaps(base: dict, config: dict, findings: list[Finding], value_gaps: list[Gap]) -> list[Gap]:
    """bridge_gaps, given the gaps of the mapped keys (``_command_values``)."""
    # metadata.* is recommend's own description of the config: --recipe comes from the base recipe,
    # and the precision itself is the `precision` key, so a rewritten label is no gap.
    left = flatten(base)
    gaps: list[Gap] = []
    stages, model = _stages(config), str(_get(config, "metadata.model"))
    table = PIPELINE_LAYOUT_TABLES.get(model)
    card = find_bundled_model(model) if table is not None else None
    # The library recipe's builder places this pipeline itself (a pair of its table, or no pipeline), so
    # the config's pipeline_layout marker, added or dropped, is nothing the command has to carry.
    builder_places = card is not None and not needs_unwritten_layout(model, card.num_hidden_layers, *stages)
    for change in diff(base, config):
        if change.key == "distributed.pipeline_layout" and builder_places:
            continue
        if change.key == "dataset.preset" and change.new in (MISSING, None):
            # --dataset would name the recipe's (or the goal's) preset, not the config's none.
            gaps.append(_dropped(change.key, change.old) if change.new is MISSING else
                        Gap(change.key, f"the config sets no preset, so there is no dataset to give run_recipe.py "
                                        f"--dataset; set one (the recipe has {_text(change.old)})"))
        elif ((change.layer == "convergence" or change.key.startswith("distributed.")
               or is_parallel_layout_key(change.key))
              and change.key not in BRIDGE_KEYS and change.key not in CARRIED_BY
              and not change.key.startswith("metadata.")):
            dropped = change.new is MISSING and change.key in left
            gaps.append(_dropped(change.key, change.old) if dropped else Gap(change.key))
    gaps += value_gaps
    gaps += _validation_length_gap(base, config)
    gaps += _fp8_scaling_gap(base, config)
    for finding in findings:
        if finding.code == "RA-L011":
            settings = _SPLIT_SETTING.findall(finding.fix or "") or [finding.key or "distributed.pp_size"]
            gaps += [Gap(setting) for setting in settings]
    placed_by_recipe = table is not None or _get(base, "distributed.pipeline_layout") is not None
    if stages != _stages(base) and placed_by_recipe and not builder_places and stages[0] > 1:
        gaps.append(Gap(f"model.pipeline_model_parallel_layout (a layout string for PP {stages[0]} x VP {stages[1]}, "
                        "which the recipe's layout builder does not have and this advisor does not write)"))
    return list(dict.fromkeys(gaps))


def _fp8_scaling_gap(base: dict, config: dict) -> list[Gap]:
    """Another FP8 scaling (fp8mx for the recipe's fp8cs, say) at the same ``precision: fp8``: Bridge takes the
    scaling from the recipe's mixed-precision preset, which run_recipe.py cannot swap by ``key=value``."""
    old, new = fp8_recipe_of(base), fp8_recipe_of(config)
    if new is None or old is None or old == new:
        return []
    why = (f"the recipe runs {old} and the config asks for {new}; Bridge takes the FP8 scaling from the recipe's "
           f"mixed-precision preset, which run_recipe.py cannot override: run a recipe of this model that trains in "
           f"{new} (a *_{new} variant where Bridge has one), or write a recipe function with that preset")
    return [Gap("metadata.precision_recipe", why)]


def _validation_length_gap(base: dict, config: dict) -> list[Gap]:
    """A validation sequence length other than the training one: Bridge builds training and evaluation
    data from one dataset config (model.seq_length == dataset.seq_length is asserted, Megatron Bridge, 3d),
    and Bridge documents no evaluation length key, so it would evaluate
    at the training length."""
    validation = _get(config, VALIDATION_SEQ)
    training = _get(config, "dataset.seq_length") or _get(base, "dataset.seq_length")
    if validation is None or validation == training:
        return []
    return [Gap(VALIDATION_SEQ, f"Bridge has one dataset config for training and evaluation, so it would evaluate "
                                f"at the training length {_text(training)}, not {_text(validation)}, and run_recipe.py "
                                f"has no override for a separate evaluation length; drop --{VALIDATION_SEQ} or set "
                                f"it to {_text(training)}")]


def uncarried(base: dict, config: dict) -> list[Change]:
    """The config's changes from the recipe that a Bridge command (one without gaps) does not carry:
    keys with no override that are no gap either, i.e. execution (or benchmark) settings such as the
    checkpoint folder and intervals, logging, data loading, kernels, compilation. Bridge runs its
    recipe's value for each."""
    # distributed.pipeline_layout only marks who places the layers: with a command, the recipe's builder
    # does (a changed marker the builder cannot follow is a gap, and there is no command).
    return [change for change in diff(base, config)
            if change.key not in BRIDGE_KEYS and change.key not in CARRIED_BY
            and change.key != "distributed.pipeline_layout" and not change.key.startswith(_LAUNCH_SECTIONS)]


def uncarried_note(base: dict, config: dict) -> str:
    """One comment line naming the uncarried changes with the config's values ("" when none); values
    are written as Python literals, so a newline in one cannot end the comment."""
    changes = uncarried(base, config)
    if not changes:
        return ""
    items = ", ".join(f"{change.key} ({_shown(change.new)})" + ("" if change.layer == "execution" else
                                                               f" [{change.layer}]") for change in changes)
    line = (f"Not carried: {items}. run_recipe.py gets no override for these (the advisor's Bridge reference "
            "documents no key for them), so Bridge runs the recipe's values; set them in the recipe function or "
            "with Bridge's own key=value overrides if they matter to you.")
    return line.replace("\r", "\\r").replace("\n", "\\n")


def _shown(value: Any) -> str:
    if value is MISSING:
        return "left out"
    return repr(value) if isinstance(value, str) else _text(value)


def _stages(config: dict) -> tuple[int, int]:
    return _get(config, "distributed.pp_size") or 1, _get(config, "distributed.vp_size") or 1


def _text(value: Any) -> str:
    if value is None:
        return "null"
    return ("True" if value else "False") if isinstance(value, bool) else str(value)


def _packing(config: dict) -> list[str]:
    """Offline packing's size and pad multiple for the config's sequence length and layout:
    lcm(2*CP when CP > 1, TP*CP with SP and TP > 1) (Megatron Bridge, 2, the runner's post-processing)."""
    seq = _get(config, "dataset.seq_length")
    tp, cp = _get(config, "distributed.tp_size") or 1, _get(config, "distributed.cp_size") or 1
    pad = math.lcm(2 * cp if cp > 1 else 1, tp * cp if _get(config, "distributed.sequence_parallel") and tp > 1 else 1)
    return ([f"{PACKING_SPECS}.packed_sequence_size={seq}"] if seq else []) + [f"{PACKING_SPECS}.pad_seq_to_mult={pad}"]


def bridge_overrides(base: dict, config: dict) -> list[str]:
    """`key=value` overrides of run_recipe.py for every mapped key whose value Bridge would not run
    otherwise (see ``_command_values``); never a value the config does not state or imply."""
    return _overrides(base, config, _command_values(base, config)[0])


def _overrides(base: dict, config: dict, values: dict[str, Any]) -> list[str]:
    """bridge_overrides, given the values the command must set (``_command_values``)."""
    out = []
    for ours, value in values.items():
        theirs = BRIDGE_KEYS[ours].split(",")
        if ours in BRIDGE_VALUES:
            value = BRIDGE_VALUES[ours].get(value, value)
        if ours == "peft.alpha" and isinstance(value, float) and value.is_integer():
            value = int(value)  # Bridge's LoRA alpha is an int
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
        if ours == DECAY and value is not None:
            # Ours counts the steps after warmup; Megatron's lr_decay_iters is the step decay ends at,
            # so the warmup it is counted from is pinned too (_command_values has made sure it is known).
            warmup = _warmup(base, config)
            out += [f"scheduler.lr_warmup_iters={warmup}", f"{theirs[0]}={value + warmup}"]
            continue
        out += [f"{key}={_text(value)}" for key in theirs]
    if _get(config, "dataset.packed_sequence"):
        out += [spec for spec in _packing(config) if spec not in _packing(base)]
    return [shlex.quote(o) for o in dict.fromkeys(out)]


def fine_tuning_checkpoint(goal: str) -> list[str]:
    """The base-checkpoint override Bridge's SFT and PEFT assert, expanded by the shell."""
    return [PRETRAINED_CHECKPOINT] if goal in ("sft", "peft") else []


def bridge_recipe_name(base: dict, recipe: Optional[RecipeEntry]) -> Optional[str]:
    """The Megatron Bridge recipe function the base recipe came from, if any."""
    return (recipe.megatron_recipe if recipe is not None else None) or _get(base, "metadata.megatron_recipe")


def gaps_note(recipe_name: str, gaps: list[str]) -> str:
    """Why there is no Bridge command: the keys run_recipe.py has no override for, then each other
    gap with its own reason and fix."""
    unmapped = [g for g in gaps if not getattr(g, "reason", None)]
    parts = [f"run_recipe.py --recipe {recipe_name} cannot take {', '.join(unmapped)} as key=value overrides "
             "(start from a Bridge recipe that already has them, or edit the recipe function)"] if unmapped else []
    parts += [f"{gap}: {gap.reason}" for gap in gaps if getattr(gap, "reason", None)]
    return ("no Megatron Bridge command, because it would run a different experiment than this config: "
            + "; ".join(parts))

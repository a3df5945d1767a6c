"""Launch commands for an advised config (templates/launch/*.j2).

Single-node torchrun, multi-node torchrun (c10d), a Slurm sbatch script, and Megatron Bridge's
``scripts/training/run_recipe.py --recipe NAME --dataset PRESET key=value ...``.

A Bridge command must run the experiment the config describes. run_recipe.py rebuilds the
recipe from its function and applies ``key=value`` overrides of the ConfigContainer, so every
convergence change and every layout key that differs from the recipe has to be one of those
overrides (names from reference/mbridge_rules.md and the seed's override examples). Anything
else (a precision recipe, another HF model, a LoRA section, uneven pipeline stages) is not
expressible: then no Bridge command is emitted and ``bridge_gaps`` says which keys are why.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from recipe_index.recipes import RecipeEntry
from service.changes import diff
from service.facts import Finding
from trainer.dotted import get_dotted as _get

TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "launch"
RENDEZVOUS_PORT = 29500
# Megatron Bridge's default dataset presets by goal (seed, "First Answer Checklist").
DATASET_PRESET = {"pretrain": "mock", "sft": "squad", "peft": "squad"}
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
    "distributed.use_distributed_optimizer": "ddp.use_distributed_optimizer",
    "distributed.use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "step_scheduler.local_batch_size": "train.micro_batch_size",
    "step_scheduler.global_batch_size": "train.global_batch_size",
    "step_scheduler.max_steps": "train.train_iters",
    "dataset.seq_length": "dataset.seq_length",
    "optimizer.lr": "optimizer.lr",
    # Megatron Bridge's optimizer, scheduler and RNG settings (docs/megatron-lm-to-megatron-bridge.md).
    "optimizer.weight_decay": "optimizer.weight_decay",
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
# Recipes whose layout builder knows only a fixed table of (PP, VP) pairs and raises on any other
# (reference/mbridge_rules.md 3g, recipes/<family>/h100/*.py); keyed by the index's model id. A pair the
# model's own index recipes use (the performance recipes' explicit layouts) is known too.
PIPELINE_LAYOUT_TABLES = {
    "deepseek-v3": {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)},
    "kimi-k2": {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)},
    "kimi-k25-vl": {(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)},
    "olmoe-7b": {(1, 1), (2, 1), (4, 1), (2, 2)},
    "moonlight-16b": {(1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 2)},
}
# Bridge's PEFT asserts a base checkpoint (mbridge_rules.md 3e); the shell stops with this message
# when the variable is unset. Left unquoted on purpose: the shell expands it.
PRETRAINED_CHECKPOINT = ('checkpoint.pretrained_checkpoint="${PRETRAINED_CHECKPOINT:?set PRETRAINED_CHECKPOINT to the '
                         'Megatron checkpoint folder of the base model, as Bridge PEFT needs one}"')
# Megatron-FSDP's own default (no_shard) keeps whole weights; the planner's Megatron-FSDP shards all.
FSDP_SHARDING = "ddp.data_parallel_sharding_strategy=optim_grads_params"
# RA-L011's fix names the Megatron settings an uneven pipeline split needs.
_SPLIT_SETTING = re.compile(r"\b(num_layers_in_(?:first|last)_pipeline_stage|account_for_\w+_in_pipeline_split)=")


def _environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=False,
                       keep_trailing_newline=True, trim_blocks=False)


def bridge_gaps(base: dict, config: dict, findings: list[Finding]) -> list[str]:
    """Keys the config needs that run_recipe.py cannot take as ``key=value`` overrides of the recipe:
    changed convergence and layout (``distributed.*``) keys without a Bridge override, and the
    pipeline-split settings an RA-L011 finding asks for."""
    # metadata.* is recommend's own description of the config: --recipe comes from the base recipe,
    # and the precision itself is the `precision` key, so a rewritten label is no gap.
    gaps = [c.key for c in diff(base, config)
            if (c.layer == "convergence" or c.key.startswith("distributed."))
            and c.key not in BRIDGE_KEYS and c.key not in CARRIED_BY and not c.key.startswith("metadata.")]
    for finding in findings:
        if finding.code == "RA-L011":
            gaps += _SPLIT_SETTING.findall(finding.fix or "") or [finding.key or "distributed.pp_size"]
    stages = _stages(config)
    if stages != _stages(base) and stages not in _layout_table(config):
        gaps.append(f"model.pipeline_model_parallel_layout (the recipe's layout table has no PP {stages[0]} x "
                    f"VP {stages[1]})")
    return list(dict.fromkeys(gaps))


def _stages(config: dict) -> tuple[int, int]:
    return _get(config, "distributed.pp_size") or 1, _get(config, "distributed.vp_size") or 1


def _layout_table(config: dict) -> set:
    """The (PP, VP) pairs the recipe's layout builder accepts; every pair for a model without a table."""
    table = PIPELINE_LAYOUT_TABLES.get(str(_get(config, "metadata.model")))
    if table is None:
        return {_stages(config)}
    return table


def bridge_overrides(base: dict, config: dict) -> list[str]:
    """`key=value` overrides of run_recipe.py for every mapped key that differs from the recipe."""
    out = []
    for ours, theirs in BRIDGE_KEYS.items():
        old, new = _get(base, ours), _get(config, ours)
        if old == new:
            continue
        if new is None:  # the config drops a key the recipe sets: the engine default, as in the config
            out.append(f"{theirs}=False" if isinstance(old, bool) else f"{theirs}=null")
            continue
        if ours == "distributed.activation_checkpointing":
            if old == "full":  # Megatron-Core refuses a method or layer count without full recompute
                out += ["model.recompute_method=null", "model.recompute_num_layers=null"]
            if new == "none":
                out.append(f"{theirs}=null")
                continue
            if new == "full":
                out += ["model.recompute_method=uniform", "model.recompute_num_layers=1"]
        if ours == "distributed.use_megatron_fsdp" and new:
            out.append("checkpoint.ckpt_format=fsdp_dtensor")  # Megatron-FSDP needs it (mbridge_rules 3d)
            out.append(FSDP_SHARDING)
        if "," in theirs:  # one of ours, several of theirs (Adam's betas)
            if not isinstance(new, (list, tuple)) or len(new) != len(theirs.split(",")):
                continue  # an unusable value: validate reports it
            out += [f"{key}={item}" for key, item in zip(theirs.split(","), new)]
            continue
        value = str(new) if not isinstance(new, bool) else ("True" if new else "False")
        out.append(f"{theirs}={value}")
        if ours == "dataset.seq_length":
            out.append(f"model.seq_length={value}")
    return [shlex.quote(o) for o in out]


def bridge_recipe_name(base: dict, recipe: Optional[RecipeEntry]) -> Optional[str]:
    """The Megatron Bridge recipe function the base recipe came from, if any."""
    return (recipe.megatron_recipe if recipe is not None else None) or _get(base, "metadata.megatron_recipe")


def gaps_note(recipe_name: str, gaps: list[str]) -> str:
    return (f"no Megatron Bridge command: run_recipe.py --recipe {recipe_name} cannot take "
            f"{', '.join(gaps)} as key=value overrides, so it would run a different experiment than this "
            "config; start from a Bridge recipe that already has them, or edit the recipe function")


def render_commands(config_path: str, config: dict, base: dict, request, engine: str,
                    recipe: Optional[RecipeEntry], gaps: tuple[str, ...] = ()) -> dict[str, str]:
    """Launch commands from templates/launch: single-node torchrun, multi-node torchrun (c10d),
    a Slurm sbatch script, and Megatron Bridge's run_recipe.py with key=value overrides. With
    ``gaps`` (see bridge_gaps) there is no Bridge command, and no torchrun of it."""
    env = _environment()
    req = request
    common = {"nproc_per_node": req.gpus_per_node, "num_nodes": req.num_nodes, "port": RENDEZVOUS_PORT,
              "job_name": shlex.quote(str(_get(config, "metadata.name") or "recipe-advisor")),
              "config": shlex.quote(config_path)}
    bridge_recipe = None if gaps else bridge_recipe_name(base, recipe)
    bridge = None
    if bridge_recipe:
        dataset = shlex.quote(str(_get(config, "dataset.preset") or DATASET_PRESET[req.goal]))
        overrides = bridge_overrides(base, config)
        if config.get("peft") and not _get(config, "checkpoint.pretrained_checkpoint"):
            overrides.append(PRETRAINED_CHECKPOINT)
        bridge = (shlex.quote(bridge_recipe), dataset, overrides)
    if engine == "bundled":
        program = f"-m trainer {shlex.quote(config_path)}"
    elif bridge is not None:
        recipe_name, dataset, overrides = bridge
        program = " ".join(["scripts/training/run_recipe.py", "--recipe", recipe_name, "--dataset", dataset, *overrides])
    else:
        program = None
    commands: dict[str, str] = {}
    if program is not None:
        if req.num_nodes == 1:
            commands["torchrun"] = env.get_template("torchrun.sh.j2").render(
                bundled=engine == "bundled", program=program, **common)
        else:
            commands["torchrun_multinode"] = env.get_template("torchrun_multinode.sh.j2").render(
                program=program, **common)
        commands["sbatch"] = env.get_template("sbatch.sh.j2").render(
            program=program, time_limit="04:00:00", script_name="train.sbatch",
            cpu=req.hardware.arch == "cpu", **common)
    if bridge is not None:
        commands["megatron_bridge"] = env.get_template("megatron_bridge.sh.j2").render(
            recipe=bridge[0], dataset=bridge[1], overrides=bridge[2], **common)
    return commands

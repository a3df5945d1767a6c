"""The advised recipe as a NeMo AutoModel YAML (``recommend --emit automodel``) and the command that runs it.

The planner ranks layouts for the engine asked for; AutoModel's mesh has no virtual pipeline stages and no
expert tensor parallelism, and its tensor-parallel plans shard the KV heads, so the first fitting layout
without those is the one written. The convergence contract (global batch, learning rate, steps, sequence
length) is the advised config's. The YAML names AutoModel's recipe class and components by their published
``_target_`` names (service/validate/automodel/targets.py) and is validated in AutoModel's dialect.
"""

from __future__ import annotations

import shlex

import yaml

from service.configs.changes import MISSING, Change, classify, effective, flatten
from service.plan.types import Plan, PlannedLayout
from service.recommend.launch_commands import RENDEZVOUS_PORT
from service.validate.automodel.schema import LLM_RECIPE
from trainer.contract.dotted import get_dotted

EMIT_CHOICES = ("recipe-advisor", "automodel")
_AUTO_MODEL = "nemo_automodel.NeMoAutoModelForCausalLM"
_DATALOADER = "torchdata.stateful_dataloader.StatefulDataLoader"
_COLLATER = "nemo_automodel.components.datasets.utils.default_collater"
_SQUAD = "nemo_automodel.components.datasets.llm.squad.make_squad_dataset"
_MOCK = "nemo_automodel.components.datasets.llm.mock_iterable_dataset.MockIterableDataset"
LORA_RANK, LORA_ALPHA = 8, 32


def automodel_runs(row: PlannedLayout, model) -> bool:
    """Whether AutoModel's mesh takes this layout: no VP, no ETP, TP dividing the attention and KV heads."""
    lay = row.layout
    if (lay.vp or 1) > 1 or lay.etp > 1:
        return False
    heads_split = model.num_attention_heads % lay.tp == 0
    kv_split = model.architecture.startswith("mla") or model.num_key_value_heads % lay.tp == 0
    return heads_split and kv_split


# How many of the planner's fitting layouts AutoModel's memory fit is tried on, best first.
MAX_CANDIDATES = 24


def automodel_candidates(plan: Plan, model) -> list[PlannedLayout]:
    """The best-ranked fitting layouts AutoModel runs (empty when the plan holds none)."""
    return [row for row in plan.fitting if automodel_runs(row, model)][:MAX_CANDIDATES]


def launch_command(config_path: str, gpus_per_node: int, num_nodes: int) -> str:
    """AutoModel's CLI on one node; torchrun of its app module on each node of a multi-node run."""
    path = shlex.quote(config_path)
    if num_nodes == 1:
        return f"automodel {path} --nproc-per-node {gpus_per_node}"
    return (f"torchrun --nnodes={num_nodes} --nproc-per-node={gpus_per_node} --rdzv-backend=c10d "
            f"--rdzv-endpoint=\"${{MASTER_ADDR:?set MASTER_ADDR to the first node}}:{RENDEZVOUS_PORT}\" "
            f"-m nemo_automodel.cli.app {path}")


def _model_section(hf_id: str, goal: str) -> dict:
    if goal == "pretrain":  # random init from the architecture
        return {"_target_": f"{_AUTO_MODEL}.from_config",
                "config": {"_target_": "transformers.AutoConfig.from_pretrained",
                           "pretrained_model_name_or_path": hf_id},
                "torch_dtype": "bf16"}
    return {"_target_": f"{_AUTO_MODEL}.from_pretrained", "pretrained_model_name_or_path": hf_id,
            "torch_dtype": "bf16"}


def _dataset(goal: str, seq_length: int, vocab_size: int, samples: int) -> dict:
    if goal == "pretrain":
        return {"_target_": _MOCK, "vocab_size": vocab_size, "seq_len": seq_length, "num_samples": samples}
    return {"_target_": _SQUAD, "dataset_name": "rajpurkar/squad", "split": "train", "seq_length": seq_length}


def _loss(row: PlannedLayout) -> str:
    """AutoModel's fused linear cross-entropy (no full logits) unless the LM head is tensor-parallel."""
    if row.layout.tp > 1:
        return "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy"
    return "nemo_automodel.components.loss.linear_ce.FusedLinearCrossEntropy"


def _distributed(row: PlannedLayout) -> dict:
    lay = row.layout
    section = {"strategy": "fsdp2", "dp_size": None, "tp_size": lay.tp, "cp_size": lay.cp, "pp_size": lay.pp,
               "ep_size": lay.ep, "sequence_parallel": bool(lay.sp and lay.tp > 1),
               "activation_checkpointing": lay.recompute != "none"}
    if lay.pp > 1:
        section["pipeline"] = {"pp_schedule": "1f1b", "pp_microbatch_size": lay.micro_batch_size}
    return section


# AutoModel's example recipes save every 500 steps on their long runs (the DeepSeek-V3, Moonlight and
# DeepSeek-V4 pretrain recipes, 9,500 steps; the agent fine-tunes, 2,000 steps) and halfway through
# their short fine-tunes (50 of 100 steps): a long run keeps that cadence, a short one saves at its middle.
CKPT_EVERY_STEPS = 500


def checkpoint_cadence(max_steps: int) -> int:
    """``step_scheduler.ckpt_every_steps`` for a run of ``max_steps``, as AutoModel's own recipes space it."""
    return min(CKPT_EVERY_STEPS, max(1, max_steps // 2))


def _weight_decay(config: dict) -> float:
    """The weight decay the advised config trains with: its own, else its optimizer's default (AdamW's 0.01),
    which AutoModel does not share (its recipes write the value)."""
    value = effective(config, "optimizer.weight_decay")
    return 0.0 if value is MISSING or value is None else value


def automodel_config(config: dict, model, goal: str, row: PlannedLayout, seq_length: int) -> dict:
    """The AutoModel recipe of an advised config on the chosen layout."""
    gbs = get_dotted(config, "step_scheduler.global_batch_size")
    max_steps = get_dotted(config, "step_scheduler.max_steps") or 100
    recipe: dict = {
        "recipe": LLM_RECIPE,
        "step_scheduler": {"global_batch_size": gbs, "local_batch_size": row.layout.micro_batch_size,
                           "ckpt_every_steps": checkpoint_cadence(max_steps), "max_steps": max_steps,
                           "num_epochs": 1},
        "dist_env": {"backend": "nccl", "timeout_minutes": 10},
        "rng": {"_target_": "nemo_automodel.components.training.rng.StatefulRNG", "seed": 1234, "ranked": True},
        "model": _model_section(model.hf_id or model.id, goal),
        "distributed": _distributed(row),
        "loss_fn": {"_target_": _loss(row)},
        "dataset": _dataset(goal, seq_length, model.vocab_size, gbs * max_steps),
        "packed_sequence": {"packed_sequence_size": 0},
        "dataloader": {"_target_": _DATALOADER, "collate_fn": {"_target_": _COLLATER}, "shuffle": goal != "pretrain"},
        "optimizer": {"_target_": get_dotted(config, "optimizer._target_") or "torch.optim.AdamW",
                      "lr": get_dotted(config, "optimizer.lr") or 1.0e-5,
                      "weight_decay": _weight_decay(config)},
        "lr_scheduler": {"lr_decay_style": "cosine", "lr_warmup_steps": min(10, max_steps // 10),
                         "min_lr": float(f"{(get_dotted(config, 'optimizer.lr') or 1.0e-5) / 10:.3g}")},
        "checkpoint": {"enabled": True, "checkpoint_dir": "checkpoints/", "model_save_format": "safetensors",
                       "save_consolidated": True},
    }
    if goal == "pretrain":
        del recipe["dataloader"]["collate_fn"]
    if goal == "peft":
        recipe["peft"] = {"_target_": "nemo_automodel.components._peft.lora.PeftConfig", "match_all_linear": True,
                          "dim": LORA_RANK, "alpha": LORA_ALPHA}
    return recipe


def automodel_yaml(recipe: dict, command: str, title: str, notes: list[str]) -> str:
    """The YAML with a header whose launch line is what ``validate`` reads the world from."""
    header = [f"# Generated by `recipe-advisor recommend --emit automodel`: {title}.",
              "# To run this recipe (NeMo AutoModel):", f"#   {command}"]
    header += [f"# note: {n}" for n in notes]
    return "\n".join(header) + "\n" + yaml.safe_dump(recipe, sort_keys=False, default_flow_style=False)


# The keys an AutoModel recipe writes under the advised config's own dotted names: an --emit automodel answer's
# change list compares the base recipe with the AutoModel YAML on these, so it lists what that YAML says.
SHARED_KEYS = ("distributed.strategy", "distributed.tp_size", "distributed.cp_size", "distributed.pp_size",
               "distributed.ep_size", "distributed.sequence_parallel", "step_scheduler.global_batch_size",
               "step_scheduler.local_batch_size", "step_scheduler.max_steps", "optimizer._target_", "optimizer.lr",
               "optimizer.weight_decay")


def automodel_changes(base: dict, recipe: dict, advised: list[Change]) -> list[Change]:
    """The base recipe's values against the AutoModel YAML's on the keys both write, and the advised hardware
    changes (the launch command carries the GPU count): no key the YAML does not write (a Megatron knob)."""
    changes = [c for c in advised if c.key.startswith("hardware.")]
    written = flatten(recipe)
    for key in SHARED_KEYS:
        old, new = effective(base, key), written.get(key, MISSING)
        if new is not MISSING and old != new:
            layer, reason = classify(key, old, new)
            changes.append(Change(key, old, new, layer, reason))
    return sorted(changes, key=lambda c: c.key)


def as_automodel(rec, config_path: str, base: dict | None = None):
    """The recommendation with its config written as an AutoModel recipe on the best layout that validates in
    AutoModel's dialect with no error, and AutoModel's launch command; None when no layout does. ``base``: the
    base recipe's config, which the change list compares the AutoModel YAML with."""
    from dataclasses import replace

    from service.plan.sources import REPLANNED, LayoutSource
    from service.validate.automodel.dialect import AUTOMODEL
    from service.validate.document import validate_text

    if rec.errors:
        return rec  # the callers refuse it and print its errors (an override the config cannot take)
    req = rec.plan.request
    command = launch_command(config_path, req.gpus_per_node, req.num_nodes)
    seq_length = get_dotted(rec.config, "dataset.seq_length") or req.seq_length
    title = f"{rec.model.id} {rec.goal} on {req.world_size} x {req.hardware.name}"
    # The layout recommend chose (a tuned or kept recipe layout) first, when AutoModel runs it.
    chosen = [rec.best] if automodel_runs(rec.best, rec.model) else []
    candidates = chosen + [row for row in automodel_candidates(rec.plan, rec.model) if row is not rec.best]
    for row in candidates:
        # The planner's memory model is the engine's it plans for; AutoModel's FSDP2 is judged by its own rules.
        recipe = automodel_config(rec.config, rec.model, rec.goal, row, seq_length)
        notes = [] if row is rec.best else [
            f"the planner's first layout ({_layout_text(rec.best)}) is not one AutoModel runs or fits; this is its "
            f"best layout AutoModel runs ({_layout_text(row)})"]
        notes.append(f"the memory and step-time estimates are the planner's for the {rec.engine} engine; the "
                     "recipe's memory fit was checked with AutoModel's FSDP2 sharding (validate's RA-M002)")
        text = automodel_yaml(recipe, command, title, notes)
        report = validate_text(text, config_path, dialect=AUTOMODEL)
        if not any(f.severity == "error" for f in report.findings):
            source = rec.layout_source if row is rec.best else LayoutSource(REPLANNED, None, notes[0])
            changes = automodel_changes(base, recipe, rec.changes) if base else []
            return replace(rec, best=row, config=recipe, config_yaml=text, findings=report.findings,
                           changes=changes, commands={"automodel": command + "\n"}, notes=rec.notes + notes,
                           emit="automodel", layout_source=source)
    return None  # the caller raises Impossible with no_automodel_layout()


def no_automodel_layout(rec) -> str:
    return (f"no fitting layout for {rec.model.id} on {rec.plan.request.world_size} GPUs is one NeMo AutoModel runs "
            "(it has no virtual pipeline stages or expert tensor parallelism, and its TP must divide the KV heads) "
            "and fits its memory estimate; try more GPUs, or --emit recipe-advisor")


def _layout_text(row: PlannedLayout) -> str:
    lay = row.layout
    return f"TP {lay.tp} PP {lay.pp} VP {lay.vp or '-'} CP {lay.cp} EP {lay.ep} ETP {lay.etp}"

"""The advised config of `recommend`: the base recipe with the planned layout, the request's values,
recommend's metadata, the bundled trainer's settings and the user's overrides.

The overrides come last, with two guarantees (service.recommend.request_overrides lifted every request key into
the request before planning and refused contradictions): the keys the request sets keep the planned
value even where a whole-section override left them out, and the recipe labels run_recipe.py reads
(``metadata.megatron_recipe``, ``metadata.precision_recipe``) stay the advisor's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from recipe_index import load_recipe_text
from recipe_index.cards import ModelCard
from recipe_index.recipes import RecipeEntry
from service.configs.changes import diff, effective
from service.configs.yamlio import OverrideError, load_yaml, plain_copy, with_overrides
from service.layouts.arithmetic import PIPELINE_SPLIT_KEYS, megatron_split_settings, split_problem
from service.layouts.bridge_tables import PIPELINE_LAYOUT_TABLES, explicit_layouts
from service.plan.search_space import needs_explicit_layout
from service.plan.types import PlannedLayout, PlanRequest
from service.recommend.launch_commands import DATASET_PRESET
from service.recommend.recipe_choice import model_name
from service.recommend.request_overrides import COUNT_KEYS, REQUEST_KEYS
from service.request import Override
from service.validate.rules.data_rules import TOKENIZING_DATASETS, mock_sample_count
from service.validate.rules.precision import precision_of_token
from trainer.contract.builders import PROJECT_ROOT
from trainer.contract.dotted import NotASection, set_dotted
from trainer.contract.dotted import get_dotted as _get
from trainer.contract.fast_paths import default_fast_paths
from trainer.contract.model_checks import SINGLE_FILE, has_hf_weights
from trainer.contract.step_scheduler import run_length, steps_per_epoch

# LoRA defaults added when a PEFT request falls back to a non-PEFT recipe.
LORA = {"megatron": {"method": "lora", "rank": 32, "alpha": 32.0},
        "bundled": {"method": "lora", "rank": 8, "alpha": 16.0}}
# The base recipe's labels of its Megatron Bridge recipe, kept in the advised config: service.configs.changes
# classifies megatron_recipe and precision_recipe as convergence, so dropping them would make
# `diff base advised` call every recommendation a new experiment.
RECIPE_LABELS = ("megatron_recipe", "megatron_aliases", "precision_recipe")
# Labels the advisor derives (the Bridge recipe and its FP8 scaling): an override may restate them,
# not change them, since the Bridge command runs the base recipe's function in its precision.
DERIVED_LABELS = ("metadata.megatron_recipe", "metadata.precision_recipe")
# Keys the request sets: after the overrides the config states the plan's value in the plan's spelling
# (an agreeing `H100-SXM` or model alias included), also where a whole-section override dropped it.
PLANNED_KEYS = (*REQUEST_KEYS, *COUNT_KEYS)
# Layout keys an override may change (recommend notes it), kept as planned when a section override drops them.
KEPT_WHEN_DROPPED = ("step_scheduler.local_batch_size",)
BUNDLED_DATA = "recipe_index/data/"  # samples that ship with the index
SIGNIFICANT_DIGITS = 12  # a scaled LR: 3e-05, not 2.9999999999999994e-05


def _set(data: dict, dotted: str, value) -> None:
    """Set a dotted key; None removes it, so the engine's default applies."""
    set_dotted(data, dotted, value, none_removes=True)


def base_config(recipe: Optional[RecipeEntry]) -> dict:
    if recipe is None:
        return {}
    text = load_recipe_text(recipe.name)
    return load_yaml(text, str(recipe.path)).data


def _place_layers(config: dict, card: ModelCard) -> None:
    """Megatron's settings for the pipeline split of the config's final layout (RA-L011): where the decoder
    layers do not divide over PP x VP and no layout string places them (the recipe's builder for a pair of its
    table, or ``pipeline_layout: explicit``), the accounting or edge-stage sizes ``stage_split`` sizes the stages
    by (the planner's estimates, for its own layout). The base recipe's own split stays where it still places
    this layout; one it no longer fits, or one beside a layout string (Megatron refuses both), goes."""
    model, layers = config.setdefault("model", {}), card.num_hidden_layers
    pp, vp = _get(config, "distributed.pp_size") or 1, _get(config, "distributed.vp_size") or 1
    written = {key: model[key] for key in PIPELINE_SPLIT_KEYS if key in model}
    by_string = (_get(config, "distributed.pipeline_layout") is not None
                 or (pp, vp) in PIPELINE_LAYOUT_TABLES.get(card.id, ()))
    if written and pp > 1 and not by_string and split_problem(layers, pp, vp, written) is None:
        return
    for key in written:
        del model[key]
    if pp > 1 and not by_string and layers % (pp * vp):
        model.update(megatron_split_settings(layers, pp, vp) or {})


def apply_layout(config: dict, row: PlannedLayout, request, engine: str) -> None:
    lay, req = row.layout, request
    dist = {"strategy": row.strategy, "tp_size": lay.tp, "pp_size": lay.pp, "vp_size": lay.vp, "cp_size": lay.cp,
            "ep_size": lay.ep, "etp_size": lay.etp if (lay.ep > 1 or lay.etp != lay.tp) else None,
            "sequence_parallel": lay.sp, "activation_checkpointing": lay.recompute,
            "grad_reduce_dtype": req.grad_reduce_dtype}
    if engine == "megatron":
        explicit = needs_explicit_layout(req, lay) and explicit_layouts(req.model.id)
        dist["pipeline_layout"] = "explicit" if explicit else None  # the recipe's layout builder places layers
        dist["use_distributed_optimizer"] = row.sharding in ("optimizer", "full")
        dist["use_megatron_fsdp"] = True if row.sharding == "full" else None
    else:
        dist["use_distributed_optimizer"] = dist["use_megatron_fsdp"] = None
    defaults = {"pp_size": 1, "vp_size": None, "cp_size": 1, "ep_size": 1, "etp_size": None,
                "grad_reduce_dtype": "fp32"}
    for key, value in dist.items():
        if _get(config, f"distributed.{key}") is None and defaults.get(key, object()) == value:
            continue  # leave schema defaults out rather than list them as changes
        _set(config, f"distributed.{key}", value)
    _set(config, "step_scheduler.local_batch_size", lay.micro_batch_size)
    _set(config, "step_scheduler.global_batch_size", req.global_batch_size)
    _set(config, "dataset.seq_length", req.seq_length)
    if _get(config, "model.seq_length") is not None:
        _set(config, "model.seq_length", req.seq_length)
    if _get(config, "validation_dataset.seq_length") is not None:
        _set(config, "validation_dataset.seq_length", req.seq_length)
    _set(config, "precision", req.precision)
    config["hardware"] = {"gpu_type": req.hardware.name, "gpus_per_node": req.gpus_per_node,
                          "num_nodes": req.num_nodes}


def _precision_label(base: dict, precision: str, fp8_recipe: Optional[str] = None) -> Optional[str]:
    """The FP8 recipe the request names (``fp8_recipe``: fp8cs, fp8mx, ...), else the base recipe's
    precision_recipe, or the new precision's when recommend changed it: the name itself (the index's bf16,
    nvfp4, ...), none for fp8, whose scaling (current, MXFP8, ...) only a recipe picks."""
    if fp8_recipe:
        return fp8_recipe
    label = _get(base, "metadata.precision_recipe")
    if label is None or effective(base, "precision") == precision:
        return label
    return None if precision == "fp8" else precision


def _metadata(config: dict, card: ModelCard, goal: str, engine: str, request, recipe: Optional[RecipeEntry],
              base: dict) -> str:
    label = _precision_label(base, request.precision, request.fp8_recipe)
    # Named as Bridge names its recipes, by the label written below where it names this precision (..._fp8cs).
    token = label if precision_of_token(label) == request.precision else request.precision
    name = f"{model_name(card)}_{goal}_{request.world_size}gpu_{request.hardware.name}_{token}".replace("-", "_")
    meta = {"name": name, "kind": "bundled" if engine == "bundled" else "library", "family": card.family,
            "model": card.id, "mode": goal, "hardware": request.hardware.name, "num_gpus": request.world_size,
            "source": f"recipe-advisor recommend from {recipe.name}" if recipe else "recipe-advisor recommend"}
    meta.update({key: _get(base, f"metadata.{key}") for key in RECIPE_LABELS})
    if recipe is not None and recipe.model != card.id:
        meta["description"] = (f"stand-in: built from {recipe.name}, a recipe of {recipe.model}, since the index has "
                               f"none for this model (the notes say why this one)")
    if recipe is not None and recipe.megatron_recipe:
        meta["megatron_recipe"] = recipe.megatron_recipe
    meta["precision_recipe"] = label
    config["metadata"] = {k: v for k, v in meta.items() if v is not None}
    return name


def _fine_tuning_data(config: dict, goal: str, notes: list[str]) -> None:
    """SFT/PEFT from a pretraining recipe: its mock data measures throughput only (RA-C007), so use
    the goal's Bridge dataset preset, as the index's SFT/PEFT recipes do."""
    mock = _get(config, "dataset.preset")
    if goal == "pretrain" or str(mock).lower() != "mock":
        return
    _set(config, "dataset.preset", DATASET_PRESET[goal])
    notes.append(f"dataset.preset {mock} -> {DATASET_PRESET[goal]}: the base recipe pretrains on mock data, "
                 f"{DATASET_PRESET[goal]} is Megatron Bridge's {goal.upper()} default; its "
                 "global batch and LR are still the pretraining recipe's, check them for fine-tuning")


def _pretrained_weights(config: dict, card: ModelCard, notes: list[str]) -> None:
    """Fine-tuning starts from the model's weights (the bundled loader's load_weights reads them beside a
    local config.json, or from the Hugging Face snapshot of the card's hf_id); without this it would
    tune a random initialisation."""
    if _get(config, "model.load_weights") is not None or _get(config, "model._target_") is not None:
        return
    folder = Path(card.hf_id) if card.hf_id else None
    if folder is not None and folder.is_dir():  # a local model: only the weights that lie beside it
        if not has_hf_weights(folder):
            config_file = Path(card.id) if card.id.endswith(".json") else folder / "config.json"  # as given
            notes.append(f"no safetensors beside {config_file} ({SINGLE_FILE} or its index): fine-tuning "
                         "starts from the trainer's deterministic initialisation; put the model's weights there")
            return
        _set(config, "model.load_weights", True)
        notes.append(f"model.load_weights: true: fine-tuning starts from the weights in {folder}")
        _weights_tokenizer(config, str(folder) if (folder / "tokenizer.json").is_file() else None, notes)
        return
    if not card.hf_id:
        notes.append(f"{card.id} has no published weights: fine-tuning starts from the trainer's deterministic "
                     "initialisation; point model.pretrained_model_name_or_path at a checkpoint folder")
        return
    _set(config, "model.load_weights", True)
    notes.append(f"model.load_weights: true: fine-tuning starts from {card.hf_id}'s weights, read from the "
                 "Hugging Face cache (download them first where HF_HUB_OFFLINE is set)")
    _weights_tokenizer(config, card.hf_id, notes)


def _weights_tokenizer(config: dict, tokenizer: Optional[str], notes: list[str]) -> None:
    """Published weights read token ids as their own tokenizer wrote them: the stand-in recipe's byte
    tokenizer would feed them ids that mean other tokens (the loss still falls; the fine-tune is garbage)."""
    sections = [name for name in ("dataset", "validation_dataset")
                if str(_get(config, f"{name}._target_") or "").startswith(TOKENIZING_DATASETS)
                and _get(config, f"{name}.tokenizer") in (None, "byte")]
    if not sections:
        return
    if tokenizer is None:
        keys = " and ".join(f"{name}.tokenizer" for name in sections)
        notes.append(f"no tokenizer.json beside the weights: set {keys}"
                     " to the model's tokenizer.json (the byte tokenizer's ids mean other tokens to these weights)")
        return
    for name in sections:
        _set(config, f"{name}.tokenizer", tokenizer)
    notes.append(f"{' and '.join(f'{name}.tokenizer' for name in sections)}: {tokenizer}, the tokenizer the "
                 "weights were trained with (its tokenizer.json, from the same place as the weights)")


def _carry_schedule(config: dict, contract: dict, source: str, notes: list[str]) -> None:
    """The contract recipe's LR and step count on a bundled stand-in recipe (tuned for a tiny model):
    the schedule keeps its shape (min LR in proportion to the LR, warmup and intervals to the steps)."""
    lr, steps = _get(contract, "optimizer.lr"), _get(contract, "step_scheduler.max_steps")
    old_lr, old_steps = _get(config, "optimizer.lr"), _get(config, "step_scheduler.max_steps")
    carried = []
    if lr and old_lr and lr != old_lr:
        carried.append(f"LR {lr}")
        _set(config, "optimizer.lr", lr)
        if _get(config, "lr_scheduler.min_lr") is not None:
            scaled = _get(config, "lr_scheduler.min_lr") * lr / old_lr
            _set(config, "lr_scheduler.min_lr", float(f"{scaled:.{SIGNIFICANT_DIGITS}g}"))
    if steps and old_steps and steps != old_steps:
        carried.append(f"{steps} steps")
        _set(config, "step_scheduler.max_steps", steps)
        for key in ("lr_scheduler.warmup_steps", "step_scheduler.val_check_interval",
                    "step_scheduler.checkpoint_interval"):
            if _get(config, key):
                _set(config, key, max(1, round(_get(config, key) * steps / old_steps)))
    if carried:
        notes.append(f"{' and '.join(carried)} from {source}")


def _stand_in_data(config: dict, row: PlannedLayout, world_size: int, notes: list[str], *,
                   epochs_given: bool = False) -> None:
    """What a stand-in recipe's bundled data does with the carried schedule, said (and, for mock data,
    made to last it unless ``epochs_given``: the user's num_epochs): the run ends at min(max_steps,
    num_epochs x steps per epoch). Data of the user's own is not read and needs no note."""
    s = {key: _get(config, f"step_scheduler.{key}") for key in ("global_batch_size", "max_steps", "num_epochs")}
    gbs, max_steps, epochs = s["global_batch_size"], s["max_steps"], s["num_epochs"] or 1
    mbs, dp = row.layout.micro_batch_size, row.layout.dp(world_size)
    dataset = _get(config, "dataset") or {}
    samples = mock_sample_count(dataset.get("_target_"), dataset)
    if samples is not None:
        if steps_per_epoch(samples, gbs, mbs, dp) == 0:
            samples = gbs
            _set(config, "dataset.num_samples", samples)
        per_epoch = steps_per_epoch(samples, gbs, mbs, dp)
        needed = -(-max_steps // per_epoch) if max_steps and not epochs_given else epochs
        if needed > epochs:
            _set(config, "step_scheduler.num_epochs", needed)
        notes.append(f"the data is synthetic (trainer.data.MockDataset, {samples} samples"
                     + (f", repeated for {needed} epochs to last the {max_steps} steps" if needed > epochs else "")
                     + "); for real data replace the section (its MockDataset keys do not carry over): --dataset "
                     f"\"{{_target_: trainer.data.JsonlPretrainDataset, path: YOUR.jsonl, seq_length: "
                     f"{_get(config, 'dataset.seq_length')}}}\" (validation_dataset likewise), and set num_epochs "
                     "for it")
        return
    rows = _bundled_rows(_get(config, "dataset.path"))
    if rows is None:  # the user's data
        return
    short = ""
    if rows < gbs:
        short = f"; its {rows} rows are fewer than one global batch of {gbs}: the run starts only with your data"
    elif max_steps:
        length = run_length(max_steps, epochs, steps_per_epoch(rows, gbs, mbs, dp))
        short = f"; its {rows} rows end the run after {length} of the {max_steps} steps" if length < max_steps else ""
    notes.append("the data is the bundled recipe's small sample: point dataset.path (and validation_dataset.path) "
                 f"at your data{short}")


def _bundled_rows(path) -> Optional[int]:
    """Rows of a JSONL sample that ships in recipe_index/data (never a user's file: those are not read)."""
    if not isinstance(path, str) or not path.startswith(BUNDLED_DATA):
        return None
    file = PROJECT_ROOT / path
    if not file.is_file():
        return None
    with open(file, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def _restore(config: dict, key: str, value) -> None:
    try:
        _set(config, key, value)
    except NotASection:
        pass  # a section overridden with a scalar or list: validation reports its type (RA-C002)


def _keep_planned(planned: dict, config: dict) -> None:
    """After the overrides: the request's keys as planned, dropped layout keys and metadata restored,
    and a derived recipe label the overrides change refused (OverrideError naming it)."""
    for key in DERIVED_LABELS:
        value, derived = _get(config, key), _get(planned, key)
        if value is not None and value != derived:
            raise OverrideError(
                f"--{key} {value}: the advisor derives this label ({derived or 'none here'}) from the base recipe "
                "and the precision, and the Megatron Bridge command runs that recipe; choose the precision (and an "
                "FP8 recipe: fp8cs, fp8ds, fp8mx, fp8sc) with --precision and the recipe with --model, --goal, --gpus "
                "and --gpu-type")
    for key in PLANNED_KEYS:
        if _get(planned, key) is not None:
            _restore(config, key, _get(planned, key))
    metadata = [f"metadata.{name}" for name in planned.get("metadata") or {}]
    for key in (*KEPT_WHEN_DROPPED, *metadata):
        if _get(config, key) is None and _get(planned, key) is not None:
            _restore(config, key, _get(planned, key))


def build_config(card: ModelCard, goal: str, engine: str, recipe: Optional[RecipeEntry], row: PlannedLayout,
                 request: PlanRequest, overrides: Sequence[Override], notes: Optional[list[str]] = None,
                 contract: Optional[dict] = None, *, base: Optional[dict] = None) -> tuple[dict, dict]:
    """(base config, advised config); says in ``notes`` what it changed beyond the layout. ``contract``:
    the config whose convergence contract the request keeps, when it is not the base recipe's; ``base``:
    the recipe's config (base_config), when the caller has loaded it. Neither is changed."""
    notes = [] if notes is None else notes
    base = base_config(recipe) if base is None else base
    config = plain_copy(base)  # a deep, plain copy
    config.pop("metadata", None)
    model_name = card.hf_id if engine == "megatron" and card.hf_id else card.id
    named = _get(config, "model.pretrained_model_name_or_path")
    if named is None or (named != model_name and (recipe is None or recipe.model != card.id)):
        _set(config, "model.pretrained_model_name_or_path", model_name)
    if goal == "peft" and not config.get("peft"):
        config["peft"] = dict(LORA[engine])
    if goal != "peft":
        config.pop("peft", None)
    if engine == "bundled" and goal != "pretrain":
        _pretrained_weights(config, card, notes)
    _fine_tuning_data(config, goal, notes)
    if engine == "bundled" and contract and recipe is not None and recipe.model != card.id:  # a stand-in recipe
        _carry_schedule(config, contract, _get(contract, "metadata.name") or "the model's library recipe", notes)
    apply_layout(config, row, request, engine)
    stand_in = engine == "bundled" and contract and recipe is not None and recipe.model != card.id
    name = _metadata(config, card, goal, engine, request, recipe, base)
    if engine == "bundled":
        _set(config, "checkpoint.checkpoint_dir", f"checkpoints/{name}")
        # The trainer's fast paths for this hardware (execution settings), where the recipe is silent.
        hw = request.hardware
        for key, value in default_fast_paths(hw.name, hw.arch, _get(config, "optimizer._target_"),
                                             _get(config, "loss_fn._target_"),
                                             _get(config, "step_scheduler.max_steps"),
                                             strategy=_get(config, "distributed.strategy") or "fsdp2").items():
            if _get(config, key) is None:
                _set(config, key, value)
    planned = config
    if overrides:
        config = with_overrides(config, overrides)
        _keep_planned(planned, config)
        moved = [c.key for c in diff(planned, config)
                 if c.key.startswith("distributed.") or c.key == "step_scheduler.local_batch_size"]
        if moved:
            notes.append(f"your overrides change the layout ({', '.join(moved)}): the layout, memory and time "
                         "shown are the planner's choice before them; `recipe-advisor plan` estimates yours")
    split_overridden = any(_get(planned, f"model.{key}") != _get(config, f"model.{key}") for key in PIPELINE_SPLIT_KEYS)
    if engine == "megatron" and not split_overridden:  # a split the user writes is theirs (RA-L011 judges it)
        _place_layers(config, card)
    if stand_in:  # after the overrides: it describes (and sizes the epochs of) the data the config ends with
        epochs_given = _get(config, "step_scheduler.num_epochs") != _get(base, "step_scheduler.num_epochs")
        _stand_in_data(config, row, request.world_size, notes, epochs_given=epochs_given)
    return base, config

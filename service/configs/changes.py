"""Which layer a config change belongs to: convergence, execution or benchmark-only.

The layers are those of the recipe recommender's configuration change control:

* **convergence**: starting checkpoint and trainable parameters, data (source, order, seeds),
  tokenizer, masking and packing, sequence length, global batch and token budget, objective,
  MoE routing and token dropping, optimizer and schedule, clipping, precision, PEFT settings.
  Changing one is a new experiment.
* **execution**: hardware, TP/PP/VP/CP/EP/ETP/DP/SP (Megatron Bridge's `model.*_parallel_size`
  and pipeline-split spellings too), recompute and offload, distributed optimizer / FSDP,
  overlap, fusions, attention backends, CUDA graphs, compilation, checkpoint I/O (not what is
  loaded: base weights, optimizer and RNG state are the starting point), MoE transport
  (all-to-all, DeepEP, HybridEP), profilers and timers, a correctness check turned on. Micro
  batch and gradient accumulation are execution only while the global batch is unchanged.
* **benchmark-only**: mock data, forced load balancing, correctness checks turned off,
  timing-only schedules. Their losses are not convergence evidence.

Packing, precision (the gradient reduce dtype included), forced MoE balancing, token dropping/capacity and
router or auxiliary-loss changes are never execution-only, whatever section they sit in.

Values are compared as the trainer reads them: a key a config leaves out takes its RecipeConfig
default (trainer/contract/config.py), or for a Megatron/Bridge correctness check that is off by default, off
(service.configs.bridge_keys.CHECK_DEFAULTS), so writing a default out is no change. Megatron configs
(``distributed.strategy: megatron`` on either side) are the exception for the keys the index does not
record (service.configs.bridge_keys.UNRECORDED): Bridge runs its recipe's value where a config leaves one out,
so one side writing it and the other not is a convergence change from or to ``<Bridge recipe value>``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from recipe_index import find_bundled_model
from service.configs.bridge_keys import BRIDGE_RECIPE_VALUE, CHECK_DEFAULTS, UNRECORDED
from service.configs.change_values import MISSING, effective_value, same_setting
from service.configs.yamlio import YamlError, load_yaml
from trainer.contract.dotted import get_dotted
from trainer.contract.text import clipped

LAYERS = ("convergence", "execution", "benchmark-only")

# Never execution-only: these win over the section a key sits in.
_CONVERGENCE_WORDS = re.compile(r"pack|precision|fp8|fp16|bf16|token_drop|capacity|router|aux_loss|z_loss|"
                                r"expert_bias|seq_length|seed|shuffle|tokenizer|mask|"
                                r"grad_reduce_dtype|grad_reduce_in_fp32", re.IGNORECASE)
# Correctness checks: turning one off is a benchmark shortcut, turning one on only watches the run.
# Bridge's spellings too: train.check_weight_hash_across_dp_replicas_interval, check_optimizer_step_success.
_CHECK_WORDS = re.compile(r"^check_|check_for_|nan_check|rerun_mode", re.IGNORECASE)
_OFF_VALUES = {"", "disabled", "none", "off", "false", "0"}
# Instruments that record the run (profilers, timers): the losses are unchanged.
_INSTRUMENT_WORDS = re.compile(r"profil|timing|timers", re.IGNORECASE)
# Shortcuts that make a run a benchmark only.
_BENCHMARK_WORDS = re.compile(r"force_load_balanc|rerun_state_machine|exit_interval|skip_train|benchmark",
                              re.IGNORECASE)
# Kernel choices: same math, other kernels. They win over the convergence words, whose `mask` or
# `router` would otherwise claim masked_softmax_fusion or moe_router_fusion.
_KERNEL_WORDS = re.compile(r"fusion|fused|grouped_gemm", re.IGNORECASE)
# Megatron Bridge's own spellings of the parallel layout (model.tensor_model_parallel_size, ...,
# model.pipeline_model_parallel_layout, model.num_layers_in_first_pipeline_stage, RA-L011's fix):
# they sit under `model` but are the hardware mapping, as distributed.tp_size is.
_LAYOUT_WORDS = re.compile(r"parallel_size|parallel_sizes|pipeline_model_parallel_layout|_pipeline_stage$|"
                           r"in_pipeline_split$|^sequence_parallel$|microbatch_group_size_per_vp_stage|"
                           r"^cp_comm_type$", re.IGNORECASE)
# What a run starts from (seed: "the starting checkpoint"): other weights or a fresh optimizer or RNG
# state are another experiment, though Bridge files them under `checkpoint` beside checkpoint I/O.
_STARTING_POINT = {
    "checkpoint.pretrained_checkpoint": "the starting checkpoint: other base weights are another experiment",
    "checkpoint.load_optim": "whether the optimizer state is loaded: a fresh optimizer state trains differently",
    "checkpoint.load_rng": "whether the RNG state is loaded: other seeds and dropout masks",
    "checkpoint.finetune": "finetune resets the iteration and optimizer state it loads",
    # Bridge's resume source and what is read from it, as restore_from.path is ours.
    "checkpoint.load": "the checkpoint the run resumes from (Bridge's load): another starting point",
    "checkpoint.ckpt_step": "which saved step the run starts from: another starting point",
    "checkpoint.load_main_params_from_ckpt": "whether the fp32 main parameters are read from the checkpoint: "
                                             "another starting point",
}
# Index metadata is not read by the trainer, except these: the FP8 recipe (current scaling, MXFP8, ...)
# is precision, and megatron_recipe is the function run_recipe.py --recipe builds the run from.
_CONVERGENCE_METADATA = {
    "metadata.precision_recipe": "the FP8 recipe is precision: never execution-only",
    "metadata.megatron_recipe": "the Megatron Bridge recipe run_recipe.py runs: another recipe is another experiment",
}
# Knobs of the hardware mapping.
_EXECUTION_WORDS = re.compile(r"dispatcher|deepep|hybridep|flex|overlap|cuda_graph|attention_backend|"
                              r"attn_implementation|offload|recompute|num_workers|pin_memory|prefetch|bucket|"
                              r"async_save|ckpt_format|backend|manual_gc", re.IGNORECASE)
# Section (or dotted prefix) -> layer, longest prefix first.
_SECTION_LAYER = (
    # The bundled trainer's fast paths (trainer/contract/fast_paths.py): same math, other kernels; they change
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
    # What is logged or profiled, and whether LoRA is saved merged: the trained weights are the same.
    ("logger", "execution"),
    ("profiling", "execution"),
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
        return {"key": clipped(self.key), "old": json_safe(_shown(self.old)), "new": json_safe(_shown(self.new)),
                "layer": self.layer}


# A change shows its key and values, and YAML aliases can repeat one large value many times: a 400 KB
# request answered 77 MB. Past trainer.contract.text.clipped's limit, its start and length.
def value_text(value: Any) -> str:
    """``repr(value)``, clipped."""
    return clipped(repr(value))


def _shown(value: Any) -> Any:
    """``value`` as JSON shows it: itself, or where its text is too long, that text clipped."""
    text = repr(value)
    shown = clipped(text)
    return value if shown == text else shown


def json_safe(value: Any) -> Any:
    """``value`` with the floats JSON cannot hold (inf, -inf, nan: YAML's .inf, .nan) as the strings
    ``"inf"``, ``"-inf"``, ``"nan"``: ``Infinity`` is no JSON, and ``null`` would read as an absent value."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value


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


@dataclass(frozen=True)
class _Edit:
    """One changed key as the rules below see it."""
    key: str
    old: Any
    new: Any
    global_batch_changed: bool

    @property
    def leaf(self) -> str:
        return self.key.rsplit(".", 1)[-1]

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]


Ruling = Optional[tuple[str, str]]


def _metadata(e: _Edit) -> Ruling:
    if e.key in _CONVERGENCE_METADATA:
        return "convergence", _CONVERGENCE_METADATA[e.key]
    if e.section == "metadata":
        return "execution", "index metadata: not read by the trainer"
    return None


def _starting_point(e: _Edit) -> Ruling:
    return ("convergence", _STARTING_POINT[e.key]) if e.key in _STARTING_POINT else None


def _mock_data(e: _Edit) -> Ruling:
    # Only a config that trains on mock data is a benchmark; mock -> real data is a data change.
    mock = isinstance(e.new, str) and "mock" in e.new.lower()
    if e.section in ("dataset", "validation_dataset") and mock and e.leaf in ("_target_", "preset"):
        return "benchmark-only", "mock data: the run measures throughput, its loss is not convergence evidence"
    return None


def _is_on(value: Any) -> bool:
    # MISSING is itself a string, so it is tested first: a dropped check runs at an unknown default.
    if isinstance(value, str) and value == MISSING:
        return False
    if isinstance(value, str):
        return value.strip().lower() not in _OFF_VALUES
    return bool(value)


def _correctness_check(e: _Edit) -> Ruling:
    if not _CHECK_WORDS.search(e.leaf):
        return None
    if e.old == MISSING and e.leaf in CHECK_DEFAULTS and not _is_on(e.new):
        return "execution", "states the check's default (off): nothing changes"
    if _is_on(e.new):
        return "execution", "a correctness check turned on: it watches the run, the losses are unchanged"
    return "benchmark-only", "a correctness check turned off (or left to an unknown default): " + _REASONS[
        "benchmark-only"]


def _instrumentation(e: _Edit) -> Ruling:
    if _INSTRUMENT_WORDS.search(e.leaf):
        return "execution", "profiling or timing: it records the run, the losses are unchanged"
    return None


def _benchmark_shortcut(e: _Edit) -> Ruling:
    return ("benchmark-only", _REASONS["benchmark-only"]) if _BENCHMARK_WORDS.search(e.key) else None


# The micro batch and the global batch in the schema's and in Megatron Bridge's spelling (`train.*`).
MICRO_BATCH_KEYS = ("step_scheduler.local_batch_size", "step_scheduler.grad_accumulation_steps",
                    "train.micro_batch_size")
GLOBAL_BATCH_KEYS = ("step_scheduler.global_batch_size", "train.global_batch_size")


def _micro_batch(e: _Edit) -> Ruling:
    if e.key not in MICRO_BATCH_KEYS:
        return None
    if e.global_batch_changed:
        return "convergence", "micro batch changed together with the global batch: the updates differ"
    return "execution", ("micro batch / accumulation with the global batch unchanged: same updates, "
                         "validate fresh loss sentinels for the new layout")


def is_parallel_layout_key(key: str) -> bool:
    """A parallel-layout setting in any spelling, Megatron Bridge's included
    (``model.tensor_model_parallel_size``, ``model.num_layers_in_first_pipeline_stage``, ...)."""
    return bool(_LAYOUT_WORDS.search(key.rsplit(".", 1)[-1]))


def _parallel_layout(e: _Edit) -> Ruling:
    if is_parallel_layout_key(e.key):
        return "execution", "the parallel layout (Megatron Bridge spelling): " + _REASONS["execution"]
    return None


def _kernel(e: _Edit) -> Ruling:
    if _KERNEL_WORDS.search(e.leaf):
        return "execution", "a kernel choice (fusion, grouped GEMM): " + _REASONS["execution"]
    return None


def _never_execution_only(e: _Edit) -> Ruling:
    if _CONVERGENCE_WORDS.search(e.leaf) or e.key == "precision":
        return "convergence", "never execution-only: " + _REASONS["convergence"]
    return None


def _execution_knob(e: _Edit) -> Ruling:
    if e.section != "distributed" and _EXECUTION_WORDS.search(e.leaf):
        return "execution", _REASONS["execution"]
    return None


def _by_section(e: _Edit) -> Ruling:
    for prefix, layer in _SECTION_LAYER:
        if e.key == prefix or e.key.startswith(prefix + "."):
            return layer, _REASONS[layer]
    return None


# First rule with an answer wins; the order is the precedence.
_RULES = (_metadata, _starting_point, _mock_data, _correctness_check, _instrumentation, _benchmark_shortcut,
          _micro_batch, _parallel_layout, _kernel, _never_execution_only, _execution_knob, _by_section)


def classify(key: str, old: Any, new: Any, *, global_batch_changed: bool = False) -> tuple[str, str]:
    """(layer, reason) of one changed key: the first of ``_RULES`` that has an answer."""
    edit = _Edit(key, old, new, global_batch_changed)
    for rule in _RULES:
        found = rule(edit)
        if found is not None:
            return found
    return "convergence", "unknown key: treated as convergence until shown otherwise"


def effective(config: dict, key: str) -> Any:
    """The value the trainer reads for a dotted key of a config: its own, else the schema default
    (MISSING where there is none)."""
    return effective_value(flatten(config), key)


def _reshaped_sections(left: dict[str, Any], right: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(sections one side writes as a value, a scalar or a list, and the other as a mapping: one change,
    shown whole; sections one side sets to null and the other writes: null is no section, so the keys inside
    are the changes)."""
    def sections(flat: dict[str, Any]) -> set[str]:
        return {key.rsplit(".", i)[0] for key in flat for i in range(1, key.count(".") + 1)}

    left_sections, right_sections = sections(left), sections(right)
    reshaped, nulled = set(), set()
    for flat, other in ((left, right_sections), (right, left_sections)):
        for key in other & set(flat):
            if not isinstance(flat[key], dict):  # `peft: {}` is a mapping too: its keys take their defaults
                (nulled if flat[key] is None else reshaped).add(key)
    return reshaped, nulled


_UNRECORDED_REASON = (
    "Megatron Bridge runs its recipe's value where a config leaves this key out (distributed.strategy: megatron "
    "on either side), and the index does not record that value: the side that writes it may train differently, "
    "so it counts as a new convergence experiment unless the value is checked against the recipe function")


def is_megatron(flat: dict[str, Any]) -> bool:
    """Whether a (flattened) config runs on Megatron Bridge: ``distributed.strategy: megatron``."""
    return effective_value(flat, "distributed.strategy") == "megatron"


def diff(base: dict, new: dict) -> list[Change]:
    """Every key whose value, schema defaults applied, differs between two configs, with its layer,
    in key order. ``old``/``new`` are as written (MISSING where a config leaves the key out), except
    an UNRECORDED key only one side of a Megatron pair writes: the other side runs
    BRIDGE_RECIPE_VALUE, which the index does not know, so it is a convergence change whatever the value."""
    left, right = flatten(base), flatten(new)
    gbs_changed = any(not same_setting(key, effective_value(left, key), effective_value(right, key))
                      for key in GLOBAL_BATCH_KEYS)
    megatron = is_megatron(left) or is_megatron(right)
    # Across megatron <-> fsdp2/ddp an unrecorded key neither side writes changes meaning too: Bridge's
    # recipe value on the one side, the trainer's default on the other.
    crossing = megatron and is_megatron(left) != is_megatron(right)
    reshaped, nulled = _reshaped_sections(left, right)
    changes = []
    for key in sorted(set(left) | set(right) | (UNRECORDED if crossing else set())):
        if key in nulled or any(key.startswith(section + ".") for section in reshaped):
            continue
        if key in reshaped:
            old, new_value = get_dotted(base, key), get_dotted(new, key)
            layer, reason = classify(key, old, new_value, global_batch_changed=gbs_changed)
            changes.append(Change(key, old, new_value, layer, reason))
            continue
        if key.startswith("metadata.") and key not in _CONVERGENCE_METADATA:
            continue  # index metadata (name, source, description): the trainer does not read it
        if crossing and key in UNRECORDED and key not in left and key not in right:
            changes.append(Change(key, BRIDGE_RECIPE_VALUE if is_megatron(left) else effective_value(left, key),
                                  BRIDGE_RECIPE_VALUE if is_megatron(right) else effective_value(right, key),
                                  "convergence", _UNRECORDED_REASON))
            continue
        old, new_value = left.get(key, MISSING), right.get(key, MISSING)
        if megatron and key in UNRECORDED and (old is MISSING) != (new_value is MISSING):
            changes.append(Change(key, BRIDGE_RECIPE_VALUE if old is MISSING else old,
                                  BRIDGE_RECIPE_VALUE if new_value is MISSING else new_value,
                                  "convergence", _UNRECORDED_REASON))
            continue
        same = same_setting(key, effective_value(left, key), effective_value(right, key))
        if same or _same_model(key, old, new_value):
            continue
        layer, reason = classify(key, old, new_value, global_batch_changed=gbs_changed)
        changes.append(Change(key, old, new_value, layer, reason))
    return changes


# Keys whose value may name a model: the model itself, and a tokenizer taken from a model (its tokenizer.json).
MODEL_NAMED_KEYS = ("model.pretrained_model_name_or_path", "dataset.tokenizer", "validation_dataset.tokenizer")


def _same_model(key: str, a: Any, b: Any) -> bool:
    """Two names of one bundled model (``llama3-8b``, ``meta-llama/Meta-Llama-3-8B``): the planner, and the
    trainer where no local folder has that name, resolve both to the same card, config and weights."""
    if key not in MODEL_NAMED_KEYS or not (isinstance(a, str) and isinstance(b, str)):
        return False
    first, second = find_bundled_model(a), find_bundled_model(b)
    return first is not None and second is not None and first.id == second.id


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


def load_diff_input(text: str, path: str) -> dict:
    """One side of a diff as data. A key written twice is refused at its position (validate reports it
    as RA-C003): YAML would keep the last value silently, and the diff would compare a value the author
    may not have meant. Keys that override a ``<<`` merge are no duplicates (service/configs/yamlio.py)."""
    doc = load_yaml(text, path)
    if doc.duplicates:
        key, line, column = doc.duplicates[0]
        more = f" ({len(doc.duplicates) - 1} more duplicate key(s) after it)" if len(doc.duplicates) > 1 else ""
        raise YamlError(f"RA-C003: `{key}` is set twice; YAML would silently keep the last value{more}",
                        path=path, line=line, column=column, fix="delete one of the two")
    return doc.data

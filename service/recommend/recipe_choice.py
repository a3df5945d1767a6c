"""Which recipe of the index a request starts from (the recipe decision tree): the model's own recipe
for the goal (SFT falls back to pretrain, PEFT to SFT then pretrain), else a stand-in recipe of another
model of the same modality and architecture kind, then family, then the closest size; among a model's
recipes, the one for this allocation."""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

from recipe_index import get_hardware, list_recipes, param_counts
from recipe_index.cards import ModelCard
from recipe_index.models import find_bundled_model
from recipe_index.recipes import RecipeEntry
from service.estimate import constants as C
from service.validate.rules.precision import precision_token_of, split_precision, token_runs_on


def _size(card: ModelCard) -> float:
    return float(param_counts(card).total)


def _pick(entries: list[RecipeEntry], hardware: str, world: int, seq: Optional[int],
          precision: Optional[str] = None) -> RecipeEntry:
    """The entry for this allocation: long-context variants only for > 8K, one that runs on the GPU, the
    requested precision (the index normalises fp8cs/fp8ds/fp8mx to fp8; a requested FP8 recipe token prefers
    its own recipe), same hardware, closest GPU count. The asked precision comes before the recipe's GPU: the
    layout is re-planned for the GPU anyway, while another precision is another experiment (a relabelled
    recipe, and no Bridge command for it)."""
    card = get_hardware(hardware)
    precision, fp8_recipe = split_precision(precision) if precision else (None, None)

    def key(e: RecipeEntry) -> tuple:
        entry_seq = e.seq_length or 0
        long_wanted = seq is not None and seq > C.LONG_CONTEXT
        seq_miss = (entry_seq < seq) if long_wanted else (entry_seq > C.LONG_CONTEXT)
        precision_miss = precision is not None and e.precision != precision
        token = precision_token_of(e.precision_recipe, e.megatron_recipe or e.name)  # what it trains in
        cannot_run = not token_runs_on(token, card)  # e.g. MXFP8 on Hopper
        scaling_miss = fp8_recipe is not None and token != fp8_recipe
        return (seq_miss, cannot_run, precision_miss, scaling_miss, e.hardware != hardware,
                abs(math.log2((e.num_gpus or 1) / world)), len(e.name), e.name)
    return min(entries, key=key)


def choose_recipe(card: ModelCard, goal: str, engine: str, hardware: str, world: int, seq: Optional[int],
                  precision: Optional[str] = None) -> tuple[Optional[RecipeEntry], list[str]]:
    """The base recipe and the notes on how it was found (the recipe decision tree)."""
    kind = "bundled" if engine == "bundled" else "library"
    notes: list[str] = []
    goals = {"pretrain": ("pretrain",), "sft": ("sft", "pretrain"), "peft": ("peft", "sft", "pretrain")}[goal]
    for wanted in goals:
        own = [e for e in list_recipes(kind=kind, mode=wanted) if e.model == card.id]
        if own:
            chosen = _pick(own, hardware, world, seq, precision)
            if wanted != goal:
                notes.append(f"no {goal.upper()} recipe for {card.id}; fell back to {chosen.name} ({wanted}) and "
                             f"{'added LoRA (peft section)' if goal == 'peft' else 'switched it to ' + goal}")
            return chosen, notes
    pool = [e for e in list_recipes(kind=kind, mode=goal) if e.model]
    if not pool and engine == "bundled":
        pool = list_recipes(kind="bundled")
    chosen, reason = _stand_in(card, pool, hardware, world, seq, precision)
    if chosen is None:
        return None, [f"no {kind} recipe to start from; the config is built from the schema defaults"]
    notes.append(f"no {kind} recipe for {model_name(card)}; started from {chosen.name}, a stand-in recipe of another "
                 f"model: {reason}; with the model swapped and the layout re-planned")
    return chosen, notes


def _stand_in(card: ModelCard, pool: list[RecipeEntry], hardware: str, world: int, seq: Optional[int],
              precision: Optional[str]) -> tuple[Optional[RecipeEntry], str]:
    """The recipe of another model to start from, and why it was chosen: same modality (text or vision) and
    architecture kind (dense or MoE) first, then the same family, then the closest size."""
    sized = []
    for entry in pool:
        other = find_bundled_model(entry.model)
        if other is not None and other.is_moe == card.is_moe:
            sized.append((entry, other))
    if not sized:
        return None, ""
    vision = reads_images(card)
    modality = "vision-language" if vision else "text"
    kind = "MoE" if card.is_moe else "dense"
    why = []
    same_modality = [(e, m) for e, m in sized if e.reads_images == vision]
    if not same_modality:
        why.append(f"the index has no {modality} {kind} recipe for this goal, so a "
                   f"{'text' if vision else 'vision-language'} one")
    else:
        why.append(f"a {modality} {kind} recipe like the model")
    sized = same_modality or sized
    same_architecture = [(e, m) for e, m in sized if m.architecture == card.architecture]
    sized = same_architecture or sized
    family = [(e, m) for e, m in sized if _same_family(card, m)]
    if family:
        why.append(f"of the same family ({family[0][1].family})")
    target = _size(card)
    candidates = family or sized
    best_model = min({m.id: m for _, m in candidates}.values(), key=lambda m: abs(math.log(_size(m) / target)))
    why.append(f"the closest size ({best_model.id}, {_billions(best_model)} parameters; this model "
               f"{_billions(card)})")
    entries = [e for e, m in candidates if m.id == best_model.id]
    return _pick(entries, hardware, world, seq, precision), ", ".join(why)


def _same_family(card: ModelCard, other: ModelCard) -> bool:
    """The index's family name, or for a config.json outside the index (which names no family of the index's
    spelling) the same Hugging Face model_type."""
    if card.family and other.family == card.family:
        return True
    return bool(card.model_type) and other.model_type == card.model_type


def _billions(card: ModelCard) -> str:
    return f"{_size(card) / 1e9:.1f}B"


@lru_cache(maxsize=None)
def _bundled_reads_images(model_id: str) -> bool:
    return any(e.reads_images for e in list_recipes() if e.model == model_id)


def reads_images(card: ModelCard) -> bool:
    """A vision-language model: its config.json has a vision tower, or the index's recipes for it read images."""
    return card.vision_language or _bundled_reads_images(card.id)


def model_name(card: ModelCard) -> str:
    """The name a built config is named by: the bundled id, else the model's own name (config.json's
    `_name_or_path`, or the folder holding it; the repo's name for a Hub id), never a file path."""
    if find_bundled_model(card.id) is not None:
        return card.id
    if card.name_or_path:
        source = Path(card.name_or_path.rstrip("/")).name
    elif card.id.endswith(".json"):
        source = Path(card.id).resolve().parent.name
    else:
        source = card.id.rsplit("/", 1)[-1]
    return re.sub(r"[^a-z0-9]+", "_", source.lower()).strip("_") or "model"

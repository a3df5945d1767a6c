"""Which recipe of the index a request starts from (the recipe decision tree): the model's own recipe
for the goal (SFT falls back to pretrain, PEFT to SFT then pretrain), else the closest size of the
same family; among a model's recipes, the one for this allocation."""

from __future__ import annotations

import math
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
    sized = []
    for entry in pool:
        other = find_bundled_model(entry.model)
        if other is not None and other.is_moe == card.is_moe:
            sized.append((entry, other))
    if not sized:
        return None, [f"no {kind} recipe to start from; the config is built from the schema defaults"]
    family = [(e, m) for e, m in sized if card.family and m.family == card.family] or sized
    target = _size(card)
    best_model = min({m.id: m for _, m in family}.values(), key=lambda m: abs(math.log(_size(m) / target)))
    entries = [e for e, m in family if m.id == best_model.id]
    chosen = _pick(entries, hardware, world, seq, precision)
    where = f"the {card.family} family" if family is not sized else "the index"
    notes.append(f"no {kind} recipe for {card.id}; started from {chosen.name}, the closest size in {where} "
                 f"({best_model.id}), with the model swapped and the layout re-planned")
    return chosen, notes

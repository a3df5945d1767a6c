"""Where the decoder layers of a pipeline go: Megatron's split rules (RA-L011) and Megatron Bridge's layout tables
(RA-L019).

Megatron-Core places layers one of three ways, and refuses a model it cannot place at start-up:
- an explicit ``pipeline_model_parallel_layout`` (transformer_config.py ``TransformerConfig.__post_init__``, parsed
  and checked by pipeline_parallel_layer_layout.py ``PipelineParallelLayerLayout``);
- uneven first/last stages or the embedding/loss counted as layers (``TransformerConfig.__post_init__``, raise);
- else an even split: layers % PP == 0 and each rank's layers % VP == 0 (transformer_block.py
  ``get_num_layers_to_build``, assert; megatron/training/arguments.py ``validate_args`` asserts the same).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from service.facts import Facts
from service.layouts.arithmetic import divisors, megatron_split, megatron_split_settings, split_problem
from service.layouts.bridge_tables import (
    PIPELINE_LAYOUT_TABLES,
    needs_unwritten_layout,
    pipeline_pair_refused,
    recipe_pipeline,
)
from service.layouts.pipeline_layout import LayoutSyntaxError, empty_stages, even_layout, layout_problems, parse_layout
from service.validate.rules.registry import Violation, layout_rule
from service.validate.rules.sizes import bundled
from trainer.contract.pipeline_split import stage_layer_counts

LAYOUT_KEY = "model.pipeline_model_parallel_layout"


@layout_rule("RA-L011", "error", "distributed.pp_size", "decoder layers split over PP*VP stages",
             "mcore transformer_block.py get_num_layers_to_build (layers % PP, per-rank % VP: assert); "
             "transformer_config.py TransformerConfig.__post_init__ (uneven/accounted split, layout: raise); "
             "pipeline_parallel_layer_layout.py PipelineParallelLayerLayout.validate_layer_layout (assert)")
def layers_split_over_stages(f: Facts) -> Optional[Violation]:
    lay = f.layout
    if f.model is None:
        return None
    if f.extra.get("pipeline_layout") is not None:
        return _written_layout(f)
    if lay.pp == 1:
        return None
    layers, stages = f.model.num_hidden_layers, lay.pp * lay.vp_or_1
    placed = (lay.pp, lay.vp_or_1) in PIPELINE_LAYOUT_TABLES.get(f.model.id, ())
    split = f.extra.get("pipeline_split")
    if placed and split:  # the builder writes a layout string; Megatron takes not both
        return Violation(f"the Bridge recipe of {f.model.id} places PP={lay.pp} x VP={lay.vp_or_1} with a layout "
                         f"string, and Megatron refuses {', '.join(split)} together with one",
                         "remove those keys from model:", key=_split_key(split))
    if placed:  # the Bridge recipe's layout builder places them (RA-L019's pairs)
        return None
    if split:
        return _written_split(f, split)
    if layers % stages == 0 or recipe_pipeline(f.extra.get("megatron_recipe")) == (lay.pp, lay.vp_or_1):
        return None  # even, or the shipped Bridge recipe run at its own pipeline, whose function sets the split
    if bundled(f):  # the bundled trainer cuts its stages at Megatron's split itself (trainer/distributed/pipeline.py)
        return None if stage_layer_counts(layers, lay.pp, lay.vp_or_1) is not None else _no_split(f)
    settings = megatron_split_settings(layers, lay.pp, lay.vp_or_1)
    violation = _vp_breaks_split(f, settings is not None)
    if settings is None:  # no split places them: an error for the planner's facts too
        return violation or _no_split(f)
    violation = violation or Violation(
        f"{layers} decoder layers of {f.model.id} do not divide evenly over PP={lay.pp} x VP={lay.vp_or_1} = "
        f"{stages} stages and nothing places them otherwise: Megatron-Core asserts layers % PP == 0 (and each "
        "rank's layers % VP == 0) at start-up",
        f"set {megatron_split(layers, lay.pp, lay.vp_or_1)} under `model:` (Megatron's model config), or pick "
        f"PP x VP dividing {layers}",
        key=_split_key(settings), at="distributed.pp_size")  # the key its fix sets, at the line that broke it
    if f.extra.get("planner"):  # the config builder writes the split with the layout (config_build._place_layers)
        return replace(violation, severity="warning")
    return violation


def _vp_breaks_split(f: Facts, split_exists: bool) -> Optional[Violation]:
    """The even split that only VP breaks: the layers divide over PP, a rank's share not into VP chunks. The fix
    (and the key) is vp_size, to a divisor of the rank's share; else Megatron's uneven split where one exists."""
    lay, layers = f.layout, f.model.num_hidden_layers
    if lay.vp_or_1 == 1 or layers % lay.pp:
        return None
    per_rank = layers // lay.pp
    chunks = [d for d in divisors(per_rank) if 1 < d <= 16]
    offer = (f"set distributed.vp_size to {' or '.join(map(str, chunks))} (divisors of {per_rank}), or leave it out"
             if chunks else "leave distributed.vp_size out")
    return Violation(f"{layers} decoder layers of {f.model.id} divide over PP={lay.pp} ({per_rank} per rank) but a "
                     f"rank's {per_rank} not into VP={lay.vp_or_1} chunks: Megatron-Core asserts each rank's layers "
                     "% VP == 0 at start-up",
                     offer + (
                         f", or set {megatron_split(layers, lay.pp, lay.vp_or_1)} under `model:` (Megatron's model "
                         "config)" if split_exists else ""), key="distributed.vp_size")


def _split_key(split: dict) -> str:
    return f"model.{next(iter(split))}"


def _written_split(f: Facts, split: dict) -> Optional[Violation]:
    lay, layers = f.layout, f.model.num_hidden_layers
    problem = split_problem(layers, lay.pp, lay.vp_or_1, split)
    if problem is None:
        return None
    return Violation(f"the model config's pipeline split does not place {layers} decoder layers on PP={lay.pp} x "
                     f"VP={lay.vp_or_1}: {problem}",
                     "remove those keys from model: (the layers divide evenly)" if layers % (lay.pp * lay.vp_or_1) == 0
                     else f"use {megatron_split(layers, lay.pp, lay.vp_or_1) or 'another PP x VP'} under model:",
                     key=_split_key(split))


def _no_split(f: Facts) -> Violation:
    lay, layers = f.layout, f.model.num_hidden_layers
    ok = [d for d in divisors(layers) if d <= 64]
    pairs = table_pairs(f)
    return Violation(f"{layers} decoder layers of {f.model.id} cannot be split over PP={lay.pp} x VP="
                     f"{lay.vp_or_1} stages in any way Megatron accepts",
                     (f"use a (pp_size, vp_size) pair its Bridge recipe places: {pairs}, or " if pairs else "")
                     + f"choose PP*VP among the divisors of {layers}: {ok}, or give "
                     "model.pipeline_model_parallel_layout (a Bridge layout string)")


def _written_layout(f: Facts) -> Optional[Violation]:
    """An explicit layout, checked as Megatron-Core checks it; its key is where the config wrote it."""
    lay, key = f.layout, f.extra.get("pipeline_layout_key", LAYOUT_KEY)
    split = f.extra.get("pipeline_split")
    if split:
        return Violation(f"a pipeline layout places the layers, and Megatron refuses {', '.join(split)} together "
                         "with one", "remove those keys from model:", key=_split_key(split))
    try:
        layout = parse_layout(f.extra["pipeline_layout"])
    except LayoutSyntaxError as exc:
        return Violation(f"the pipeline layout cannot be parsed: {exc}", _layout_fix(f, lay.vp_or_1), key=key)
    if layout is None:  # a marker: the recipe's layout builder writes it
        return None
    layers = None if f.model.architecture.startswith("hybrid") else f.model.num_hidden_layers
    mtp = f.extra.get("mtp_num_layers")
    problems = layout_problems(layout, layers, lay.pp, lay.vp, mtp)
    stages = len(layout.stages)
    if problems and stages % lay.pp == 0 and lay.vp is not None and lay.vp != stages // lay.pp:
        return Violation(f"the pipeline layout {problems[0]}",
                         f"set distributed.vp_size: {stages // lay.pp} (or leave it out: Megatron reads VP from the "
                         f"layout), or write a layout of {lay.pp * lay.vp} stages: {_layout_fix(f, lay.vp)}",
                         key="distributed.vp_size")
    if problems:
        vp = lay.vp or (stages // lay.pp if stages % lay.pp == 0 else 1)
        return Violation(f"the pipeline layout does not place the model as Megatron-Core needs: {'; '.join(problems)}",
                         _layout_fix(f, vp), key=key)
    empty = empty_stages(layout)
    if empty:  # Megatron builds them (pretty_repr prints "(empty stage)"), but those ranks hold nothing
        return Violation(f"the pipeline layout leaves stage(s) {', '.join(map(str, empty))} (0-based, of {stages}) "
                         "without any layer: those ranks idle through every microbatch",
                         _layout_fix(f, stages // lay.pp), severity="warning", key=key)
    return None


def _layout_fix(f: Facts, vp: int) -> str:
    layers, pp = f.model.num_hidden_layers, f.layout.pp
    written = even_layout(layers, pp, vp, f.extra.get("mtp_num_layers") or 0)
    if written is None:
        return f"write a layout of PP x VP = {pp * vp} stages that places the {layers} decoder layers"
    return f'use "{written}" (E embedding first, {layers} decoder layers t, L loss last; | between stages)'


def table_pairs(f: Facts) -> list[tuple[int, int]]:
    """The (PP, VP) pairs > 1 of the model's Bridge layout table that this world holds with the layout's
    TP, CP, EP and ETP (what RA-L011 and RA-L019 offer)."""
    lay, world = f.layout, f.world_size
    return [(pp, vp) for pp, vp in sorted(PIPELINE_LAYOUT_TABLES.get(f.model.id, ())) if pp > 1 and (
        not world or (world % (lay.tp * pp * lay.cp) == 0 and world % (pp * lay.ep * lay.etp) == 0))]


# A warning, not an error: a hand-written model.pipeline_model_parallel_layout places any pair, as
# NVIDIA's performance recipes do (DeepSeek-V3 PP 2 x VP 8, Kimi K2 PP 16); the library recipe that
# `run_recipe.py --recipe` builds does not.
@layout_rule("RA-L019", "warning", "distributed.pp_size", "(PP, VP) from the recipe's layout table",
             "Bridge library layout builders: a fixed (PP, VP) table, ValueError or an unset layout outside it (3g)")
def pipeline_pair_in_layout_table(f: Facts) -> Optional[Violation]:
    lay = f.layout
    if f.model is None or bundled(f) or f.extra.get("recipe_kind") == "benchmark":
        return None  # a performance recipe writes its own layout string (Megatron Bridge's recipes: layout_set)
    layers, pair = f.model.num_hidden_layers, (lay.pp, lay.vp_or_1)
    if not needs_unwritten_layout(f.model.id, layers, *pair):
        return None
    table = table_pairs(f)
    if pipeline_pair_refused(f.model.id, *pair):
        outcome = "raises ValueError for any other, so `run_recipe.py --recipe` fails at start-up"
    else:
        outcome = (f"leaves the layout unset for any other, and {layers} decoder layers do not split evenly over "
                   f"PP x VP = {lay.pp * lay.vp_or_1} stages without one")
    return Violation(f"pp_size={lay.pp} with vp_size={lay.vp_or_1}: Megatron Bridge's {f.model.id} library recipe "
                     f"builds its pipeline layout from a fixed table of (PP, VP) pairs and {outcome}",
                     f"use a (pp_size, vp_size) pair from {table} or pp_size: 1, or give Bridge "
                     "model.pipeline_model_parallel_layout (a layout string) yourself")

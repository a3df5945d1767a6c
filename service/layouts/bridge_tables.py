"""What Megatron Bridge's recipe builders accept, as tables: the (PP, VP) pairs a library recipe's pipeline layout
builder knows, and where Megatron-FSDP composes. The planner, the config builder and the rules read them here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from recipe_index import list_recipes

# Recipes whose layout builder knows only a fixed table of (PP, VP) pairs (Megatron Bridge, 3g,
# recipes/<family>/h100/*.py), keyed by the index's model id. The builders raise ValueError for another
# pair, except DeepSeek-V3's and GLM-4.5V's setters, which leave the layout unset (Megatron's own split
# rules apply: LAYOUT_TABLE_FALLS_BACK).
PIPELINE_LAYOUT_TABLES = {
    "deepseek-v3": frozenset({(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)}),
    "kimi-k2": frozenset({(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)}),
    "kimi-k25-vl": frozenset({(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)}),
    "olmoe-7b": frozenset({(1, 1), (2, 1), (4, 1), (2, 2)}),
    "moonlight-16b": frozenset({(1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 2)}),
    "glm-45v": frozenset({(4, 1), (8, 1), (16, 1)}),
}
LAYOUT_TABLE_FALLS_BACK = frozenset({"deepseek-v3", "glm-45v"})  # their setters leave the layout unset


def pipeline_pair_refused(model_id: str, pp: int, vp: int) -> bool:
    """Whether the model's Bridge library recipe raises for this pipeline (PP > 1 outside its table)."""
    table = PIPELINE_LAYOUT_TABLES.get(model_id)
    return (table is not None and model_id not in LAYOUT_TABLE_FALLS_BACK and pp > 1
            and (pp, vp) not in table)


def needs_unwritten_layout(model_id: str, layers: int, pp: int, vp: int) -> bool:
    """Whether `run_recipe.py --recipe` cannot run this pipeline as `recommend` writes it: the library
    recipe raises for the pair, or leaves the layout unset where the layers do not split evenly (a
    layout string, or first/last-stage sizes, would be needed, which no key=value override carries)."""
    table = PIPELINE_LAYOUT_TABLES.get(model_id)
    if table is None or pp == 1 or (pp, vp) in table:
        return False
    return pipeline_pair_refused(model_id, pp, vp) or layers % (pp * vp) != 0


@lru_cache(maxsize=256)
def explicit_layouts(model_id: str) -> bool:
    """Whether the model's Megatron recipes place layers with an explicit pipeline layout (their
    layout builders accept uneven PP x VP splits: Megatron Bridge, section 3g). Such a layout
    string balances the embedding and the loss with the decoder layers, so the memory and step-time
    models size its stages evenly (``explicit_layout``); NVIDIA's performance recipes write one for
    any (PP, VP), the library recipes only for the pairs of their table (RA-L019)."""
    for entry in list_recipes(kind="library") + list_recipes(kind="benchmark"):
        if entry.model == model_id and "pipeline_layout:" in entry.path.read_text(encoding="utf-8"):
            return True
    return False


def is_megatron_fsdp(strategy: str, sharding: Optional[str]) -> bool:
    """Megatron-FSDP: the training state sharded in full ("full") under strategy megatron."""
    return strategy == "megatron" and sharding == "full"


def megatron_fsdp_with_pp(strategy: str, sharding: Optional[str], pp: int) -> bool:
    """Megatron-FSDP together with pipeline stages; the planner never offers it, RA-L017 warns on configs
    that ask for it."""
    return is_megatron_fsdp(strategy, sharding) and pp > 1


@lru_cache(maxsize=1024)
def recipe_pipeline(megatron_recipe: Optional[str]) -> Optional[tuple[int, int]]:
    """(PP, VP) of the Megatron Bridge recipe the index holds under this name, or None. A shipped recipe
    whose layers do not divide over its own pipeline sets Megatron's split in its function (GLM-4.5's
    first/last stages, Llama 3.1 405B's and Qwen3-235B's embedding/loss accounting): keys the reference
    table, and so the index, does not record."""
    from recipe_index import get_recipe
    from recipe_index.errors import UnknownRecipeError
    from service.configs.yamlio import load_yaml

    try:
        entry = get_recipe(megatron_recipe) if megatron_recipe else None
    except UnknownRecipeError:
        return None
    if entry is None or entry.megatron_recipe != megatron_recipe:
        return None
    dist = load_yaml(entry.path.read_text(encoding="utf-8"), str(entry.path)).data.get("distributed") or {}
    return int(dist.get("pp_size") or 1), int(dist.get("vp_size") or 1)

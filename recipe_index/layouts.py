"""The parallel layout each index recipe runs: TP, PP, VP, CP, EP, ETP, micro batch, recompute, sharding.

Read from the recipe's own ``distributed`` and ``step_scheduler`` sections, on demand and once per recipe, so
listing the index stays a metadata read. `plan` labels each layout row with the recipes that run it
(``used_by``), and `recommend` starts from a tuned recipe's layout (service/recommend/layout_source.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import yaml

from recipe_index.recipes import RecipeEntry, list_recipes

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class RecipeLayout:
    tp: int
    pp: int
    vp: Optional[int]
    cp: int
    ep: int
    etp: int
    sp: bool
    micro_batch_size: int
    recompute: str
    fully_sharded: bool  # Megatron-FSDP (use_megatron_fsdp) or the bundled trainer's FSDP2
    global_batch_size: Optional[int] = None  # the batch it was sized (or tuned) for

    @property
    def key(self) -> tuple:
        """What a planned row is matched on: (TP, PP, VP, CP, EP, ETP, micro batch), VP 1 for none."""
        return (self.tp, self.pp, self.vp or 1, self.cp, self.ep, self.etp, self.micro_batch_size)

    def describe(self) -> str:
        vp = f" VP{self.vp}" if (self.vp or 1) > 1 else ""
        etp = f" ETP{self.etp}" if self.etp > 1 else ""
        return f"TP{self.tp} PP{self.pp}{vp} CP{self.cp} EP{self.ep}{etp} MBS{self.micro_batch_size}"


def _int(section: dict, key: str, default: int = 1) -> int:
    value = section.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


@lru_cache(maxsize=None)
def recipe_layout(entry: RecipeEntry) -> Optional[RecipeLayout]:
    """The layout a recipe of the index runs, or None when its file names none (a bundled CPU smoke test)."""
    document = yaml.load(entry.path.read_text(encoding="utf-8"), Loader=_LOADER)  # noqa: S506 (bundled file)
    dist = document.get("distributed") if isinstance(document, dict) else None
    steps = document.get("step_scheduler") if isinstance(document, dict) else None
    if not isinstance(dist, dict):
        return None
    steps = steps if isinstance(steps, dict) else {}
    vp = dist.get("vp_size")
    strategy = dist.get("strategy")
    tp, ep = _int(dist, "tp_size"), _int(dist, "ep_size")
    # Without experts, ETP is Megatron's default (TP's), as the planner writes it: a dense layout matches its row.
    return RecipeLayout(tp=tp, pp=_int(dist, "pp_size"),
                        vp=vp if isinstance(vp, int) and vp > 1 else None, cp=_int(dist, "cp_size"),
                        ep=ep, etp=_int(dist, "etp_size", tp) if ep > 1 else tp,
                        sp=bool(dist.get("sequence_parallel")), micro_batch_size=_int(steps, "local_batch_size"),
                        recompute=str(dist.get("activation_checkpointing") or "none"),
                        fully_sharded=bool(dist.get("use_megatron_fsdp")) or strategy == "fsdp2",
                        global_batch_size=steps.get("global_batch_size") if isinstance(
                            steps.get("global_batch_size"), int) else None)


@lru_cache(maxsize=None)
def recipes_on(model: str, hardware: str) -> tuple[tuple[RecipeEntry, RecipeLayout], ...]:
    """Every recipe of ``model`` sized for GPUs of type ``hardware``, with its layout."""
    found = []
    for entry in list_recipes(hardware=hardware):
        if entry.model == model:
            layout = recipe_layout(entry)
            if layout is not None:
                found.append((entry, layout))
    return tuple(found)

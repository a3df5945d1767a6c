"""For every Megatron recipe of the index, `plan` with the recipe's own model, GPU count, hardware,
sequence length, global batch, precision and goal lists the recipe's own layout among the valid
ones, or shows the rule that makes it invalid at its own size; a listed layout that does not fit
carries the memory that rules it out.

One test per model family (the plans of a family share requests, cached per module).
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from math import lcm
from pathlib import Path

import pytest

from recipe_index import find_bundled_model
from recipe_index.recipes import RECIPES_DIR
from service.configs.yamlio import load_yaml
from service.facts import Layout
from service.plan.planner import explain_layout, make_request, plan

MEGATRON = RECIPES_DIR / "megatron"


def _recipes() -> dict[str, list[Path]]:
    families: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(MEGATRON.rglob("*.yaml")):
        families[path.parent.name].append(path)
    return dict(families)


FAMILIES = _recipes()


def _read(path: Path) -> dict:
    return load_yaml(path.read_text(encoding="utf-8"), str(path)).data


def _layout(data: dict) -> Layout:
    d, steps = data["distributed"], data.get("step_scheduler", {})
    tp, ep = d.get("tp_size", 1), d.get("ep_size", 1)
    vp = d.get("vp_size")
    return Layout(tp=tp, pp=d.get("pp_size", 1), vp=vp if (vp or 1) > 1 else None, cp=d.get("cp_size", 1), ep=ep,
                  etp=d.get("etp_size") or (1 if ep > 1 else tp), sp=d.get("sequence_parallel", False),
                  micro_batch_size=steps.get("local_batch_size", 1))


@lru_cache(maxsize=None)
def _plan(model: str, gpus_per_node: int, nodes: int, gpu: str, seq: int, gbs: int, precision: str, goal: str):
    return plan(make_request(model, gpus_per_node, gpu, nodes=nodes, seq_length=seq, global_batch_size=gbs,
                             precision=precision, goal=goal))


def test_every_recipe_with_a_model_card_is_covered():
    """Recipes are skipped only when the index has no card for their model (diffusion, unreleased)."""
    without = []
    for paths in FAMILIES.values():
        for path in paths:
            meta = _read(path).get("metadata", {})
            if find_bundled_model(meta.get("model") or "") is None:
                without.append(path.name)
    total = sum(len(p) for p in FAMILIES.values())
    assert total > 400 and len(without) < 0.05 * total, without


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_plan_lists_each_recipe_layout_or_says_why_not(family):
    problems = []
    checked = 0
    for path in FAMILIES[family]:
        data = _read(path)
        meta, hw = data.get("metadata", {}), data.get("hardware", {})
        card = find_bundled_model(meta.get("model") or "")
        if card is None:
            continue
        seq = (data.get("dataset") or {}).get("seq_length") or (data.get("model") or {}).get("seq_length")
        layout = _layout(data)
        if "gpus_per_node" in hw:
            gpus, nodes, gpu = hw["gpus_per_node"], hw.get("num_nodes", 1), hw["gpu_type"]
        else:  # no GPU count in the recipe's name: its smallest world, PP x lcm(TP x CP, EP x ETP) (mbridge_rules 4)
            gpus = layout.pp * lcm(layout.tp * layout.cp, layout.ep * layout.etp)
            nodes, gpu = None, meta.get("hardware") or "h100"
        gbs = data.get("step_scheduler", {}).get("global_batch_size", 32)  # the schema default when unset
        result = _plan(card.id, gpus, nodes, gpu, seq, gbs,
                       data.get("precision", "bf16"), meta.get("mode", "pretrain"))
        checked += 1
        row = result.find(layout)
        if row is None:
            errors = [f for f in explain_layout(result.request, layout) if f.severity == "error"]
            if not errors:
                problems.append(f"{path.name}: {layout} is valid but missing from the plan")
            continue
        if not row.fits:
            reason = result.why_not_fitting(row)
            if not (row.memory.total > result.usable_gib and "GiB" in reason):
                problems.append(f"{path.name}: marked not fitting without a memory reason")
    assert checked, f"no recipe of {family} has a model card"
    assert not problems, "\n".join(problems)

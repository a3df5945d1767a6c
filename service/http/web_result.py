"""What the result page draws, computed from a /v1/recommend answer: no logic in the template.

The memory chart is one horizontal bar per GPU: a segment per kind of memory
(weights, gradients, optimizer state, activations, other), drawn to scale
against the card's capacity (solid line) and the usable share after headroom
(dashed line), so "does it fit, and by how much" is visible at a glance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.estimate.memory import gib_text, usable_memory_gib
from service.validate.rules.precision import fp8_recipe_of

SEGMENTS = (  # (key in memory_gib, label, colour)
    ("weights", "weights", "#2f6fde"),
    ("grads", "gradients", "#6c5ce7"),
    ("optimizer", "optimizer state", "#00a3a3"),
    ("activations", "activations", "#e67e22"),
    ("other", "other", "#7f8c8d"),
)
CHART_WIDTH, CHART_HEIGHT, BAR_Y, BAR_H = 1000, 104, 28, 40
TICK_STEPS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 50000)
COMMAND_TITLES = {
    "torchrun": "Single node (torchrun)",
    "torchrun_multinode": "Multi-node (torchrun on every node)",
    "sbatch": "Slurm (sbatch)",
    "megatron_bridge": "Megatron Bridge (run_recipe.py)",
    "automodel": "NeMo AutoModel (automodel CLI)",
}


@dataclass
class Segment:
    label: str
    gib: float
    color: str
    x: float
    w: float


def memory_chart(memory: dict[str, float], capacity_gib: float) -> dict[str, Any]:
    usable = usable_memory_gib(capacity_gib)
    total = memory["total"]
    scale_max = max(capacity_gib, total) * 1.04
    px = CHART_WIDTH / scale_max
    segments, x = [], 0.0
    for key, label, color in SEGMENTS:
        gib = float(memory.get(key) or 0.0)
        if gib <= 0:
            continue
        segments.append(Segment(label, gib, color, round(x, 2), round(gib * px, 2)))
        x += gib * px
    step = next((s for s in TICK_STEPS if scale_max / s <= 10), TICK_STEPS[-1])
    ticks = [{"x": round(v * px, 1), "label": f"{v:g}"} for v in range(0, int(scale_max) + 1, step)]
    ticks[0]["x"] = 8  # keep "0" inside the drawing
    return {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "bar_y": BAR_Y,
        "bar_h": BAR_H,
        "segments": segments,
        "capacity_x": round(capacity_gib * px, 1),
        "usable_x": round(usable * px, 1),
        "ticks": ticks,
        "percent": 100 * total / capacity_gib if capacity_gib else 0.0,
        "title": f"Memory per GPU: {gib_text(total)} GiB of {capacity_gib:g} GiB",
    }


def _precision_shown(config: dict) -> str:
    """The precision as the CLI's plan text shows it: an FP8 config by its FP8 recipe (fp8mx), else the precision."""
    precision = config.get("precision", "bf16")
    return (fp8_recipe_of(config) if precision == "fp8" else None) or precision


def result_view(data: dict[str, Any], query: str, filename: str) -> dict[str, Any]:
    """The template's context for one recommendation answer."""
    hardware, layout = data["hardware"], data["layout"]
    config = data["config"]
    dataset = config.get("dataset") or {}
    steps = config.get("step_scheduler") or {}
    recipe = data.get("recipe") or {}
    seq = dataset.get("seq_length") or (config.get("model") or {}).get("seq_length")
    gbs = steps.get("global_batch_size")
    usable = usable_memory_gib(hardware["memory_gib"])
    return {
        "model": data["model"],
        "goal": data["goal"],
        "engine": data["engine"],
        "gpu_type": hardware["gpu_type"],
        "gpus_per_node": hardware["gpus_per_node"],
        "num_nodes": hardware["num_nodes"],
        "world_size": hardware["world_size"],
        "capacity_gib": f"{hardware['memory_gib']:g}",
        "usable_gib": f"{usable:.1f}",
        "spare_gib": gib_text(usable - layout['memory_gib']['total']),
        "seq_length": seq or "-",
        "global_batch_size": gbs or "-",
        "tokens_per_step": f"{seq * gbs:,}" if seq and gbs else "-",
        "precision": _precision_shown(config),
        "recipe": {"name": recipe.get("name"), "kind": recipe.get("kind"),
                   "megatron_recipe": recipe.get("megatron_recipe"), "why": data["why"]},
        "notes": data["notes"],
        "why_first": data.get("why_first"),
        "best": layout,
        "chart": memory_chart(layout["memory_gib"], hardware["memory_gib"]),
        "others": data["other_layouts"],
        "findings": data["findings"],
        "changes": data["changes"],
        "yaml": data["config_yaml"],
        "commands": [{"title": COMMAND_TITLES.get(name, name), "command": text.rstrip()}
                     for name, text in data["commands"].items()],
        "query": query,
        "filename": filename,
    }

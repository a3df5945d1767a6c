"""Layouts tuned for the same model elsewhere, adapted to a request: the `transferred` candidate source.

When nobody tuned a recipe for exactly this request, an expert takes the layout of the same model's recipe on the
nearest hardware and size and adapts it. Nearest means, in this order: the same goal (mode), the closest sequence
length (by ratio: a long-context recipe's CP is for its length), the same precision (then the same format family:
any FP8 recipe for an FP8 request), the closest GPU count (by ratio), the closest GPU generation, then the same
NVLink domain size. Adapting keeps what the source chose and changes only what the
request's size forces:

- TP and the expert group (EP x ETP) stay inside the NVLink domain where the source kept them inside (shrunk to the
  request's domain when it is smaller), and across it where the source put them across;
- the GPU count is absorbed by DP; only when the model-parallel shape does not divide the count is PP rescaled
  (the nearest count that does), and only when no PP does is EP reduced;
- VP is kept where the layers still split over PP x VP; the micro batch where it divides the batch per replica.

A transfer is kept only when its layout passes every rule and fits (``service.plan.planner.plan_one``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from recipe_index import get_hardware
from recipe_index.cards import HardwareCard
from recipe_index.layouts import RecipeLayout, recipe_layout
from recipe_index.recipes import RecipeEntry, list_recipes
from service.estimate import constants as C
from service.facts import Layout
from service.layouts.arithmetic import divisors
from service.plan.types import Plan, PlannedLayout, PlanRequest

# GPU generations, oldest first: the distance between two cards' generations is their distance here.
GENERATIONS = ("ampere", "ada", "hopper", "blackwell", "rubin")
# Recipes whose layout NVIDIA sized (library) or tuned (benchmark) for Megatron; the bundled ones are smoke tests.
TRANSFER_KINDS = ("library", "benchmark")


@dataclass(frozen=True)
class Transfer:
    entry: RecipeEntry  # the source recipe
    source: RecipeLayout  # its layout, as written
    row: PlannedLayout  # the adapted layout, planned at the request's size
    changes: tuple[str, ...]  # what adapting changed, e.g. ("DP 2 -> 4",)
    world_size: int  # the request's GPU count
    goal: str  # the request's goal

    @property
    def note(self) -> str:
        """"tuned for h100 at 64 GPUs, adapted to 128: DP 2 -> 4", as the answers say it."""
        verb = "tuned" if self.entry.kind == "benchmark" else "sized"
        mode = "" if self.entry.mode == self.goal else f" for {self.entry.mode}"
        where = f"{verb}{mode} on {self.entry.hardware} at {self.entry.num_gpus} GPUs ({self.entry.name})"
        if not self.changes:
            return f"{where}, unchanged at {self.world_size}"
        return f"{where}, adapted to {self.world_size}: {', '.join(self.changes)}"


@lru_cache(maxsize=None)
def _model_recipes(model: str) -> tuple[tuple[RecipeEntry, RecipeLayout], ...]:
    found = []
    for entry in list_recipes():
        if entry.model == model and entry.kind in TRANSFER_KINDS and entry.hardware and entry.num_gpus:
            layout = recipe_layout(entry)
            if layout is not None:
                found.append((entry, layout))
    return tuple(found)


def _precision_distance(entry: RecipeEntry, token: str, precision: str) -> int:
    own = entry.precision_recipe or entry.precision
    return 0 if own == token else 1 if entry.precision == precision else 2


def _generation(hardware: HardwareCard) -> int:
    return GENERATIONS.index(hardware.arch) if hardware.arch in GENERATIONS else -len(GENERATIONS)


def nearness(entry: RecipeEntry, request: PlanRequest, token: str) -> tuple:
    """How far a recipe is from the request: mode, sequence length (ratio), precision, GPU count (ratio), generation,
    NVLink domain."""
    hardware = get_hardware(entry.hardware)
    seq = abs(math.log2((entry.seq_length or request.seq_length) / request.seq_length))
    return (entry.mode != request.goal, seq, _precision_distance(entry, token, request.precision),
            abs(math.log2(entry.num_gpus / request.world_size)),
            abs(_generation(hardware) - _generation(request.hardware)),
            hardware.nvlink_domain != request.hardware.nvlink_domain, entry.name)


def sources(request: PlanRequest, token: str, exclude: frozenset[str] = frozenset()
            ) -> list[tuple[RecipeEntry, RecipeLayout]]:
    """This model's index recipes on other hardware or GPU counts (or for another goal), nearest first; the
    recipes sized for exactly this request (tuned or library) and those in ``exclude`` left out."""
    found = [(entry, layout) for entry, layout in _model_recipes(request.model.id)
             if entry.name not in exclude and not (
                 entry.hardware == request.hardware.name and entry.num_gpus == request.world_size
                 and entry.mode == request.goal)]
    return sorted(found, key=lambda pair: nearness(pair[0], request, token))


def _inside(size: int, source_domain: int, target_domain: int, fits: list[int]) -> int:
    """A group size kept inside the NVLink domain as the source kept it: the largest of ``fits`` (descending
    candidates) within the request's domain when the source's group was inside its own and is too big here."""
    if size <= source_domain and size > target_domain:
        return next((f for f in fits if f <= target_domain), 1)
    return size


def adapt(source: RecipeLayout, source_hw: HardwareCard, source_gpus: int, request: PlanRequest
          ) -> Optional[tuple[Layout, tuple[str, ...]]]:
    """The source layout at the request's size (module docstring), and what changed; None when nothing does."""
    world, layers = request.world_size, request.model.num_hidden_layers
    experts = max(request.model.num_experts, 1)
    domain_s, domain_t = max(source_hw.nvlink_domain, 1), max(request.hardware.nvlink_domain, 1)
    changes: list[str] = []
    tp = _inside(source.tp, domain_s, domain_t, [d for d in reversed(divisors(world)) if source.tp % d == 0])
    etp = min(source.etp, tp) if source.ep > 1 else tp
    ep = _inside(source.ep * etp, domain_s, domain_t,
                 [d * etp for d in reversed(divisors(experts))]) // etp if source.ep > 1 else 1
    cp = source.cp
    if world % (tp * cp):
        return None
    pp, ep = _rescaled_pp(source.pp, ep, etp, tp, cp, world, layers, experts)
    if pp is None:
        return None
    vp = source.vp if pp == source.pp or (source.vp and pp > 1 and layers % (pp * source.vp) == 0) else None
    dp = world // (tp * pp * cp)
    mbs = next((m for m in sorted(C.MICRO_BATCH_SIZES, reverse=True)
                if m <= source.micro_batch_size and request.global_batch_size % (m * dp) == 0), None)
    if mbs is None:
        return None
    source_dp = source_gpus // (source.tp * source.pp * source.cp)
    expert = source.ep > 1  # a dense layout's ETP is TP's (Bridge's default), not a choice of its own
    for name, old, new in (("TP", source.tp, tp), ("PP", source.pp, pp), ("VP", source.vp or 1, vp or 1),
                           ("EP", source.ep, ep), ("ETP", source.etp if expert else etp, etp), ("DP", source_dp, dp),
                           ("micro batch", source.micro_batch_size, mbs)):
        if old != new:
            changes.append(f"{name} {old} -> {new}")
    layout = Layout(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, sp=source.sp and tp > 1,
                    micro_batch_size=mbs, recompute=source.recompute)
    return layout, tuple(changes)


def _rescaled_pp(pp: int, ep: int, etp: int, tp: int, cp: int, world: int, layers: int, experts: int
                 ) -> tuple[Optional[int], int]:
    """(PP, EP): the source's PP when the shape divides the count, else the nearest PP that does (the deeper one
    on a tie: less memory per GPU), else the source's PP with the largest EP that divides."""

    def divides(p: int, e: int) -> bool:
        return world % (tp * p * cp) == 0 and world % (p * e * etp) == 0 and p <= layers

    if divides(pp, ep):
        return pp, ep
    options = [p for p in divisors(world) if divides(p, ep)]
    if options:
        return min(options, key=lambda p: (abs(math.log2(p / pp)), -p)), ep
    for e in reversed(divisors(experts)):
        if e < ep and divides(pp, e):
            return pp, e
    return None, ep


def transfers(result: Plan, token: str, exclude: frozenset[str] = frozenset(), limit: Optional[int] = None
              ) -> list[Transfer]:
    """The adapted layouts that pass every rule and fit, nearest source first, one per distinct layout."""
    from service.plan.planner import plan_one  # the planner imports this module's callers

    request = result.request
    if request.engine != "megatron":
        return []
    found: list[Transfer] = []
    seen: set[tuple] = set()
    for entry, source in sources(request, token, exclude):
        adapted = adapt(source, get_hardware(entry.hardware), entry.num_gpus, request)
        if adapted is None:
            continue
        layout, changes = adapted
        key = (layout.tp, layout.pp, layout.vp or 1, layout.cp, layout.ep, layout.etp, layout.micro_batch_size)
        if key in seen:
            continue
        seen.add(key)
        row, _ = plan_one(result, layout)
        if row is None or not row.fits:
            continue
        found.append(Transfer(entry, source, row, changes, request.world_size, request.goal))
        if limit is not None and len(found) >= limit:
            break
    return found

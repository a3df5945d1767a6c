"""The planner's search space: every parallel layout, micro batch, recompute and sharding an engine may use.

``structures`` yields the (TP, PP, VP, CP, EP, ETP) shapes that divide the world size; the rules
(``service.validate.document.check_layout``) judge them, the planner (``service.plan.planner``) sizes and ranks them.
``--engine bundled`` takes only what ``trainer/contract/capabilities.py`` declares.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator, Optional

from service.estimate import constants as C
from service.estimate.memory import ModelShape
from service.facts import Layout
from service.layouts.arithmetic import divisors, megatron_split, sequence_parallel_splits
from service.layouts.bridge_tables import explicit_layouts
from trainer.contract.capabilities import CAPABILITIES

if TYPE_CHECKING:
    from service.plan.types import PlanRequest

RECOMPUTE_ORDER = ("none", "selective", "full")  # cheapest first: more recompute is only ever slower
# Virtual stages an explicit pipeline layout may use beyond the divisors of the layers per stage
# (the DeepSeek-V3 / Kimi K2 layout tables use 2, 4 and 8: Megatron Bridge, 3g).
EXPLICIT_LAYOUT_VPS = {2, 4, 8, 16}
# How each engine can shard the training state over data parallelism, best first, and the
# `distributed.strategy` that runs it. Megatron's plain DDP is never better than the
# distributed optimizer (same traffic, more memory), so it is not offered.
SHARDINGS = {
    "megatron": (("optimizer", "megatron"), ("full", "megatron")),
    "bundled": (("full", "fsdp2"), ("none", "ddp")),
}


def _allowed(engine: str, capability: str) -> bool:
    return engine == "megatron" or bool(CAPABILITIES.get(capability))


def needs_explicit_layout(request: PlanRequest, layout: Layout) -> bool:
    """True when the decoder layers do not divide evenly over the PP x VP stages of ``layout``: Megatron
    then needs a layout that places them (Bridge's layout builders, for models whose recipes have one)
    or first/last-stage sizes (RA-L011 names them)."""
    return layout.pp > 1 and request.model.num_hidden_layers % (layout.pp * layout.vp_or_1) != 0


def structures(request: PlanRequest, shape: ModelShape) -> Iterator[Layout]:
    """Every (TP, PP, VP, CP, EP, ETP) the engine may use that divides the world size.

    Divisibility (world by TP·PP·CP and PP·EP·ETP, experts by EP, CP halves of the sequence) is
    built in; everything else is left to the rules. TP stays within max(NVLink domain, GPUs per
    node): beyond it the rules warn and every collective crosses the slow link. VP takes the
    divisors of the layers per stage (and, for models whose recipes use explicit pipeline layouts,
    EXPLICIT_LAYOUT_VPS) up to MAX_VIRTUAL_PIPELINE, kept only where Megatron has a way to place
    the layers (the split rule's own helper; the rule still judges every layout).
    Bridge's ETP default applies (1 with EP > 1, else TP).
    """
    req, engine = request, request.engine
    world, seq, layers = req.world_size, req.seq_length, shape.layers
    world_divisors = divisors(world)
    tp_cap = max(req.hardware.nvlink_domain, req.gpus_per_node)
    tps = [t for t in world_divisors if t <= tp_cap] if _allowed(engine, "tensor_parallel") else [1]
    pps = [p for p in world_divisors if p <= layers] if _allowed(engine, "pipeline_parallel") else [1]
    cps = [1]
    if _allowed(engine, "context_parallel"):
        cp = 2
        while world % cp == 0 and seq % (2 * cp) == 0 and seq // cp >= C.MIN_TOKENS_PER_CP_RANK:
            cps.append(cp)
            cp *= 2
    eps = [1]
    if shape.is_moe and _allowed(engine, "expert_parallel"):
        eps = [e for e in divisors(shape.experts) if world % e == 0]
    use_vp = _allowed(engine, "virtual_pipeline")
    use_sp = _allowed(engine, "sequence_parallel")
    explicit = engine == "megatron" and explicit_layouts(req.model.id)

    def placeable(pp: int, vp: int) -> bool:
        return (explicit and pp * vp <= min(layers, C.MAX_EXPLICIT_LAYOUT_STAGES)) or _splits(layers, pp, vp)

    for tp in tps:
        for cp in cps:
            if world % (tp * cp):
                continue
            for pp in pps:
                if world % (tp * cp * pp) or not placeable(pp, 1):
                    continue
                vps: list[Optional[int]] = [None]
                if pp > 1 and use_vp:
                    options = set(divisors(math.ceil(layers / pp))) | (EXPLICIT_LAYOUT_VPS if explicit else set())
                    vps += [v for v in sorted(options) if 2 <= v <= C.MAX_VIRTUAL_PIPELINE and placeable(pp, v)]
                for ep in eps:
                    etp = 1 if ep > 1 else tp
                    if world % (pp * ep * etp):
                        continue
                    for vp in vps:
                        yield Layout(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp,
                                     sp=use_sp and tp > 1 and sequence_parallel_splits(seq, tp, cp))


def _splits(layers: int, pp: int, vp: int) -> bool:
    return pp == 1 or layers % (pp * vp) == 0 or megatron_split(layers, pp, vp) is not None


def micro_batch_sizes(request: PlanRequest, dp: int) -> list[int]:
    """Micro batches that split the global batch into whole accumulation steps on ``dp`` replicas;
    only 1 where Megatron Bridge trains on offline-packed sequences (``request.packed_sequence``: a
    pack already holds several samples, and Bridge refuses micro batch > 1 with it)."""
    gbs = request.global_batch_size
    sizes = (1,) if request.packed_sequence and request.engine == "megatron" else C.MICRO_BATCH_SIZES
    return [b for b in sizes if gbs % (b * dp) == 0]


def recomputes(engine: str, ep: int = 1) -> tuple[str, ...]:
    """The recompute settings the engine runs, cheapest first; the bundled trainer's expert parallel refuses
    selective recompute (trainer/contract/expert_checks.py), so its EP layouts are planned without it."""
    allowed = CAPABILITIES.get("recompute", RECOMPUTE_ORDER) if engine == "bundled" else RECOMPUTE_ORDER
    if engine == "bundled" and ep > 1 and not CAPABILITIES.get("ep_with_selective_recompute", True):
        allowed = [r for r in allowed if r != "selective"]
    return tuple(r for r in RECOMPUTE_ORDER if r in allowed)


def shardings(engine: str, peft: bool = False) -> tuple[tuple[str, str], ...]:
    if engine == "megatron":
        # Megatron Bridge's PEFT recipes keep the frozen base replicated per model-parallel rank
        # (distributed optimizer for the adapters; no Megatron-FSDP).
        return SHARDINGS["megatron"][:1] if peft else SHARDINGS["megatron"]
    return tuple((s, strategy) for s, strategy in SHARDINGS["bundled"] if strategy in CAPABILITIES["strategies"])

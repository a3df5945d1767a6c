"""The planner's ranking: fitting layouts by estimated tokens/s per GPU, ties broken by layout preferences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from service.estimate import constants as C
from service.validate.rules.layout import is_megatron_fsdp

if TYPE_CHECKING:
    from service.facts import Layout
    from service.plan.types import PlannedLayout


def _fsdp_last(row: PlannedLayout, fsdp_last: bool) -> bool:
    """A Megatron-FSDP row of a request whose precision puts it last among ties (MXFP8, NVFP4:
    ``PlanRequest.fsdp_last``). NVIDIA's published MXFP8 and NVFP4 layouts of dense models never use Megatron-FSDP
    while their BF16 and FP8 current-scaling ones do (benchmarks/README.md), and its gather of these formats arrived
    late (Megatron-LM #2239, Megatron Bridge #1213 / #1794); an MXFP8 weight also cannot be transposed from its
    gathered copy as a per-tensor FP8 one can (its scales run along one dimension), so the backward needs a second,
    column-wise copy every micro batch. MoE models are included: NVIDIA runs Megatron-FSDP with MXFP8 there only in
    variants named for it (DeepSeek-V3 `_fsdp`)."""
    return fsdp_last and is_megatron_fsdp(row.strategy, row.sharding)


def _preference(row: PlannedLayout, long_context: bool, comfortable_gib: float, layers: int,
                unlaunchable: Callable[[Layout], bool], fsdp_last: bool = False) -> tuple:
    """Among layouts the estimates cannot tell apart, in order:

    1. a pipeline the recipe can launch as written (``unlaunchable``: the Bridge library recipe's layout table
       lacks it);
    2. under MXFP8 or NVFP4, no Megatron-FSDP (:func:`_fsdp_last`);
    3. no CP unless the context is long (CP is for > 8K);
    4. no pipeline stage thinner than MIN_LAYERS_PER_STAGE layers (whole-layer placement costs such a stage
       more than the estimate resolves);
    5. smaller TP (TP costs collectives on every layer and stays in the node);
    6. memory headroom (above MEMORY_COMFORT_FRACTION of the GPU a layout risks allocator retries and
       fragmentation growth over a long run, and has no room for a longer batch; expert recipes stay below it);
    7. no PP without VP (the pipeline bubble);
    8. larger EP (for MoE, raise EP first);
    9. the faster estimate."""
    lay = row.structure
    thin_stages = lay.pp > 1 and layers < C.MIN_LAYERS_PER_STAGE * lay.pp
    return (unlaunchable(lay), _fsdp_last(row, fsdp_last), 0 if long_context else lay.cp, thin_stages,
            lay.tp, row.memory_total_gib > comfortable_gib, lay.pp > 1 and lay.vp_or_1 == 1, -lay.ep,
            -(row.tokens_per_s or 0.0))


def rank(rows: list[PlannedLayout], long_context: bool = False, comfortable_gib: float = float("inf"), *,
         layers: int, unlaunchable: Callable[[Layout], bool] = lambda layout: False,
         fsdp_last: bool = False) -> list[PlannedLayout]:
    """Fitting layouts by estimated tokens/s per GPU, then the rest by memory.

    Estimates within ESTIMATE_TIE_TOLERANCE of the best of their group are a tie (the model's own
    error is larger than that), broken by :func:`_preference`; ``comfortable_gib`` is the
    memory above which a layout counts as tight (MEMORY_COMFORT_FRACTION of the GPU), ``layers``
    the model's decoder layers (for the stage-depth preference), ``fsdp_last`` whether the precision puts
    Megatron-FSDP last among ties.
    """

    def preference(row: PlannedLayout) -> tuple:
        return _preference(row, long_context, comfortable_gib, layers, unlaunchable, fsdp_last)

    fitting = sorted((r for r in rows if r.fits), key=lambda r: -r.tokens_per_s)
    ranked: list[PlannedLayout] = []
    start = 0
    while start < len(fitting):
        floor = fitting[start].tokens_per_s * (1 - C.ESTIMATE_TIE_TOLERANCE)
        end = start
        while end < len(fitting) and fitting[end].tokens_per_s >= floor:
            end += 1
        ranked.extend(sorted(fitting[start:end], key=preference))
        start = end
    rest = sorted((r for r in rows if not r.fits), key=lambda r: (r.memory_total_gib, preference(r)))
    return ranked + rest
